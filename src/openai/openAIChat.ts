import { Observable, noop, type Subscriber } from 'rxjs';
import type OpenAI from 'openai';
import type { Message } from '../messages/message';
import { ModelError } from '../model/errors';
import { fromAsyncIterable } from '../bindings/fromAsyncIterable';
import { fromReadableStream } from '../bindings/fromReadableStream';
import { SSEParser } from '../internal/sseParser';
import type { FinishReason, ModelClient, ModelRequest, ModelSettings, ModelUpdate, OutputFormat, ToolChoice, ToolSpec } from '../model/types';
import { outputToolAsText } from '../model/outputToolAsText';
import { errorMessage } from '../internal/errorMessage';
import { show } from '../internal/show';
import { checkOptionsObject } from '../internal/optionNames';
import { isRetryableStreamError, toModelError } from './toModelError';
import { argumentsText, resultText } from './toolText';

type ChatChunk = OpenAI.Chat.Completions.ChatCompletionChunk;
type ChatMessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type ChatTool = OpenAI.Chat.Completions.ChatCompletionTool;
type ChatToolChoice = OpenAI.Chat.Completions.ChatCompletionToolChoiceOption;
type ChatStreamingParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming;

/**
 * The part of an `OpenAI` client that {@link openAIChat} uses: an `OpenAI` or `AzureOpenAI`
 * instance fits. Written out rather than taken from the `openai` package, so that this package's
 * declarations compile where `openai` (an optional peer dependency) is not installed.
 */
export interface OpenAIChatClient {
  readonly chat: {
    readonly completions: {
      /** A streaming chat completions request: a stream of chunks, or a Promise of one. */
      create(
        body: { model: string; messages: unknown[]; stream: true },
        options?: { signal?: AbortSignal; maxRetries?: number },
      ): PromiseLike<AsyncIterable<unknown>> | AsyncIterable<unknown>;
    };
  };
}

/** What {@link openAIChat} calls, as the `openai` SDK types it. */
type ChatCompletions = Pick<OpenAI['chat']['completions'], 'create'>;

/** Options of {@link openAIChat}: the client, the model, and default settings for every request. */
export interface OpenAIChatOptions extends ModelSettings {
  /** Your own `OpenAI` instance (any compatible `baseURL`: Azure, a proxy, Ollama, vLLM…). */
  client: OpenAIChatClient;
  /** The model name, e.g. `'gpt-4o-mini'`; a request's `settings.model` overrides it. */
  model: string;
  /**
   * How a request's structured output (`createAgent({ output })`) is asked for: `'json_schema'`
   * (default) as `response_format: { type: 'json_schema', json_schema: { name, schema, strict } }`;
   * `'tool'`, for a model or server without it, as a tool the model must call (`tool_choice`
   * forces it, or `'required'` while the request has other tools), whose arguments stream back as
   * the answer's text.
   */
  structuredOutputs?: 'json_schema' | 'tool';
}

/**
 * A {@link ModelClient} over the OpenAI chat completions streaming API.
 *
 * Each subscription is one `client.chat.completions.create({ stream: true, stream_options:
 * { include_usage: true } })` request, sent with its own `AbortController` and the SDK's own
 * retries off (`maxRetries: 0`; retrying is an operator's job). Unsubscribing aborts the request.
 * Settings: `temperature` and `maxTokens` (sent as `max_tokens`) are mapped, every other key is
 * passed through as is; a request's `settings` override the factory's. A request's structured
 * output (`request.output`) is sent as a JSON Schema `response_format`, or as a tool the model
 * must call (see `structuredOutputs`).
 *
 * Updates come in this order: text / reasoning / tool-call deltas as they stream, then one `usage`
 * (when the server reports it), then one `finish`. A refusal (`delta.refusal`) streams as text.
 * Failures are {@link ModelError}s: HTTP errors keep their `status`, are `retryable` for
 * 408/409/429/5xx (but not a 429 for an exhausted quota, `insufficient_quota`) and carry the
 * server's `retry-after-ms` / `retry-after` advice as `retryAfterMs`; connection failures and
 * streams cut before the end are retryable with no status, as are error events inside the
 * stream unless their `type` says the request itself is wrong (`invalid_request_error`, e.g. a
 * context too long; `authentication_error`, `permission_error`, `not_found_error`,
 * `insufficient_quota`); a request that cannot be built or sent (a `BigInt` in
 * a tool result or a setting) and a chunk that is not a chat completion chunk are not retryable,
 * nor is one whose fields have the wrong type (`content` or a tool call's `name` or `arguments`
 * that is not a string, `tool_calls` that is not an array…): it is not skipped or coerced.
 *
 * @throws TypeError when `client` has no `chat.completions.create` or `model` is not a non-empty
 *   string.
 *
 * @example
 * import OpenAI from 'openai';
 * const model = openAIChat({ client: new OpenAI(), model: 'gpt-4o-mini', temperature: 0 });
 * model({ messages: [textMessage('user', 'Hi')], tools: [], settings: {} })
 *   .subscribe(update => console.log(update));
 */
