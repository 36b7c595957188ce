import { asyncScheduler, concatMap, from, map, Observable, of, type SchedulerLike } from 'rxjs';
import { z } from 'zod';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { NeedsApproval, Tool, ToolExecutionContext } from '../tools/defineTool';
import { ToolError } from '../tools/toolError';
import type { ToolSpec } from '../model/types';
import type { AgentMiddleware } from '../middleware/types';
import type { IterationContext } from '../middleware/contexts';
import { checkTimeoutMs } from '../internal/timers';
import { isScheduler } from '../internal/isScheduler';
import { isArray } from '../internal/isArray';
import { show } from '../internal/show';
import { checkOptions, optionNames } from '../internal/optionNames';
import { McpToolError } from './mcpToolError';

/** A tool as an MCP server lists it (`tools/list`): what {@link mcpTools}' predicates see. */
export interface McpToolInfo {
  readonly name: string;
  readonly title?: string;
  readonly description?: string;
  /** The JSON Schema of the arguments (an object schema). */
  readonly inputSchema: Readonly<Record<string, unknown>>;
  /** The server's hints (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`). */
  readonly annotations?: Readonly<Record<string, unknown>>;
}

/** The options of one MCP request, as the SDK's `Client` takes them. */
export interface McpRequestOptions {
  signal?: AbortSignal;
  timeout?: number;
  onprogress?: (progress: { progress: number; total?: number; message?: string }) => void;
}

/**
 * The part of an MCP `Client` (`@modelcontextprotocol/sdk`) that {@link mcpTools} uses: a
 * `Client` fits. Written out rather than taken from the SDK, so that any copy of it fits.
 */
export interface McpClient {
  listTools(params?: { cursor?: string }, options?: McpRequestOptions): Promise<{ tools: readonly object[]; nextCursor?: string }>;
  callTool(params: { name: string; arguments?: Record<string, unknown> }, resultSchema?: undefined, options?: McpRequestOptions): Promise<object>;
  /** Where `notifications/tools/list_changed` is handled (the SDK's `Protocol.setNotificationHandler`). */
  setNotificationHandler(schema: never, handler: never): void;
}

/** Which tools: a list of names, or a predicate over the tool as the server lists it. */
export type McpToolFilter = readonly string[] | ((tool: McpToolInfo) => boolean);

