import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { isArray } from '../internal/isArray';
import { show } from '../internal/show';
import { checkOptions, optionNames } from '../internal/optionNames';

type NodeModules = [typeof import('node:http'), typeof import('node:events'), typeof import('node:timers/promises')];

/**
 * Node's modules, loaded when a server starts rather than imported, so that the rest of
 * `rx-agent/testing` (scriptedModel, the marble helpers) also bundles for a browser test runner.
 */
async function loadNodeModules(): Promise<NodeModules> {
  const process = (globalThis as { process?: { versions?: { node?: unknown }; getBuiltinModule?: (id: string) => unknown } }).process;
  if (typeof process?.versions?.node !== 'string') {
    throw new Error('startFakeOpenAIServer starts an HTTP server: it runs on Node.js, not in a browser');
  }
  const ids = ['node:http', 'node:events', 'node:timers/promises'];
  if (process.getBuiltinModule) return ids.map((id) => process.getBuiltinModule!(id)) as NodeModules;
  // Node before 20.16; a specifier in a variable, which bundlers leave alone.
  return (await Promise.all(ids.map((id) => import(/* @vite-ignore */ /* webpackIgnore: true */ id)))) as NodeModules;
}

/** A tool call the fake server streams. */
export interface FakeToolCall {
  /** The call id, e.g. `'call_1'`. */
  readonly id: string;
  /** The function name. */
  readonly name: string;
  /** The arguments: JSON text as is, or a value that is `JSON.stringify`'d. */
  readonly args: unknown;
  /** Over how many chunks the arguments are split (default 3). */
  readonly chunks?: number;
}

/** One streamed answer. */
export interface FakeReplyTurn {
  /** Answer text: a string is streamed word by word, an array chunk by chunk. */
  readonly text?: string | readonly string[];
  /**
   * Reasoning streamed before the text (string: word by word), as `delta.reasoning_content`, or on
   * the Responses API as a reasoning item's summary (`response.reasoning_summary_text.delta`).
   */
  readonly reasoning?: string | readonly string[];
  /**
   * Tool calls. Each starts with a chunk carrying its id and name, then its arguments split over
   * `chunks` chunks; with several calls the chunks interleave by index, as parallel calls do. On the
   * Responses API each is a `function_call` item, its arguments in `chunks` delta events, the calls
   * one after another.
   */
  readonly toolCalls?: readonly FakeToolCall[];
  /** Token usage reported at the end (when the request asks for it); estimated when omitted. */
  readonly usage?: { readonly prompt_tokens: number; readonly completion_tokens: number };
  /**
   * `finish_reason`; default `'tool_calls'` when there are tool calls, else `'stop'`. On the
   * Responses API, `'length'` and `'content_filter'` end the stream with `response.incomplete`.
   */
  readonly finish?: string;
  /** Delay before each chunk (each event on the Responses API), in milliseconds. */
  readonly delayMs?: number;
  /** Delay before the response headers (time to first byte), in milliseconds. */
  readonly latencyMs?: number;
  /**
   * Destroys the socket after this many chunks or Responses events (a connection cut mid-stream);
   * when the turn sends fewer, after its last one, before `data: [DONE]` (or the end).
   */
  readonly dropAfterChunks?: number;
}

/** An HTTP error answer. */
export interface FakeErrorTurn {
  readonly status: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** The body (JSON-encoded unless a string); default an OpenAI-style `{ error: { message } }`. */
  readonly body?: unknown;
}

/**
 * One scripted answer, or a function that picks it from the request body and the request's
 * number (0 for the first request the server received, counting on across loops).
 */
export type FakeOpenAITurn = FakeReplyTurn | FakeErrorTurn | ((request: FakeChatRequest, call: number) => FakeReplyTurn | FakeErrorTurn);

/** Options of {@link startFakeOpenAIServer}. */
export interface FakeOpenAIServerOptions {
  /** Start again from the first turn when the script runs out (default: answer 500, script exhausted). */
  loop?: boolean;
}

/** The keys of {@link FakeOpenAIServerOptions}: any other is refused. */
const OPTIONS = optionNames<FakeOpenAIServerOptions>({ loop: true });