export function openAIChat(options: OpenAIChatOptions): ModelClient {
  checkOptionsObject('openAIChat', options, "with 'client' and 'model'"); // the other options are the request's: no fixed names
  const { client, structuredOutputs = 'json_schema', ...defaults } = options;
  if (typeof client?.chat?.completions?.create !== 'function') {
    throw new TypeError("openAIChat: 'client' must be an OpenAI client (with chat.completions.create), e.g. new OpenAI()");
  }
  if (typeof defaults.model !== 'string' || defaults.model === '') {
    throw new TypeError(`openAIChat: 'model' must be a non-empty string, got ${show(defaults.model)}`);
  }
  if (structuredOutputs !== 'json_schema' && structuredOutputs !== 'tool') {
    throw new TypeError(`openAIChat: 'structuredOutputs' must be 'json_schema' or 'tool', got ${show(structuredOutputs)}`);
  }
  const call = (request: ModelRequest) =>
    new Observable<ModelUpdate>((subscriber) => {
      let body: ChatStreamingParams;
      try {
        body = toChatRequest(request, defaults, structuredOutputs);
      } catch (error) {
        subscriber.error(new ModelError(`Invalid model request: ${errorMessage(error)}`, { retryable: false, cause: error }));
        return;
      }
      const state: StreamState = { finish: undefined, usage: undefined, connected: false };
      return chatChunks(client, body, state).subscribe({
        next: (chunk) => {
          try {
            emitChunk(chunk, subscriber, state);
          } catch (error) {
            subscriber.error(new ModelError(`Malformed model stream: ${errorMessage(error)}`, { retryable: false, cause: error }));
          }
        },
        error: (error: unknown) => subscriber.error(toModelError(error, client, state.connected)),
        complete: () => {
          if (state.usage) {
            subscriber.next({
              type: 'usage',
              inputTokens: state.usage.prompt_tokens ?? 0,
              outputTokens: state.usage.completion_tokens ?? 0,
            });
          }
          if (state.finish === undefined) {
            subscriber.error(
              state.chunks
                ? new ModelError('The model stream ended before a finish reason (connection cut?)', { retryable: true })
                : new ModelError('Malformed model stream: no chat completion chunk in it (is baseURL a chat completions API?)', { retryable: false }),
            );
            return;
          }
          subscriber.next(state.model === undefined ? { type: 'finish', reason: state.finish } : { type: 'finish', reason: state.finish, model: state.model });
          subscriber.complete();
        },
      });
    });
  // Structured output as a tool: its call is the answer (see outputToolAsText).
  const model =
    structuredOutputs === 'tool' ? (request: ModelRequest) => (request.output ? outputToolAsText(call(request), request.output.name) : call(request)) : call;
  return Object.assign(model, { provider: 'openai', model: defaults.model });
}

/**
 * The chunks of one request. With the `openai` SDK (its `create()` returns a promise with
 * `asResponse()`), the SDK sends the request (auth, base URL, headers, typed HTTP errors) and the
 * event stream is parsed here, each network read once: the SDK's own parser costs about as much
 * per event as everything else an agent does with it. Another client's stream is iterated as it
 * is. Unsubscribing aborts the request.
 */