/** Options of {@link mcpTools}. */
export interface McpToolsOptions {
  /** Only these tools (default: every tool the server lists). */
  include?: McpToolFilter;
  /** Not these tools (applied after `include`). */
  exclude?: McpToolFilter;
  /**
   * Ask a person before a call runs: `true` for every tool, a list of tool names, or a predicate
   * over the tool and the call's arguments (a call is asked unless it returns `false`). Enforced by
   * the `permissions()` middleware, as a tool's own `needsApproval` is. Default: none.
   */
  needsApproval?: boolean | readonly string[] | ((tool: McpToolInfo, args: Record<string, unknown>) => boolean);
  /** How long a call may take, in ms on `scheduler` (default 60000, as the SDK's; `Infinity`: no limit). */
  timeoutMs?: number;
  /** Runs the calls' timeouts (default `asyncScheduler`). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link McpToolsOptions}: any other is refused. */
const OPTIONS = optionNames<McpToolsOptions>({ include: true, exclude: true, needsApproval: true, timeoutMs: true, scheduler: true });

/**
 * The tools of an MCP server, as a middleware that offers them to every model call: put it in
 * `createAgent({ middleware })`. `list()` gives them as rx-agent tools, for a look or a fixed list.
 * There is nothing to close: the client holds a tool set only weakly, so one the program no longer
 * references is garbage collected (the client is yours to close).
 *
 * @example
 * // One long-lived client, a tool set per request: nothing to close after.
 * const agent = createAgent({ model, middleware: [mcpTools(client, { include: user.allowedTools })] });
 */
export interface McpTools extends AgentMiddleware {
  /** The server's tools (filtered), listed on first use and again after the server says they changed. */
  list(): Promise<readonly Tool[]>;
}

/** Arguments reach the server as the model wrote them: an object, checked there against the tool's schema. */
const ARGUMENTS = z.record(z.string(), z.unknown());

/** The SDK's own timeout, out of the way: the call's timer on the scheduler decides. */
const NO_SDK_TIMEOUT = 2_147_483_647;

/**
 * The tools of a connected MCP `Client` (`@modelcontextprotocol/sdk`, an optional peer dependency)
 * as rx-agent tools, offered to the model by a middleware.
 *
 * The list is read with `tools/list` (every page) when a run first needs it and kept; when the
 * server sends `notifications/tools/list_changed`, the next model call lists the tools again. The
 * client gets one handler of that notification however many `mcpTools` share it; a handler set on
 * the client before, or after (e.g. by the `Client`'s `listChanged` option at `connect()`), still
 * runs: it is chained at the next use, which lists again. So the client may be connected before or
 * after `mcpTools` is called, as long as it is connected by the run. Before each model call
 * (`beforeIteration`) the middleware adds the tools to the call's tools; a name another tool of
 * the run already has fails the run with a TypeError naming it
 * (leave one out with `include` / `exclude`). A listing that fails fails the run's iteration,
 * naming the middleware `mcpTools`; the next run lists again.
 *
 * The model sees each tool's `inputSchema` as its JSON Schema (less its `$schema` key), and its
 * `description` (else its `title`). Arguments are checked by the server, which owns the schema:
 * here only that they are an object. A call is `tools/call` with the run's cancellation (an
 * unsubscribe, a cancel or `toolTimeout` aborts it, and the SDK tells the server) and a timeout of
 * `timeoutMs` on `scheduler` (`Tool '<name>' timed out after <ms> ms`). The server's progress
 * notifications become `tool-progress` events. What the model reads: the result's text content
 * joined by newlines, other content described (`[image: image/png]`, `[resource: <uri>]`…), or the
 * `structuredContent` when there is no content. A result with `isError: true` is an error result
 * with that text (an {@link McpToolError}); an error of the call itself (the server's JSON-RPC
 * error, a closed connection) is an error result `Error: <message>`. A tool the server marks
 * `readOnlyHint` or `idempotentHint` is `idempotent` (a durable run re-runs it on resume).
 *
 * It returns a middleware rather than a list: listing is asynchronous and a server's tools
 * change, while `createAgent({ tools })` is fixed when the agent is made. Offered per model call,
 * the tools stay current, and a durable run resumed elsewhere gets them again. A tool set needs no
 * closing: the client's handler holds it weakly, and one the program drops is garbage collected.
 *
 * @throws TypeError when `client` is not an MCP client or an option is malformed, naming it.
 *
 * @example
 * import { Client } from '@modelcontextprotocol/sdk/client/index.js';
 * import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
 * const client = new Client({ name: 'my-app', version: '1.0.0' });
 * await client.connect(new StdioClientTransport({ command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '.'] }));
 * const files = mcpTools(client, { exclude: ['move_file'], needsApproval: ['write_file', 'edit_file'] });
 * const agent = createAgent({ model, middleware: [files, permissions()] });
 */
export function mcpTools(client: McpClient, options: McpToolsOptions = {}): McpTools {
  if (client === null || typeof client !== 'object' || typeof client.listTools !== 'function' || typeof client.callTool !== 'function') {
    throw new TypeError(`mcpTools: 'client' must be a connected MCP Client (with listTools and callTool), got ${show(client)}`);
  }
  checkOptions('mcpTools', options, OPTIONS);
  const include = checkFilter('include', options.include);
  const exclude = checkFilter('exclude', options.exclude);
  const approval = checkApproval(options.needsApproval);
  const timeoutMs = options.timeoutMs === undefined ? 60_000 : checkTimeoutMs('mcpTools', "'timeoutMs'", options.timeoutMs);
  if (options.scheduler !== undefined && !isScheduler(options.scheduler)) {
    throw new TypeError(`mcpTools: 'scheduler' must be an rxjs SchedulerLike, got ${show(options.scheduler)}`);
  }
  const scheduler = options.scheduler ?? asyncScheduler;

  const state: Listing = { listed: undefined, listing: undefined, generation: 0 };
  const watch = watchTools(client, state);

  /** The kept list, or its listing; first checks that the client's handler is still ours. */
  const current = (): readonly Tool[] | Promise<readonly Tool[]> => {
    rewatch(client, watch);
    if (state.listed) return state.listed;
    if (state.listing) return state.listing;
    const started = state.generation;
    const pending = listAll(client).then((infos) => {
      const tools = infos.filter((info) => include(info) && !exclude(info)).map((info) => toTool(client, info, approval, timeoutMs, scheduler));
      if (state.generation === started) state.listed = tools; // else the list changed meanwhile: list again next time
      return tools;
    });
    state.listing = pending;
    const clear = () => {
      if (state.listing === pending) state.listing = undefined;
    };
    pending.then(clear, clear);
    return pending;
  };

  const offer = (ctx: IterationContext, tools: readonly Tool[]): IterationContext => {
    if (tools.length === 0) return ctx;
    const names = new Map(ctx.tools.map((tool) => [tool.name, tool]));
    for (const tool of tools) {
      const other = names.get(tool.name);
      if (other !== undefined && other !== tool) {
        throw new TypeError(`mcpTools: the MCP tool '${tool.name}' has the name of another tool of the run; leave one out with 'include' or 'exclude'`);
      }
    }
    return ctx.with({ tools: [...ctx.tools, ...tools.filter((tool) => names.get(tool.name) !== tool)] });
  };

  return {
    name: 'mcpTools',
    beforeIteration: (source) =>
      source.pipe(
        concatMap((ctx) => {
          const tools = current();
          return tools instanceof Promise ? from(tools).pipe(map((listed) => offer(ctx, listed))) : of(offer(ctx, tools));
        }),
      ),
    list: () => Promise.resolve(current()),
  };
}

/** Every page of `tools/list`, each tool checked. */
async function listAll(client: McpClient): Promise<McpToolInfo[]> {
  const infos: McpToolInfo[] = [];
  const seen = new Set<string>();
  const cursors = new Set<string>();
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? undefined : { cursor });
    if (page === null || typeof page !== 'object' || !Array.isArray(page.tools)) {
      throw new TypeError(`mcpTools: tools/list answered ${show(page).slice(0, 200)}, not { tools: [...] }`);
    }
    for (const tool of page.tools) {
      const info = toInfo(tool);
      if (seen.has(info.name)) throw new TypeError(`mcpTools: the MCP server lists the tool '${info.name}' twice`);
      seen.add(info.name);
      infos.push(info);
    }
    const next = page.nextCursor;
    cursor = typeof next === 'string' && next !== '' ? next : undefined;
    if (cursor !== undefined && cursors.has(cursor))
      throw new TypeError(`mcpTools: tools/list gave the page cursor '${cursor}' twice (the listing would never end)`);
    if (cursor !== undefined) cursors.add(cursor);
  } while (cursor !== undefined);
  return infos;
}