/** A chat completions or Responses request body as the fake server received it (parsed JSON). */
export interface FakeChatRequest {
  readonly model?: string;
  readonly messages?: ReadonlyArray<Record<string, unknown>>;
  /** The Responses API's input items. */
  readonly input?: string | ReadonlyArray<Record<string, unknown>>;
  readonly stream?: boolean;
  readonly stream_options?: { readonly include_usage?: boolean };
  readonly [key: string]: unknown;
}

/** A running fake OpenAI server. */
export interface FakeOpenAIServer {
  /** The base URL, ending in `/v1`: pass it as the `OpenAI` client's `baseURL`. */
  readonly url: string;
  /** The parsed bodies of the requests received (chat completions and Responses), in order. */
  readonly requests: FakeChatRequest[];
  /** How many requests had their connection closed by the client before the server finished. */
  closedConnections(): number;
  /**
   * Resolves once {@link closedConnections} has reached `count` (a positive integer; default one
   * more than now, the next client-side close), at once if it already has.
   *
   * @example
   * await server.waitForClose(1); // the first close, even if it has already happened
   */
  waitForClose(count?: number): Promise<void>;
  /** Stops the server, destroying open connections; resolves when it is closed. */
  close(): Promise<void>;
}

/**
 * Starts a real HTTP server on 127.0.0.1 (a free port) that speaks the OpenAI chat completions
 * protocol, streaming (`data: {chunk}` … `data: [DONE]`) or not, and the Responses API, streaming
 * (`event: response.output_text.delta` / `data: {event}` …, ending with `response.completed`) or
 * not. Each `POST /v1/chat/completions` or `POST /v1/responses` (or without `/v1`) consumes the
 * next turn of the script, whichever API it is; when the script runs out the
 * server answers 500 with an error saying so, or, with `loop: true`, starts again from the first
 * turn (as `scriptedModel`'s `loop` does; an empty script still answers 500). It answers CORS preflights and allows any origin,
 * so a page in a browser can use it as its `baseURL` too (`dangerouslyAllowBrowser: true`).
 *
 * @example
 * const server = await startFakeOpenAIServer([
 *   { toolCalls: [{ id: 'call_1', name: 'get_weather', args: { city: 'Paris' } }] },
 *   { text: 'It is sunny in Paris.', delayMs: 20 },
 *   { status: 429, headers: { 'retry-after': '2' } },
 * ]);
 * const client = new OpenAI({ apiKey: 'test', baseURL: server.url });
 * // … use client, inspect server.requests …
 * await server.close();
 * // An answer to every request, however many (the turns start again when they run out):
 * const echo = await startFakeOpenAIServer([(request, call) => ({ text: `Answer ${call + 1}` })], { loop: true });
 */
