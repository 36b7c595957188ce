import { concatMap, from, map, of, type Observable, type SchedulerLike } from 'rxjs';
import { z } from 'zod';
import { defineState, messageId, UnparsedArguments, type AgentMiddleware, type IterationContext, type Message, type ModelRequest } from '../src/index';
import { isPromiseLike } from '../src/internal/isPromiseLike';
import { isGiveUpResponse } from './internal/modelGiveUp';
import { uniqueId } from '../src/internal/uniqueId';
import { checkOptions, checkScheduler, optionNames } from './internal/checkOptions';
import { sha256Hex } from './internal/sha256';

/**
 * Where {@link responseCache} keeps responses: an in-memory map, Redis, a file… `get` returns the
 * cached assistant message or `undefined` (or a Promise of either); `set` stores one for `ttlMs`
 * (it may return a Promise, which the run waits for).
 */
export interface ResponseCacheStore {
  get(key: string): Message | undefined | PromiseLike<Message | undefined>;
  set(key: string, value: Message, ttlMs: number): void | PromiseLike<void>;
}

/** Options of {@link responseCache}. */
export interface ResponseCacheOptions {
  /** Where responses are kept (default: in memory, per middleware instance, on the scheduler's clock). */
  store?: ResponseCacheStore;
  /** How long a response stays cached, in ms (default 600000; `Infinity`: forever). */
  ttl?: number;
  /** The cache key of a request (default {@link responseCacheKey}). */
  key?: (request: ModelRequest) => string;
  /** The clock of the default store (default: the run's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link ResponseCacheOptions}: any other is refused. */
const OPTIONS = optionNames<ResponseCacheOptions>({ store: true, ttl: true, key: true, scheduler: true });

/**
 * Caches model responses. Before a model call, the request's key is looked up in `store`: a hit
 * skips the call (`skipModelCall`) and replays the cached assistant message (text and tool calls;
 * its tool calls run as if the model had asked for them) as that iteration's model output, so
 * its text is also emitted as `text-delta` (reasoning as `reasoning-delta`). A successful call
 * that was not served from the cache is stored, for `ttl` ms.
 *
 * - The default key ({@link responseCacheKey}) is a SHA-256 of the messages, instructions, tool names
 *   and settings (and the tool choice and the structured output, when set: they change the answer), serialised as JSON with the keys sorted at every depth (independent of key order).
 *   It is computed from the iteration context as this middleware sees it in `beforeIteration`:
 *   register `responseCache` after the middlewares that change the request there (`skills`,
 *   `iterationGuidance`…) so the key covers their changes.
 * - The default store lives in memory, shared by every run of this middleware instance by design
 *   (like a Redis client, it is a resource, not run state). An entry expires when its age on the
 *   scheduler's clock is >= `ttl`; a hit does not refresh it.
 * - Not stored: a call served from the cache, an iteration another middleware skipped or
 *   terminated before the call, an empty response, or one with tool-call arguments that were not JSON.
 *   A failed model call ends the run (or is handled by a retry operator) and is never stored, nor
 *   is the answer `modelRetry({ onFailure: 'continue' })` gives up with, in either order.
 * - A store whose `get`/`set` throws or rejects fails the run (the error names `responseCache`).
 *   When the store answers synchronously no Promise is involved (marble tests work).
 *
 * Options (defaults): `store` (in memory), `ttl` ms (600000), `key` (`responseCacheKey`),
 * `scheduler` (the run's; the default store's clock).
 *
 * @example
 * const cache = responseCache({ ttl: 60_000 });              // one instance: one shared cache
 * const agent = createAgent({ model, middleware: [skills({ skills }), cache] });
 * await agent.invoke('What is RxJS?');  // calls the model
 * await agent.invoke('What is RxJS?');  // served from the cache
 */
export function responseCache(options: ResponseCacheOptions = {}): AgentMiddleware {
  checkOptions('responseCache', options, OPTIONS);
  const { store, ttl = 600000, key = responseCacheKey, scheduler } = options;
  if (store !== undefined && (store === null || typeof store !== 'object' || typeof store.get !== 'function' || typeof store.set !== 'function')) {
    throw new TypeError("responseCache: 'store' must be an object with get(key) and set(key, value, ttlMs) methods");
  }
  if (typeof ttl !== 'number' || Number.isNaN(ttl) || ttl <= 0) {
    throw new TypeError(`responseCache: 'ttl' must be a positive number of ms (or Infinity), got ${String(ttl)}`);
  }
  if (typeof key !== 'function') {
    throw new TypeError("responseCache: 'key' must be a function (request) => string");
  }
  checkScheduler('responseCache', scheduler);

  // The key computed before this iteration's model call, to store its response after it (run state).
  // This instance's own: a second cache on the agent (an L1 in memory before an L2 in Redis, say)
  // must not store or clear it. A unique key, not a module counter (both builds may be loaded).
  const Pending = defineState({
    key: uniqueId('rx-agent.responseCache.pending'),
    schema: z.object({ key: z.string(), iteration: z.number() }).nullable(),
    initial: (): { key: string; iteration: number } | null => null,
    scope: 'run',
  });
  const clearPending = (ctx: IterationContext): IterationContext => (ctx.state(Pending) === null ? ctx : ctx.updateState(Pending, () => null));

  // Shared by every run of this instance by design (see the JSDoc).
  const memory = store ? undefined : new MemoryStore();
  const get = (ctx: IterationContext, k: string) => (memory ? memory.get(k, (scheduler ?? ctx.scheduler).now()) : (store as ResponseCacheStore).get(k));
  const set = (ctx: IterationContext, k: string, value: Message) =>
    memory ? memory.set(k, value, ttl, (scheduler ?? ctx.scheduler).now()) : (store as ResponseCacheStore).set(k, value, ttl);

  const lookup = (ctx: IterationContext, k: string, cached: unknown): IterationContext => {
    if (!isAssistantMessage(cached)) return ctx.updateState(Pending, () => ({ key: k, iteration: ctx.iteration }));
    for (const part of cached.content) {
      if (part.type === 'text') ctx.emit({ type: 'text-delta', iteration: ctx.iteration, text: part.text });
      else if (part.type === 'reasoning') ctx.emit({ type: 'reasoning-delta', iteration: ctx.iteration, text: part.text });
    }
    // A replay is a new message: it gets an id of its own (the cached one named the first answer).
    return clearPending(ctx).skipModelCall({ ...cached, id: messageId() });
  };

  return {
    name: 'responseCache',
    beforeIteration: concatMap((ctx) => {
      if (ctx.termination || ctx.response) return of(clearPending(ctx));
      const k = key(ctx.toRequest());
      if (typeof k !== 'string') throw new TypeError(`responseCache: 'key' must return a string, got ${typeof k}`);
      return whenDone(get(ctx, k), (cached) => lookup(ctx, k, cached));
    }),
    afterIteration: concatMap((ctx) => {
      const pending = ctx.state(Pending);
      if (pending === null) return of(ctx);
      const next = clearPending(ctx);
      const response = ctx.response;
      if (pending.iteration !== ctx.iteration || ctx.modelCallSkipped || !response || !isCacheable(response)) return of(next);
      return whenDone(set(ctx, pending.key, response), () => next);
    }),
  };
}

/**
 * The default cache key of {@link responseCache}: a SHA-256 (hex) of the request's messages,
 * instructions, tool names, settings and tool choice (when set), as JSON with the keys of every
 * object sorted.
 *
 * @example
 * responseCacheKey({ messages, tools: [], settings: { temperature: 0 } }); // 'a3f1…'
 */
export function responseCacheKey(request: ModelRequest): string {
  const material = {
    // A message's id names it, it does not say anything: the same conversation is the same request.
    messages: request.messages.map(withoutId),
    instructions: request.instructions,
    tools: request.tools.map((tool) => tool.name),
    settings: request.settings,
    // Left out when unset, so that such keys stay what they were; set, it changes the answer.
    toolChoice: request.toolChoice,
    // Likewise the structured output asked for: the same messages answer differently with a schema.
    output: request.output,
  };
  return sha256Hex(stableJson(material));
}

function withoutId(message: Message): Omit<Message, 'id'> {
  if (message.id === undefined) return message;
  const { id: _id, ...rest } = message;
  return rest;
}

/** JSON with the keys of every object sorted (undefined members left out, as JSON does). */
function stableJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'bigint') return JSON.stringify(value.toString());
    return JSON.stringify(value) ?? 'null';
  }
  const withJson = value as { toJSON?: () => unknown };
  if (typeof withJson.toJSON === 'function') return stableJson(withJson.toJSON());
  if (Array.isArray(value)) return `[${value.map((item) => (item === undefined || typeof item === 'function' ? 'null' : stableJson(item))).join(',')}]`;
  const record = value as Record<string, unknown>;
  const parts: string[] = [];
  for (const k of Object.keys(record).sort()) {
    const item = record[k];
    if (item === undefined || typeof item === 'function' || typeof item === 'symbol') continue;
    parts.push(`${JSON.stringify(k)}:${stableJson(item)}`);
  }
  return `{${parts.join(',')}}`;
}