function toInfo(tool: unknown): McpToolInfo {
  const { name, title, description, inputSchema, annotations } = (tool ?? {}) as Record<string, unknown>;
  if (typeof name !== 'string' || name === '') throw new TypeError(`mcpTools: the MCP server lists a tool without a name: ${show(tool).slice(0, 200)}`);
  if (inputSchema === null || typeof inputSchema !== 'object' || Array.isArray(inputSchema)) {
    throw new TypeError(`mcpTools: the MCP tool '${name}' has no inputSchema object`);
  }
  return {
    name,
    title: typeof title === 'string' ? title : undefined,
    description: typeof description === 'string' ? description : undefined,
    inputSchema: inputSchema as Record<string, unknown>,
    annotations: annotations !== null && typeof annotations === 'object' ? (annotations as Record<string, unknown>) : undefined,
  };
}

function toTool(
  client: McpClient,
  info: McpToolInfo,
  approval: (tool: McpToolInfo) => NeedsApproval<Record<string, unknown>> | undefined,
  timeoutMs: number,
  scheduler: SchedulerLike,
): Tool<Record<string, unknown>, unknown> {
  const { name } = info;
  const description = info.description ?? info.title ?? '';
  const { $schema: _schema, ...parameters } = info.inputSchema;
  const spec: ToolSpec = Object.freeze({ name, description, parameters });
  const hints = info.annotations;
  return Object.freeze({
    name,
    description,
    parameters: ARGUMENTS,
    needsApproval: approval(info),
    idempotent: hints?.readOnlyHint === true || hints?.idempotentHint === true,
    execute: (args: Record<string, unknown>, ctx: ToolExecutionContext) => callTool(client, name, args, ctx, timeoutMs, scheduler),
    spec,
  });
}