function chatChunks(client: OpenAIChatClient, body: ChatStreamingParams, state: StreamState): Observable<ChatChunk> {
  return new Observable<ChatChunk>((subscriber) => {
    const abort = new AbortController();
    let created: unknown;
    try {
      created = (client.chat.completions as ChatCompletions).create(body, { signal: abort.signal, maxRetries: 0 });
    } catch (error) {
      subscriber.error(error);
      return;
    }
    const asResponse = (created as { asResponse?: unknown } | null)?.asResponse;
    const chunks$ =
      typeof asResponse === 'function'
        ? eventStream(Promise.resolve((asResponse as () => PromiseLike<Response>).call(created)), client, state)
        : fromAsyncIterable<ChatChunk>(() =>
            Promise.resolve(created as PromiseLike<AsyncIterable<ChatChunk>> | AsyncIterable<ChatChunk>).then((stream) => {
              state.connected = true;
              return stream;
            }),
          );
    const subscription = chunks$.subscribe(subscriber);
    return () => {
      subscription.unsubscribe();
      abort.abort();
    };
  });
}

/**
 * The chat completion chunks of an SSE response body, as the SDK reads them: each frame's data is
 * a JSON chunk, `[DONE]` ends the stream, and a frame whose data holds `error` is the SDK's
 * `APIError` (status-less, with the error's type and code).
 */
function eventStream(response: Promise<Response>, client: OpenAIChatClient, state: StreamState): Observable<ChatChunk> {
  return new Observable<ChatChunk>((subscriber) => {
    let reading: { unsubscribe(): void } | undefined;
    response.then(
      (res) => {
        const body = res.body;
        if (subscriber.closed) {
          body?.cancel().catch(noop);
          return;
        }
        state.connected = true;
        if (body === null) {
          subscriber.complete();
          return;
        }
        let done = false;
        const decoder = new TextDecoder();
        const parser = new SSEParser(
          (_type, data) => {
            if (done) return;
            if (data.startsWith('[DONE]')) {
              done = true;
              return;
            }
            const chunk = JSON.parse(data) as ChatChunk & { error?: unknown };
            if (chunk?.error) throw streamError(client, chunk.error, res.headers);
            subscriber.next(chunk);
          },
          () => subscriber.closed,
        );
        reading = fromReadableStream(body).subscribe({
          next(bytes) {
            try {
              parser.push(decoder.decode(bytes, { stream: true }));
            } catch (error) {
              subscriber.error(error);
            }
          },
          error: (error: unknown) => subscriber.error(error),
          complete() {
            try {
              parser.push(decoder.decode());
              parser.end();
            } catch (error) {
              subscriber.error(error);
              return;
            }
            subscriber.complete();
          },
        });
        if (subscriber.closed) reading.unsubscribe();
      },
      (error: unknown) => subscriber.error(error),
    );
    return () => reading?.unsubscribe();
  });
}

/** An error event inside the stream, as the SDK throws it (its `APIError`), or as the ModelError it maps to. */
function streamError(client: OpenAIChatClient, error: unknown, headers: Headers): Error {
  const APIError = (client as { constructor?: { APIError?: unknown } }).constructor?.APIError;
  if (typeof APIError === 'function') {
    return new (APIError as new (status: undefined, error: unknown, message: undefined, headers: Headers) => Error)(undefined, error, undefined, headers);
  }
  const { type, code, message } = (error ?? {}) as { type?: unknown; code?: unknown; message?: unknown };
  return new ModelError(typeof message === 'string' ? message : JSON.stringify(error), { retryable: isRetryableStreamError(type, code), cause: error });
}

interface StreamState {
  /** Tool call ids and their indexes, for servers that send no `index` on some pieces. */
  ids?: Map<string, number>;
  /** The index of the last tool call piece that named its call (by index or id). */
  lastIndex?: number;
  finish: FinishReason | undefined;
  usage: { prompt_tokens?: number; completion_tokens?: number } | undefined;
  /** The response has begun: an unknown error after that is a cut stream, before it a request that could not be sent. */
  connected: boolean;
  /** A chunk with `choices` came (a stream without one is not a chat completion stream). */
  chunks?: boolean;
  /** The model that answered, as the first chunk naming one says (`finish` carries it). */
  model?: string;
}