export async function startFakeOpenAIServer(script: readonly FakeOpenAITurn[], options: FakeOpenAIServerOptions = {}): Promise<FakeOpenAIServer> {
  if (!isArray(script)) throw new TypeError(`startFakeOpenAIServer: 'script' must be an array of turns, got ${show(script)}`);
  checkOptions('startFakeOpenAIServer', options, OPTIONS);
  if (options.loop !== undefined && typeof options.loop !== 'boolean') {
    throw new TypeError(`startFakeOpenAIServer: 'loop' must be a boolean, got ${show(options.loop)}`);
  }
  const loop = options.loop === true && script.length > 0;
  // Checked here rather than when a request comes: a throw in the request handler would be lost.
  for (const turn of script) for (const call of (turn as FakeReplyTurn).toolCalls ?? []) chunkCount(call.chunks);
  const [{ createServer }, events, { setTimeout: sleep }] = await loadNodeModules();
  const requests: FakeChatRequest[] = [];
  const sockets = new Set<Socket>();
  const active = new Set<AbortController>();
  let closeWaiters: Array<{ readonly count: number; readonly resolve: () => void }> = [];
  let clientCloses = 0;
  let turnIndex = 0;
  let completionIds = 0;
  let closing: Promise<void> | undefined;

  const noteClientClose = (): void => {
    clientCloses++;
    const waiters = closeWaiters;
    closeWaiters = waiters.filter((waiter) => waiter.count > clientCloses);
    for (const waiter of waiters) if (waiter.count <= clientCloses) waiter.resolve();
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '').split('?')[0].replace(/\/+$/, '');
    const responsesApi = path === '/v1/responses' || path === '/responses';
    if (path !== '/v1/chat/completions' && path !== '/chat/completions' && !responsesApi) {
      req.resume();
      sendJson(res, 404, errorBody(`Fake OpenAI server: no route for ${req.method} ${req.url}`, 'not_found'));
      return;
    }
    if (req.method !== 'POST') {
      req.resume();
      sendJson(res, 405, errorBody(`Fake OpenAI server: ${req.method} not allowed, use POST`, 'method_not_allowed'));
      return;
    }

    // Watch for the client going away from the start: it may abort while we read the body.
    const abort = new AbortController();
    active.add(abort);
    let serverDone = false; // the server finished, or cut the connection itself
    res.on('close', () => {
      active.delete(abort);
      if (!res.writableFinished && !serverDone && !closing) noteClientClose();
      abort.abort();
    });

    let body: FakeChatRequest;
    try {
      body = JSON.parse(await readBody(req)) as FakeChatRequest;
      if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new Error('not an object');
    } catch (error) {
      serverDone = true;
      if (!res.destroyed) sendJson(res, 400, errorBody(`Invalid JSON body: ${(error as Error).message}`, 'invalid_request_error'));
      return;
    }
    if (res.destroyed) return;
    requests.push(body);

    const number = turnIndex++;
    if (number >= script.length && !loop) {
      serverDone = true;
      sendJson(
        res,
        500,
        errorBody(`Fake OpenAI server: script exhausted (request #${number + 1}, but the script has only ${script.length} turn(s))`, 'script_exhausted'),
      );
      return;
    }
    const scripted = script[number % script.length];
    const turn = typeof scripted === 'function' ? scripted(body, number) : scripted;

    if (isErrorTurn(turn)) {
      serverDone = true;
      const headers: Record<string, string> = { 'content-type': 'application/json', ...turn.headers };
      const payload =
        turn.body === undefined
          ? JSON.stringify(errorBody(`Fake OpenAI server: scripted HTTP ${turn.status}`, 'scripted_error'))
          : typeof turn.body === 'string'
            ? turn.body
            : JSON.stringify(turn.body);
      res.writeHead(turn.status, headers);
      res.end(payload);
      return;
    }

    const id = responsesApi ? `resp_fake${++completionIds}` : `chatcmpl-fake-${++completionIds}`;
    const model = typeof body.model === 'string' ? body.model : 'fake-model';
    const created = Math.floor(Date.now() / 1000);
    const plan = planChunks(turn);
    const usage = usageOf(turn, body, plan);

    if (turn.latencyMs) {
      try {
        await sleep(turn.latencyMs, undefined, { signal: abort.signal });
      } catch (error) {
        if (abort.signal.aborted) return; // the client went away: already counted
        throw error;
      }
    }

    const events = responsesApi ? responsesEvents(turn, plan, { id, model, created, usage }) : undefined;
    if (body.stream !== true) {
      serverDone = true;
      sendJson(res, 200, events ? events[events.length - 1].response : completionOf(id, model, created, plan, usage));
      return;
    }

    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    res.flushHeaders();

    const frames = events
      ? events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`)
      : chatFrames(body, plan, { id, model, created, usage });

    try {
      for (let i = 0; i < frames.length; i++) {
        if (turn.dropAfterChunks !== undefined && i >= turn.dropAfterChunks) {
          serverDone = true;
          cut(res);
          return;
        }
        if (turn.delayMs) await sleep(turn.delayMs, undefined, { signal: abort.signal });
        await write(res, frames[i], abort.signal);
      }
      // More than the turn sends: cut before the end all the same (the test means a cut stream).
      if (turn.dropAfterChunks !== undefined) {
        serverDone = true;
        cut(res);
        return;
      }
      serverDone = true;
      // A chat completions stream ends with `[DONE]`; a Responses stream with its response.completed.
      res.end(events ? undefined : 'data: [DONE]\n\n');
    } catch (error) {
      if (abort.signal.aborted) return; // the client went away: already counted
      throw error;
    }
  };

  const server = createServer((req, res) => {
    // CORS, so that a page (an agent running in a browser) can call the server from another origin.
    res.setHeader('access-control-allow-origin', '*');
    // Every header a turn sets (retry-after, x-should-retry…): `*` holds for requests without credentials.
    res.setHeader('access-control-expose-headers', '*');
    if (req.method === 'OPTIONS') {
      req.resume();
      res.writeHead(204, {
        'access-control-allow-methods': 'POST, OPTIONS',
        // Reflected: a `*` would not cover `authorization`, which the SDK sends.
        'access-control-allow-headers': req.headers['access-control-request-headers'] ?? '',
        'access-control-max-age': '600',
      });
      res.end();
      return;
    }
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) res.destroy();
      else sendJson(res, 500, errorBody(`Fake OpenAI server failed: ${String(error)}`, 'server_error'));
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await events.once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    closedConnections: () => clientCloses,
    waitForClose: (count?: number) => {
      if (count !== undefined && (typeof count !== 'number' || !Number.isInteger(count) || count < 1)) {
        throw new TypeError(`waitForClose: 'count' must be a positive integer, got ${show(count)}`);
      }
      const target = count ?? clientCloses + 1;
      if (clientCloses >= target) return Promise.resolve();
      return new Promise<void>((resolve) => closeWaiters.push({ count: target, resolve }));
    },
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        for (const controller of active) controller.abort();
        server.close(() => resolve());
        server.closeAllConnections();
        for (const socket of sockets) socket.destroy();
      });
      return closing;
    },
  };
}

/** What every frame of one answer repeats. */
interface AnswerIds {
  id: string;
  model: string;
  created: number;
  usage: ReturnType<typeof usageOf>;
}

/** The `data:` frames of a chat completions stream (without `[DONE]`). */
function chatFrames(body: FakeChatRequest, plan: Plan, { id, model, created, usage }: AnswerIds): string[] {
  const deltas: Array<{ delta?: Record<string, unknown>; finish?: string; usage?: boolean }> = [];
  plan.deltas.forEach((delta, i) => deltas.push({ delta: i === 0 ? { role: 'assistant', ...delta } : delta }));
  deltas.push({ delta: plan.deltas.length === 0 ? { role: 'assistant' } : {}, finish: plan.finish });
  if (body.stream_options?.include_usage === true) deltas.push({ usage: true });
  return deltas.map((step) => {
    const chunk = {
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      system_fingerprint: 'fp_fake',
      choices: step.usage ? [] : [{ index: 0, delta: step.delta ?? {}, logprobs: null, finish_reason: step.finish ?? null }],
      usage: step.usage ? usage : null,
    };
    return `data: ${JSON.stringify(chunk)}\n\n`;
  });
}

/** A Responses API stream event, as the fake server sends it (its `type` is also the SSE event name). */
interface ResponsesEvent {
  readonly type: string;
  readonly sequence_number: number;
  readonly response?: Record<string, unknown>;
  readonly [key: string]: unknown;
}

/**
 * The events of a Responses API stream for a turn, in the API's order: `response.created`,
 * `response.in_progress`, a reasoning item (its summary streamed), a message (its text streamed),
 * each function call (its arguments streamed, the calls one after another), then
 * `response.completed`, or `response.incomplete` for a `finish` of `length` or `content_filter`.
 * The last event's `response` is the whole response (the non-streaming answer).
 */
function responsesEvents(turn: FakeReplyTurn, plan: Plan, { id, model, created, usage }: AnswerIds): ResponsesEvent[] {
  const events: ResponsesEvent[] = [];
  const output: Array<Record<string, unknown>> = [];
  const push = (type: string, fields: Record<string, unknown>) => events.push({ type, sequence_number: events.length, ...fields });
  const response = (status: string, extra: Record<string, unknown> = {}) => ({
    id,
    object: 'response',
    created_at: created,
    status,
    model,
    output: [...output],
    output_text: plan.text,
    error: null,
    incomplete_details: null,
    instructions: null,
    metadata: {},
    parallel_tool_calls: true,
    temperature: null,
    tool_choice: 'auto',
    tools: [],
    top_p: null,
    usage: null,
    ...extra,
  });
  push('response.created', { response: response('in_progress') });
  push('response.in_progress', { response: response('in_progress') });

  const reasoning = toChunks(turn.reasoning);
  if (reasoning.length > 0) {
    const item = { id: `rs_${id}`, type: 'reasoning', summary: [] as unknown[] };
    const at = output.length;
    push('response.output_item.added', { output_index: at, item });
    push('response.reasoning_summary_part.added', { item_id: item.id, output_index: at, summary_index: 0, part: { type: 'summary_text', text: '' } });
    for (const delta of reasoning) {
      push('response.reasoning_summary_text.delta', { item_id: item.id, output_index: at, summary_index: 0, delta });
    }
    const part = { type: 'summary_text', text: plan.reasoning };
    push('response.reasoning_summary_text.done', { item_id: item.id, output_index: at, summary_index: 0, text: plan.reasoning });
    push('response.reasoning_summary_part.done', { item_id: item.id, output_index: at, summary_index: 0, part });
    const done = { ...item, summary: [part] };
    output.push(done);
    push('response.output_item.done', { output_index: at, item: done });
  }

  const text = toChunks(turn.text);
  if (text.length > 0) {
    const item = { id: `msg_${id}`, type: 'message', role: 'assistant', status: 'in_progress', content: [] as unknown[] };
    const at = output.length;
    push('response.output_item.added', { output_index: at, item });
    push('response.content_part.added', { item_id: item.id, output_index: at, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
    for (const delta of text) push('response.output_text.delta', { item_id: item.id, output_index: at, content_index: 0, delta, logprobs: [] });
    const part = { type: 'output_text', text: plan.text, annotations: [] };
    push('response.output_text.done', { item_id: item.id, output_index: at, content_index: 0, text: plan.text, logprobs: [] });
    push('response.content_part.done', { item_id: item.id, output_index: at, content_index: 0, part });
    const done = { ...item, status: 'completed', content: [part] };
    output.push(done);
    push('response.output_item.done', { output_index: at, item: done });
  }

  (turn.toolCalls ?? []).forEach((call, n) => {
    const { id: callId, name, args } = plan.toolCalls[n];
    const item = { id: `fc_${id}_${n}`, type: 'function_call', status: 'in_progress', call_id: callId, name, arguments: '' };
    const at = output.length;
    push('response.output_item.added', { output_index: at, item });
    for (const delta of splitInto(args, chunkCount(call.chunks))) {
      push('response.function_call_arguments.delta', { item_id: item.id, output_index: at, delta });
    }
    push('response.function_call_arguments.done', { item_id: item.id, output_index: at, name, arguments: args });
    const done = { ...item, status: 'completed', arguments: args };
    output.push(done);
    push('response.output_item.done', { output_index: at, item: done });
  });

  const usageField = {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.total_tokens,
  };
  if (plan.finish === 'length' || plan.finish === 'content_filter') {
    const reason = plan.finish === 'length' ? 'max_output_tokens' : 'content_filter';
    push('response.incomplete', { response: response('incomplete', { incomplete_details: { reason }, usage: usageField }) });
  } else {
    push('response.completed', { response: response('completed', { usage: usageField }) });
  }
  return events;
}

interface Plan {
  deltas: Array<Record<string, unknown>>;
  finish: string;
  text: string;
  reasoning: string;
  toolCalls: Array<{ id: string; name: string; args: string }>;
}

function planChunks(turn: FakeReplyTurn): Plan {
  const deltas: Array<Record<string, unknown>> = [];
  const reasoningChunks = toChunks(turn.reasoning);
  for (const piece of reasoningChunks) deltas.push({ reasoning_content: piece });
  const textChunks = toChunks(turn.text);
  for (const piece of textChunks) deltas.push({ content: piece });

  const calls = (turn.toolCalls ?? []).map((call) => ({
    id: call.id,
    name: call.name,
    args: typeof call.args === 'string' ? call.args : (JSON.stringify(call.args) ?? '{}'),
    chunks: chunkCount(call.chunks),
  }));
  // Every call opens with its id and name, then the argument pieces, round-robin by index.
  calls.forEach((call, index) =>
    deltas.push({
      tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }],
    }),
  );
  const pieces = calls.map((call) => splitInto(call.args, call.chunks));
  const longest = Math.max(0, ...pieces.map((p) => p.length));
  for (let step = 0; step < longest; step++) {
    pieces.forEach((list, index) => {
      if (step < list.length) deltas.push({ tool_calls: [{ index, function: { arguments: list[step] } }] });
    });
  }

  return {
    deltas,
    finish: turn.finish ?? (calls.length > 0 ? 'tool_calls' : 'stop'),
    text: textChunks.join(''),
    reasoning: reasoningChunks.join(''),
    toolCalls: calls.map(({ id, name, args }) => ({ id, name, args })),
  };
}

function toChunks(value: string | readonly string[] | undefined): string[] {
  if (value === undefined) return [];
  if (typeof value !== 'string') return [...value];
  if (value === '') return [];
  return value.match(/\s*\S+\s*|\s+/g) ?? [value];
}

/** `text` in exactly `min(count, text.length)` pieces, the longer ones first. */
function splitInto(text: string, count: number): string[] {
  if (text === '') return [];
  const n = Math.min(count, text.length);
  const size = Math.floor(text.length / n);
  const longer = text.length % n; // this many pieces take one character more
  const out: string[] = [];
  for (let i = 0, at = 0; i < n; i++) {
    const end = at + size + (i < longer ? 1 : 0);
    out.push(text.slice(at, end));
    at = end;
  }
  return out;
}

function usageOf(turn: FakeReplyTurn, body: FakeChatRequest, plan: Plan) {
  const estimate = (text: string) => Math.ceil(text.length / 4);
  const prompt = turn.usage?.prompt_tokens ?? estimate(JSON.stringify(body.messages ?? body.input ?? []));
  const completion = turn.usage?.completion_tokens ?? estimate(plan.reasoning + plan.text + plan.toolCalls.map((c) => c.name + c.args).join(''));
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

function completionOf(id: string, model: string, created: number, plan: Plan, usage: ReturnType<typeof usageOf>) {
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    system_fingerprint: 'fp_fake',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: plan.text === '' && plan.toolCalls.length > 0 ? null : plan.text,
          refusal: null,
          ...(plan.reasoning ? { reasoning_content: plan.reasoning } : {}),
          ...(plan.toolCalls.length > 0
            ? {
                tool_calls: plan.toolCalls.map((c) => ({
                  id: c.id,
                  type: 'function',
                  function: { name: c.name, arguments: c.args },
                })),
              }
            : {}),
        },
        logprobs: null,
        finish_reason: plan.finish,
      },
    ],
    usage,
  };
}

function isErrorTurn(turn: FakeReplyTurn | FakeErrorTurn): turn is FakeErrorTurn {
  return typeof (turn as FakeErrorTurn).status === 'number';
}

function errorBody(message: string, type: string) {
  return { error: { message, type, param: null, code: type } };
}

function sendJson(res: ServerResponse, status: number, payload: unknown): void {
  if (res.destroyed || res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(payload));
}

async function readBody(req: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of req) parts.push(part as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

/** Writes and waits until the data has reached the kernel (backpressure, and a cut after it loses nothing). */
function write(res: ServerResponse, data: string, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (res.destroyed || signal.aborted) return reject(new Error('connection closed'));
    res.write(data, (error) => (error ? reject(error) : resolve()));
  });
}

/** Cuts the connection mid-stream, as a failing proxy or server would. */
function cut(res: ServerResponse): void {
  (res.socket ?? res).destroy();
}

/** A tool call's `chunks` option: a positive integer (default 3). */
function chunkCount(chunks: number | undefined): number {
  if (chunks === undefined) return 3;
  if (!Number.isFinite(chunks) || chunks < 1) throw new TypeError(`startFakeOpenAIServer: a tool call's 'chunks' must be a number >= 1, got ${show(chunks)}`);
  return Math.floor(chunks);
}