/** One `tools/call`: its result as the model reads it; unsubscribing aborts it. */
function callTool(
  client: McpClient,
  name: string,
  args: Record<string, unknown>,
  ctx: ToolExecutionContext,
  timeoutMs: number,
  scheduler: SchedulerLike,
): Observable<unknown> {
  return new Observable<unknown>((subscriber) => {
    const controller = new AbortController();
    let answered = false; // then nothing to cancel: aborting would still send notifications/cancelled
    const timer =
      timeoutMs === Infinity
        ? undefined
        : scheduler.schedule(() => {
            const error = new ToolError(`Tool '${name}' timed out after ${timeoutMs} ms`);
            controller.abort(error);
            subscriber.error(error);
          }, timeoutMs);
    client
      .callTool({ name, arguments: args }, undefined, {
        signal: controller.signal,
        timeout: NO_SDK_TIMEOUT,
        onprogress: (progress) => ctx.progress(progress),
      })
      .then(
        (result) => {
          answered = true;
          let value: unknown;
          try {
            value = resultValue(name, result);
          } catch (error) {
            subscriber.error(error);
            return;
          }
          subscriber.next(value);
          subscriber.complete();
        },
        (error: unknown) => {
          answered = true;
          subscriber.error(error);
        },
      );
    return () => {
      timer?.unsubscribe();
      if (!answered && !controller.signal.aborted) controller.abort(new Error(`Tool '${name}' was cancelled`));
    };
  });
}

/** What the model reads of a `CallToolResult`; throws an {@link McpToolError} for `isError: true`. */
function resultValue(name: string, result: unknown): unknown {
  if (result === null || typeof result !== 'object') throw new TypeError(`the MCP tool '${name}' answered ${show(result).slice(0, 200)}`);
  const { content, structuredContent, isError, toolResult } = result as Record<string, unknown>;
  if (content === undefined && toolResult !== undefined) return toolResult; // a server of the 2024-10-07 protocol
  const text = Array.isArray(content) ? content.map(contentText).join('\n') : '';
  if (isError === true) throw new McpToolError(text === '' ? `Tool '${name}' failed` : text, result);
  if (text === '' && structuredContent !== undefined) return structuredContent;
  return text;
}

/** One content block as text: text as is, the other kinds described. */
function contentText(block: unknown): string {
  const { type, text, mimeType, uri, name, resource } = (block ?? {}) as Record<string, unknown>;
  switch (type) {
    case 'text':
      return typeof text === 'string' ? text : '';
    case 'image':
    case 'audio':
      return `[${type}: ${typeof mimeType === 'string' ? mimeType : 'unknown type'}]`;
    case 'resource_link':
      return `[resource link: ${String(uri)}${typeof name === 'string' && name !== '' ? ` (${name})` : ''}]`;
    case 'resource': {
      const embedded = (resource ?? {}) as Record<string, unknown>;
      if (typeof embedded.text === 'string') return `[resource: ${String(embedded.uri)}]\n${embedded.text}`;
      return `[resource: ${String(embedded.uri)}${typeof embedded.mimeType === 'string' ? `, ${embedded.mimeType}` : ''}]`;
    }
    default:
      return `[${typeof type === 'string' ? type : 'unknown'} content]`;
  }
}

/** What one tool set keeps of the server's list: dropped when the list changes. */
interface Listing {
  listed: readonly Tool[] | undefined;
  listing: Promise<readonly Tool[]> | undefined;
  generation: number;
}