/** Runs `then` on the value, at once when it is not a Promise (no Promise in the marble path). */
function whenDone<T>(value: T | PromiseLike<T>, then: (value: T) => IterationContext): Observable<IterationContext> {
  return isPromiseLike(value) ? from(Promise.resolve(value)).pipe(map(then)) : of(value).pipe(map(then));
}

function isAssistantMessage(value: unknown): value is Message {
  return !!value && typeof value === 'object' && (value as Message).role === 'assistant' && Array.isArray((value as Message).content);
}

function isCacheable(response: Message): boolean {
  if (response.content.length === 0 || isGiveUpResponse(response)) return false;
  for (const part of response.content) if (part.type === 'tool-call' && part.args instanceof UnparsedArguments) return false;
  return true;
}

/**
 * The default store: entries in insertion order, each with its expiry time. Every entry of one
 * instance has the same ttl, so the oldest expire first and a set sweeps them from the front.
 */
class MemoryStore {
  private readonly entries = new Map<string, { value: Message; expiresAt: number }>();

  get(key: string, now: number): Message | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (now >= entry.expiresAt) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: Message, ttl: number, now: number): void {
    for (const [k, entry] of this.entries) {
      if (now < entry.expiresAt) break;
      this.entries.delete(k);
    }
    this.entries.delete(key);
    this.entries.set(key, { value, expiresAt: now + ttl });
  }
}