/** Maps one chunk to updates; the hot path, so no closures or arrays. */
function emitChunk(chunk: ChatChunk, subscriber: Subscriber<ModelUpdate>, state: StreamState): void {
  if (typeof chunk !== 'object' || chunk === null || (chunk.choices != null && !Array.isArray(chunk.choices))) {
    throw new TypeError(`not a chat completion chunk: ${show(chunk).slice(0, 200)}`);
  }
  // An object without choices (a keep-alive, a usage-only or metadata chunk) is skipped; a stream
  // of nothing else is told apart at its end (another API behind a wrong baseURL).
  const choices = chunk.choices;
  if (choices) {
    state.chunks = true;
    for (let c = 0; c < choices.length; c++) {
      const choice = choices[c];
      if (choice.index !== undefined && choice.index !== 0) continue; // n > 1: only the first choice
      const delta = choice.delta as DeltaWithReasoning | null | undefined;
      if (delta != null) {
        if (typeof delta !== 'object') malformed('delta', 'an object', delta);
        const reasoning = delta.reasoning_content ?? delta.reasoning;
        if (reasoning != null) {
          if (typeof reasoning !== 'string') malformed(delta.reasoning_content != null ? 'delta.reasoning_content' : 'delta.reasoning', 'a string', reasoning);
          if (reasoning !== '') subscriber.next({ type: 'reasoning-delta', text: reasoning });
        }
        const content = delta.content;
        if (content != null) {
          if (typeof content !== 'string') malformed('delta.content', 'a string', content);
          if (content !== '') subscriber.next({ type: 'text-delta', text: content });
        }
        const refusal = delta.refusal;
        if (refusal != null) {
          if (typeof refusal !== 'string') malformed('delta.refusal', 'a string', refusal);
          if (refusal !== '') subscriber.next({ type: 'text-delta', text: refusal });
        }
        const toolCalls = delta.tool_calls;
        if (toolCalls != null) {
          if (!Array.isArray(toolCalls)) malformed('delta.tool_calls', 'an array', toolCalls);
          for (let i = 0; i < toolCalls.length; i++) {
            const call = toolCalls[i];
            if (typeof call !== 'object' || call === null) malformed('a tool call', 'an object', call);
            const { index, id } = call;
            if (index != null && !(Number.isInteger(index) && index >= 0)) malformed("a tool call's index", 'an integer >= 0', index);
            if (id != null && typeof id !== 'string') malformed("a tool call's id", 'a string', id);
            const fn = call.function;
            let name: string | undefined;
            let args = '';
            if (fn != null) {
              if (typeof fn !== 'object') malformed("a tool call's function", 'an object', fn);
              name = nameOf(fn.name);
              args = argumentsOf(fn.arguments);
            }
            subscriber.next({
              type: 'tool-call-delta',
              index: callIndex(state, index, id, i),
              callId: id ?? undefined,
              name,
              argsDelta: args,
            });
          }
        }
        const legacy = delta.function_call;
        if (legacy != null) {
          if (typeof legacy !== 'object') malformed('delta.function_call', 'an object', legacy);
          subscriber.next({
            type: 'tool-call-delta',
            index: 0,
            callId: undefined,
            name: nameOf(legacy.name),
            argsDelta: argumentsOf(legacy.arguments),
          });
        }
      }
      const finish = choice.finish_reason;
      if (finish) {
        if (typeof finish !== 'string') malformed('finish_reason', 'a string', finish);
        state.finish = toFinishReason(finish);
      }
    }
  }
  // Servers differ (once at the end, or cumulative on every chunk): keep the last, report it once.
  if (chunk.usage) state.usage = chunk.usage;
  if (state.model === undefined && typeof chunk.model === 'string' && chunk.model !== '') state.model = chunk.model;
}