/** One client's handler of `notifications/tools/list_changed`, shared by the client's tool sets. */
interface Watch {
  /**
   * The tool sets, held weakly: the client (a long-lived one especially) keeps none alive, and one
   * no longer referenced drops out here.
   */
  readonly sets: Set<WeakRef<Listing>>;
  /** Our latest handler, once installed (an earlier one still in a chain only passes on). */
  handler: ((notification: unknown) => unknown) | undefined;
  /**
   * Our handler as the client stores it, to tell whether it was replaced since; `undefined` when
   * the client's handlers cannot be read (not the SDK's `Client`): then installed once, and trusted.
   */
  stored: unknown;
}

const TOOLS_CHANGED = 'notifications/tools/list_changed';
const watches = new WeakMap<McpClient, Watch>();

/** Adds a tool set to its client's handler, installing the handler on the client's first. */
function watchTools(client: McpClient, listing: Listing): Watch {
  let watch = watches.get(client);
  if (watch === undefined) {
    watch = { sets: new Set(), handler: undefined, stored: undefined };
    watches.set(client, watch);
  }
  for (const ref of watch.sets) if (ref.deref() === undefined) watch.sets.delete(ref);
  watch.sets.add(new WeakRef(listing));
  rewatch(client, watch);
  return watch;
}

/**
 * Installs the client's handler unless it is still there. The SDK keeps one handler per
 * notification, and replaces it when asked: the `Client`'s `listChanged` option does so at
 * `connect()`, and a user may too. The handler found there is called after ours; and as a
 * notification may have come meanwhile, a replaced handler drops every tool set's list.
 */
function rewatch(client: McpClient, watch: Watch): void {
  if (typeof client.setNotificationHandler !== 'function') return;
  const handlers = notificationHandlers(client);
  if (watch.handler !== undefined) {
    if (watch.stored === undefined || handlers?.get(TOOLS_CHANGED) === watch.stored) return;
    changed(watch);
  }
  const before = handlers?.get(TOOLS_CHANGED);
  const handler = (notification: unknown): unknown => {
    if (watch.handler === handler) changed(watch);
    return before?.(notification);
  };
  client.setNotificationHandler(ToolListChangedNotificationSchema as never, handler as never);
  watch.handler = handler;
  const stored = handlers?.get(TOOLS_CHANGED);
  watch.stored = stored !== before ? stored : undefined;
}

/** The list changed: every tool set still referenced lists again on its next use. */
function changed(watch: Watch): void {
  for (const ref of watch.sets) {
    const listing = ref.deref();
    if (listing === undefined) {
      watch.sets.delete(ref);
      continue;
    }
    listing.generation++;
    listing.listed = undefined;
    listing.listing = undefined;
  }
}

/** The SDK's `Protocol` keeps its notification handlers in `_notificationHandlers`, by method. */
function notificationHandlers(client: McpClient): Map<string, (notification: unknown) => unknown> | undefined {
  const handlers = (client as { _notificationHandlers?: unknown })._notificationHandlers;
  return handlers instanceof Map ? (handlers as Map<string, (notification: unknown) => unknown>) : undefined;
}

function checkFilter(option: 'include' | 'exclude', filter: McpToolFilter | undefined): (tool: McpToolInfo) => boolean {
  const all = option === 'include';
  if (filter === undefined) return () => all;
  if (typeof filter === 'function') return (tool) => filter(tool) === true;
  if (!isArray(filter) || !filter.every((name) => typeof name === 'string')) {
    throw new TypeError(`mcpTools: '${option}' must be an array of tool names or a predicate (tool) => boolean, got ${show(filter)}`);
  }
  const names = new Set(filter);
  return (tool) => names.has(tool.name);
}

function checkApproval(needsApproval: McpToolsOptions['needsApproval']): (tool: McpToolInfo) => NeedsApproval<Record<string, unknown>> | undefined {
  if (needsApproval === undefined) return () => undefined;
  if (typeof needsApproval === 'boolean') return () => needsApproval;
  if (typeof needsApproval === 'function') return (tool) => (args) => needsApproval(tool, args);
  if (!isArray(needsApproval) || !needsApproval.every((name) => typeof name === 'string')) {
    throw new TypeError(
      `mcpTools: 'needsApproval' must be a boolean, an array of tool names or a predicate (tool, args) => boolean, got ${show(needsApproval)}`,
    );
  }
  const names = new Set(needsApproval);
  return (tool) => (names.has(tool.name) ? true : undefined);
}