/** A tool call's function name: a string, or none on the pieces after the first. */
function nameOf(name: unknown): string | undefined {
  if (name == null) return undefined;
  if (typeof name !== 'string') malformed("a tool call's function.name", 'a string', name);
  return name;
}

/** A tool call's arguments piece: JSON text, cut anywhere (an object is not what the API sends). */
function argumentsOf(args: unknown): string {
  if (args == null) return '';
  if (typeof args !== 'string') malformed("a tool call's function.arguments", 'a string', args);
  return args;
}

/** Throws the error that {@link openAIChat} reports as a malformed stream (not retryable). */
function malformed(what: string, expected: string, value: unknown): never {
  throw new TypeError(`${what} must be ${expected}, got ${show(value).slice(0, 200)}`);
}

/**
 * The index of a tool call piece. Servers differ: most send `index` on every piece; some send
 * none, with the call's `id` on every piece or on its first only; some open each call with
 * `index` and `id` and send the rest bare. A piece with an index is that call; one with a known
 * id is that id's call, a new id the next call; a bare piece continues the last call named, else
 * (nothing named yet) it is the call at its position in the chunk.
 */
function callIndex(state: StreamState, index: number | null | undefined, id: string | null | undefined, position: number): number {
  if (index != null) {
    if (id) (state.ids ??= new Map()).set(id, index);
    state.lastIndex = index;
    return index;
  }
  if (id) {
    const ids = (state.ids ??= new Map<string, number>());
    let known = ids.get(id);
    if (known === undefined) {
      known = state.lastIndex === undefined ? ids.size : Math.max(ids.size, state.lastIndex + 1);
      ids.set(id, known);
    }
    state.lastIndex = known;
    return known;
  }
  return state.lastIndex ?? position;
}

type DeltaWithReasoning = ChatChunk['choices'][number]['delta'] & {
  reasoning_content?: string | null;
  reasoning?: string | null;
};

function toFinishReason(reason: string): FinishReason {
  switch (reason) {
    case 'tool_calls':
    case 'function_call':
      return 'tool-calls';
    case 'length':
      return 'length';
    case 'content_filter':
      return 'content-filter';
    default:
      return 'stop';
  }
}

/** Builds the chat completions request body of a {@link ModelRequest}. */
function toChatRequest(request: ModelRequest, defaults: ModelSettings, structuredOutputs: 'json_schema' | 'tool'): ChatStreamingParams {
  const settings: Record<string, unknown> = {};
  for (const key in defaults) if (defaults[key] !== undefined) settings[key] = defaults[key];
  for (const key in request.settings) if (request.settings[key] !== undefined) settings[key] = request.settings[key];
  const { model, temperature, maxTokens, stream: _stream, stream_options, ...rest } = settings;

  const body: Record<string, unknown> = { ...rest, model, messages: toChatMessages(request) };
  if (temperature !== undefined) body.temperature = temperature;
  if (maxTokens !== undefined) body.max_tokens = maxTokens;
  if (request.tools.length > 0) {
    body.tools = request.tools.map(toChatTool);
    if (request.toolChoice !== undefined) body.tool_choice = toChatToolChoice(request.toolChoice);
  }
  if (request.output) addOutput(body, request, request.output, structuredOutputs);
  body.stream = true;
  body.stream_options = { ...(isRecord(stream_options) ? stream_options : undefined), include_usage: true };
  return body as unknown as ChatStreamingParams;
}

/**
 * Asks for structured output: a JSON Schema `response_format`, or a tool the model must call. The
 * tool is forced by name when it is the only one the model may call (no other tools, or
 * `toolChoice: 'none'`), else `tool_choice: 'required'` lets the model call the other tools first;
 * a `toolChoice` naming another tool is kept for this request.
 */
function addOutput(body: Record<string, unknown>, request: ModelRequest, output: OutputFormat, structuredOutputs: 'json_schema' | 'tool'): void {
  const { name, description, schema, strict } = output;
  if (structuredOutputs === 'json_schema') {
    body.response_format = {
      type: 'json_schema',
      json_schema: description === undefined ? { name, schema, strict } : { name, description, schema, strict },
    };
    return;
  }
  if (request.tools.some((tool) => tool.name === name)) {
    throw new TypeError(`a tool is named '${name}', the name of the structured output's tool: rename one of them`);
  }
  const tool = { type: 'function', function: { name, description: description ?? 'Give the final answer.', parameters: schema, strict } };
  const choice = request.toolChoice;
  const others = choice === 'none' ? [] : request.tools;
  body.tools = others.length === 0 ? [tool] : [...(body.tools as ChatTool[]), tool];
  body.tool_choice =
    typeof choice === 'object' && others.length > 0 ? toChatToolChoice(choice) : others.length === 0 ? { type: 'function', function: { name } } : 'required';
}

function toChatTool(tool: ToolSpec): ChatTool {
  return {
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  };
}

function toChatToolChoice(choice: ToolChoice): ChatToolChoice {
  return typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.name } };
}

/**
 * Each message's chat form, converted once: a loop sends its whole history with every call, and
 * messages never change (a rewrite makes a new one), so a call converts only the messages that
 * are new to it. The converted objects are shared between calls and never changed.
 */
const converted = new WeakMap<Message, ChatMessageParam | readonly ChatMessageParam[]>();

/**
 * A history array's chat form so far: a run hands every call of a loop the same array, grown by
 * the last iteration's messages, so a call looks up only those (a run's array only grows; `last`
 * tells a reused array whose end changed, which is converted again from the start).
 */
interface ConvertedHistory {
  readonly length: number;
  readonly last: Message;
  readonly chat: ChatMessageParam[];
}
const histories = new WeakMap<readonly Message[], ConvertedHistory>();

function toChatMessages(request: ModelRequest): ChatMessageParam[] {
  const messages = request.messages;
  const known = histories.get(messages);
  const reuse = known !== undefined && known.length <= messages.length && messages[known.length - 1] === known.last;
  const chat = reuse ? known.chat : [];
  for (let i = reuse ? known.length : 0; i < messages.length; i++) {
    const message = messages[i];
    let param = converted.get(message);
    if (param === undefined) {
      param = toChatMessage(message);
      converted.set(message, param);
    }
    if (isArray(param)) for (let j = 0; j < param.length; j++) chat.push(param[j]);
    else chat.push(param);
  }
  if (messages.length > 0) histories.set(messages, { length: messages.length, last: messages[messages.length - 1], chat });
  // The body gets its own array: the next call appends to `chat`.
  if (!request.instructions) return chat.slice();
  const out = new Array<ChatMessageParam>(chat.length + 1);
  out[0] = { role: 'system', content: request.instructions };
  for (let i = 0; i < chat.length; i++) out[i + 1] = chat[i];
  return out;
}

const isArray = Array.isArray as (value: unknown) => value is readonly unknown[];

/** One message's chat form: one chat message, or none or several (a tool message's results). */
function toChatMessage(message: Message): ChatMessageParam | readonly ChatMessageParam[] {
  const out: ChatMessageParam[] = [];
  appendMessage(out, message);
  return out.length === 1 ? out[0] : out;
}

function appendMessage(out: ChatMessageParam[], message: Message): void {
  switch (message.role) {
    case 'system':
    case 'user':
      out.push({ role: message.role, content: textOfParts(message) });
      return;
    case 'assistant': {
      const text = textOfParts(message);
      const toolCalls: OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall[] = [];
      for (const part of message.content) {
        if (part.type === 'tool-call') {
          toolCalls.push({
            id: part.callId,
            type: 'function',
            function: { name: part.name, arguments: argumentsText(part.args) },
          });
        }
      }
      if (toolCalls.length > 0) out.push({ role: 'assistant', content: text === '' ? null : text, tool_calls: toolCalls });
      else out.push({ role: 'assistant', content: text });
      return;
    }
    case 'tool':
      for (const part of message.content) {
        if (part.type === 'tool-result') {
          out.push({ role: 'tool', tool_call_id: part.callId, content: resultText(part.result) });
        }
      }
      return;
  }
}

function textOfParts(message: Message): string {
  let text = '';
  for (const part of message.content) if (part.type === 'text') text += part.text;
  return text;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
