import { Observable, asyncScheduler, type SchedulerLike, type Subscriber } from 'rxjs';
import type OpenAI from 'openai';
import type { Message } from '../messages/message';
import { ModelError } from '../model/errors';
import { fromAsyncIterable } from '../bindings/fromAsyncIterable';
import type { FinishReason, ModelClient, ModelRequest, ModelSettings, ModelUpdate, OutputFormat, ToolChoice, ToolSpec } from '../model/types';
import { outputToolAsText } from '../model/outputToolAsText';
import { errorMessage } from '../internal/errorMessage';
import { isArray } from '../internal/isArray';
import { show } from '../internal/show';
import { checkOptionsObject } from '../internal/optionNames';
import { isScheduler } from '../internal/isScheduler';
import { isRetryableStreamError, toModelError } from './toModelError';
import { argumentsText, resultText } from './toolText';

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;
type InputItem = OpenAI.Responses.ResponseInputItem;
type FunctionTool = OpenAI.Responses.FunctionTool;
type ResponsesToolChoice = OpenAI.Responses.ResponseCreateParams['tool_choice'];
type ResponsesStreamingParams = OpenAI.Responses.ResponseCreateParamsStreaming;

/**
 * The part of an `OpenAI` client that {@link openAIResponses} uses: an `OpenAI` or `AzureOpenAI`
 * instance fits. Written out rather than taken from the `openai` package, so that this package's
 * declarations compile where `openai` (an optional peer dependency) is not installed.
 */
export interface OpenAIResponsesClient {
  readonly responses: {
    /** A streaming Responses request: a stream of events, or a Promise of one. */
    create(
      body: { model?: string; input?: unknown; stream: true },
      options?: { signal?: AbortSignal; maxRetries?: number },
    ): PromiseLike<AsyncIterable<unknown>> | AsyncIterable<unknown>;
  };
}

/** What {@link openAIResponses} calls, as the `openai` SDK types it. */
type Responses = Pick<OpenAI['responses'], 'create'>;

/** Options of {@link openAIResponses}: the client, the model, and default settings for every request. */
export interface OpenAIResponsesOptions extends ModelSettings {
  /** Your own `OpenAI` instance (or `AzureOpenAI`, or any server speaking the Responses API). */
  client: OpenAIResponsesClient;
  /** The model name, e.g. `'gpt-5-mini'`; a request's `settings.model` overrides it. */
  model: string;
  /**
   * How a request's structured output (`createAgent({ output })`) is asked for: `'json_schema'`
   * (default) as `text: { format: { type: 'json_schema', name, schema, strict } }`; `'tool'`, for a
   * model or server without it, as a function tool the model must call (`tool_choice` forces it,
   * or `'required'` while the request has other tools), whose arguments stream back as the
   * answer's text.
   */
  structuredOutputs?: 'json_schema' | 'tool';
  /**
   * Runs the wait, after a response's final event, for the server to end its body (default
   * `asyncScheduler`): read to its end, the connection goes back to the client's pool; one still
   * open after a second is cut.
   */
  scheduler?: SchedulerLike;
}

/** How long, after a response's final event, the body is read on for its end before the request is cut. */
const BODY_END_WAIT_MS = 1000;

/**
 * A {@link ModelClient} over the OpenAI Responses streaming API.
 *
 * Each subscription is one `client.responses.create({ stream: true })` request, sent with its own
 * `AbortController` and the SDK's own retries off (`maxRetries: 0`; retrying is an operator's
 * job). Unsubscribing aborts the request. The request is stateless: `instructions` is sent as
 * `instructions`, and the history as input items (system, user and assistant messages as
 * messages, tool calls as `function_call` items, tool results as `function_call_output` items);
 * reasoning parts are not sent back (the API takes reasoning back only as its own items). Tools
 * are function tools with `strict: false`, as the tools' JSON Schemas are not written for strict
 * mode, sent after the tools of a `tools` setting (the API's built-in tools: `{ type: 'web_search' }`…).
 * Settings: `temperature` and `maxTokens` (sent as `max_output_tokens`) are mapped, every other key
 * is passed through as is (`reasoning: { effort: 'low', summary: 'auto' }`, `store`, `include`…); a
 * request's `settings` override the factory's. A request's structured output
 * (`request.output`) is sent as a JSON Schema `text.format` (other `text` settings, such as
 * `verbosity`, are kept), or as a tool the model must call (see `structuredOutputs`).
 *
 * Updates come in this order: text (`response.output_text.delta`, and a refusal's
 * `response.refusal.delta`), reasoning (`response.reasoning_summary_text.delta`, and
 * `response.reasoning_text.delta` from servers that stream the reasoning itself; summary parts
 * are separated by a blank line) and tool-call deltas as they stream (a call opens with its
 * `response.output_item.added`, its arguments follow in `response.function_call_arguments.delta`
 * pieces; the calls of a server that sends them only in `response.completed`'s `output` are opened
 * whole then, a call that streamed not again), then one `usage` from the final response, then one
 * `finish`: `tool-calls` when the response holds a function call, `length` or `content-filter` for
 * an incomplete response (`response.incomplete`), else `stop`. Other events (web search,
 * annotations…) are skipped. The stream completes on that final event, even when the server keeps
 * the connection open; the body is then read on to its end for a second at most, so that the
 * connection is kept for the next request, and the request is aborted after that.
 *
 * Failures are {@link ModelError}s, as with `openAIChat`: HTTP errors keep their `status`, are
 * `retryable` for 408/409/429/5xx (not a 429 for an exhausted quota) and carry `retryAfterMs`;
 * connection failures and streams cut before the end are retryable; a request that cannot be
 * built or sent, data that is not JSON and an event whose fields have the wrong type are not. An
 * `error` event or a `response.failed` is retryable when its code is a server error, a rate limit
 * or a vector store timeout (or none), and not otherwise (an invalid prompt or image…); an `error`
 * event whose fields are nested under `error` (as the live API sends it; the SDK throws it) is
 * retryable unless its type is a bad request, a bad key, a refused access or an exhausted quota.
 *
 * @throws TypeError when `client` has no `responses.create` or `model` is not a non-empty string.
 *
 * @example
 * import OpenAI from 'openai';
 * const model = openAIResponses({ client: new OpenAI(), model: 'gpt-5-mini', reasoning: { effort: 'low', summary: 'auto' } });
 * model({ messages: [textMessage('user', 'Hi')], tools: [], settings: {} })
 *   .subscribe(update => console.log(update));
 */
export function openAIResponses(options: OpenAIResponsesOptions): ModelClient {
  checkOptionsObject('openAIResponses', options, "with 'client' and 'model'"); // the other options are the request's: no fixed names
  const { client, structuredOutputs = 'json_schema', scheduler = asyncScheduler, ...defaults } = options;
  if (typeof client?.responses?.create !== 'function') {
    throw new TypeError("openAIResponses: 'client' must be an OpenAI client (with responses.create), e.g. new OpenAI()");
  }
  if (typeof defaults.model !== 'string' || defaults.model === '') {
    throw new TypeError(`openAIResponses: 'model' must be a non-empty string, got ${show(defaults.model)}`);
  }
  if (structuredOutputs !== 'json_schema' && structuredOutputs !== 'tool') {
    throw new TypeError(`openAIResponses: 'structuredOutputs' must be 'json_schema' or 'tool', got ${show(structuredOutputs)}`);
  }
  if (!isScheduler(scheduler)) throw new TypeError(`openAIResponses: 'scheduler' must be an rxjs SchedulerLike, got ${show(scheduler)}`);
  const call = (request: ModelRequest) =>
    new Observable<ModelUpdate>((subscriber) => {
      let body: ResponsesStreamingParams;
      try {
        body = toResponsesRequest(request, defaults, structuredOutputs);
      } catch (error) {
        subscriber.error(new ModelError(`Invalid model request: ${errorMessage(error)}`, { retryable: false, cause: error }));
        return;
      }
      const state = new StreamState();
      const source = fromAsyncIterable<StreamEvent>(({ signal }) =>
        Promise.resolve((client.responses as Responses).create(body, { signal, maxRetries: 0 })).then((stream) => {
          state.connected = true;
          return stream;
        }),
      ).subscribe({
        next: (event) => {
          let failure: ModelError | undefined;
          try {
            failure = emitEvent(event, subscriber, state);
          } catch (error) {
            failure = new ModelError(`Malformed model stream: ${errorMessage(error)}`, { retryable: false, cause: error });
          }
          if (failure) subscriber.error(failure);
        },
        error: (error: unknown) => {
          if (!state.finished) subscriber.error(toModelError(error, client, state.connected));
        },
        // A final event completes the stream itself (see emitEvent): ending without one is a cut.
        complete: () => {
          if (state.finished) return;
          subscriber.error(
            state.events
              ? new ModelError('The model stream ended before response.completed (connection cut?)', { retryable: true })
              : new ModelError('Malformed model stream: no Responses API event in it (is baseURL a Responses API?)', { retryable: false }),
          );
        },
      });
      return () => {
        if (!state.finished || source.closed) return source.unsubscribe();
        // Finished: the body's end is normally a read away. Read it, so that the connection is
        // kept for the next request (cutting a body mid-read closes its socket); a server that
        // keeps it open is cut after a while.
        source.add(scheduler.schedule(() => source.unsubscribe(), BODY_END_WAIT_MS));
      };
    });
  // Structured output as a tool: its call is the answer (see outputToolAsText).
  const model =
    structuredOutputs === 'tool' ? (request: ModelRequest) => (request.output ? outputToolAsText(call(request), request.output.name) : call(request)) : call;
  return Object.assign(model, { provider: 'openai', model: defaults.model });
}

/** One response's stream: what {@link emitEvent} keeps between events. */
class StreamState {
  /** The response has begun: an unknown error after that is a cut stream, before it a request that could not be sent. */
  connected = false;
  /** An event of the Responses API came (a stream without one is not a Responses stream). */
  events = false;
  /** Each function call by its item id, in the order the calls were opened. */
  calls: Map<string, CallState> | undefined = undefined;
  /** The reasoning item and summary part last streamed (-1: the reasoning text), for the blank line between parts. */
  reasoningItem: string | undefined = undefined;
  reasoningPart = -1;
  /** The final event came: the finish went out, and the stream completed. */
  finished = false;
  usage: { input_tokens?: number; output_tokens?: number } | undefined = undefined;
  /** The model that answered, as the response says (`finish` carries it). */
  model: string | undefined = undefined;
}

interface CallState {
  readonly index: number;
  readonly callId: string;
  /** Argument pieces have streamed: `.done`'s full arguments are then not sent again. */
  streamed: boolean;
}

/**
 * Maps one event to updates; returns the error an `error` or `response.failed` event stands for.
 * A `response.completed` or `response.incomplete` ends the stream (see {@link finish}).
 * The hot path: text deltas allocate nothing but their update.
 */
function emitEvent(event: StreamEvent, subscriber: Subscriber<ModelUpdate>, state: StreamState): ModelError | undefined {
  if (typeof event !== 'object' || event === null || typeof event.type !== 'string') {
    throw new TypeError(`not a Responses API event: ${show(event).slice(0, 200)}`);
  }
  switch (event.type) {
    case 'response.output_text.delta':
    case 'response.refusal.delta': {
      state.events = true;
      const delta = stringField(event, 'delta');
      if (delta !== '') subscriber.next({ type: 'text-delta', text: delta });
      return undefined;
    }
    case 'response.reasoning_summary_text.delta':
    case 'response.reasoning_text.delta': {
      state.events = true;
      const delta = stringField(event, 'delta');
      if (delta === '') return undefined;
      const item = event.item_id;
      const part = event.type === 'response.reasoning_summary_text.delta' ? event.summary_index : -1;
      if (state.reasoningItem !== item || state.reasoningPart !== part) {
        // A new summary part (or reasoning item) after another: keep them apart as paragraphs.
        if (state.reasoningItem !== undefined) subscriber.next({ type: 'reasoning-delta', text: '\n\n' });
        state.reasoningItem = item;
        state.reasoningPart = part;
      }
      subscriber.next({ type: 'reasoning-delta', text: delta });
      return undefined;
    }
    case 'response.output_item.added':
    case 'response.output_item.done': {
      state.events = true;
      const item = event.item as unknown;
      if (typeof item !== 'object' || item === null) malformed(`${event.type}'s item`, 'an object', item);
      if ((item as { type?: unknown }).type !== 'function_call') return undefined;
      const call = item as OpenAI.Responses.ResponseFunctionToolCall;
      const itemId = call.id ?? `output_${String(event.output_index)}`;
      const known = state.calls?.get(itemId);
      if (event.type === 'response.output_item.done') {
        // A call the server never opened (no `.added`): it comes whole now.
        if (known === undefined) openCall(subscriber, state, itemId, call, true);
        else if (!known.streamed) sendRest(subscriber, known, call.arguments, `${event.type}'s item.arguments`);
        return undefined;
      }
      if (known === undefined) openCall(subscriber, state, itemId, call, false);
      return undefined;
    }
    case 'response.function_call_arguments.delta': {
      state.events = true;
      const delta = stringField(event, 'delta');
      const call = callOf(state, event.item_id, event.type);
      call.streamed = true;
      if (delta !== '') subscriber.next({ type: 'tool-call-delta', index: call.index, argsDelta: delta });
      return undefined;
    }
    case 'response.function_call_arguments.done': {
      state.events = true;
      const call = callOf(state, event.item_id, event.type);
      if (!call.streamed) sendRest(subscriber, call, event.arguments, `${event.type}'s arguments`);
      return undefined;
    }
    case 'response.created':
    case 'response.in_progress':
    case 'response.completed':
    case 'response.incomplete':
    case 'response.failed': {
      state.events = true;
      const response = event.response as unknown;
      if (typeof response !== 'object' || response === null) malformed(`${event.type}'s response`, 'an object', response);
      const { model, usage } = response as OpenAI.Responses.Response;
      if (state.model === undefined && typeof model === 'string' && model !== '') state.model = model;
      if (event.type === 'response.created' || event.type === 'response.in_progress') return undefined;
      if (usage != null) {
        if (typeof usage !== 'object') malformed(`${event.type}'s response.usage`, 'an object', usage);
        state.usage = usage;
      }
      if (event.type === 'response.failed') return failedResponse(event.response);
      if (event.type === 'response.incomplete') return finish(subscriber, state, incompleteReason(event.response));
      openOutputCalls(subscriber, state, event.response.output);
      return finish(subscriber, state, state.calls === undefined ? 'stop' : 'tool-calls');
    }
    case 'error': {
      // The live API nests the fields under `error` (the SDK throws that form): read both forms alike.
      const nested = (event as { error?: unknown }).error;
      if (nested !== null && typeof nested === 'object') {
        const { message, type, code } = nested as { message?: unknown; type?: unknown; code?: unknown };
        const text = typeof message === 'string' && message !== '' ? message : 'The model stream reported an error';
        return new ModelError(text, { retryable: isRetryableStreamError(type, code), cause: event });
      }
      const message = typeof event.message === 'string' && event.message !== '' ? event.message : 'The model stream reported an error';
      return new ModelError(message, { retryable: isRetryableCode(event.code), cause: event });
    }
    default:
      // Anything else of the API (web search, annotations, content parts…), or a keep-alive.
      if (event.type.startsWith('response.')) state.events = true;
      return undefined;
  }
}

/** Opens a function call: its id and name, and its arguments so far (all of them when `whole`). */
function openCall(
  subscriber: Subscriber<ModelUpdate>,
  state: StreamState,
  itemId: string,
  call: OpenAI.Responses.ResponseFunctionToolCall,
  whole: boolean,
): void {
  const { call_id: callId, name } = call;
  if (typeof callId !== 'string' || callId === '') malformed("a function call's call_id", 'a non-empty string', callId);
  if (typeof name !== 'string' || name === '') malformed("a function call's name", 'a non-empty string', name);
  const args = call.arguments == null ? '' : call.arguments;
  if (typeof args !== 'string') malformed("a function call's arguments", 'a string', args);
  const calls = (state.calls ??= new Map());
  const opened: CallState = { index: calls.size, callId, streamed: whole || args !== '' };
  calls.set(itemId, opened);
  subscriber.next({ type: 'tool-call-delta', index: opened.index, callId, name, argsDelta: args });
}

/** A call's whole arguments when no piece of them streamed (a server that sends them only at the end). */
function sendRest(subscriber: Subscriber<ModelUpdate>, call: CallState, args: unknown, what: string): void {
  if (args == null) return;
  if (typeof args !== 'string') malformed(what, 'a string', args);
  call.streamed = true;
  if (args !== '') subscriber.next({ type: 'tool-call-delta', index: call.index, argsDelta: args });
}

function callOf(state: StreamState, itemId: unknown, what: string): CallState {
  const call = typeof itemId === 'string' ? state.calls?.get(itemId) : undefined;
  if (call === undefined) malformed(`${what}'s item_id`, 'the id of a function call opened by response.output_item.added', itemId);
  return call;
}

function stringField(event: { type: string }, key: 'delta'): string {
  const value = (event as unknown as Record<string, unknown>)[key];
  if (typeof value !== 'string') malformed(`${event.type}'s ${key}`, 'a string', value);
  return value;
}

/** Throws the error that {@link openAIResponses} reports as a malformed stream (not retryable). */
function malformed(what: string, expected: string, value: unknown): never {
  throw new TypeError(`${what} must be ${expected}, got ${show(value).slice(0, 200)}`);
}

/**
 * Sends the usage and the finish, then completes: a server that keeps the connection open after
 * its final event holds nothing (nor the finish) back. The body is read on for its end a while
 * (see the stream's teardown).
 */
function finish(subscriber: Subscriber<ModelUpdate>, state: StreamState, reason: FinishReason): undefined {
  state.finished = true;
  const { usage, model } = state;
  if (usage) subscriber.next({ type: 'usage', inputTokens: usage.input_tokens ?? 0, outputTokens: usage.output_tokens ?? 0 });
  subscriber.next(model === undefined ? { type: 'finish', reason } : { type: 'finish', reason, model });
  subscriber.complete();
  return undefined;
}

/**
 * Opens, whole, the function calls of a completed response's `output` that did not stream (a
 * server may send them only there), and sends the arguments of an opened call none of whose
 * arguments streamed. A call that streamed is known by its item id or its call id.
 */
function openOutputCalls(subscriber: Subscriber<ModelUpdate>, state: StreamState, output: unknown): void {
  if (output == null) return;
  if (!isArray(output)) malformed("response.completed's response.output", 'an array', output);
  for (let at = 0; at < output.length; at++) {
    const item: unknown = output[at];
    if (typeof item !== 'object' || item === null) malformed(`response.completed's response.output[${at}]`, 'an object', item);
    if ((item as { type?: unknown }).type !== 'function_call') continue;
    const call = item as OpenAI.Responses.ResponseFunctionToolCall;
    const itemId = call.id ?? `output_${at}`;
    const known = state.calls && knownCall(state.calls, itemId, call.call_id);
    if (known === undefined) openCall(subscriber, state, itemId, call, true);
    else if (!known.streamed) sendRest(subscriber, known, call.arguments, `response.completed's response.output[${at}].arguments`);
  }
}

function knownCall(calls: Map<string, CallState>, itemId: string, callId: unknown): CallState | undefined {
  const byItem = calls.get(itemId);
  if (byItem !== undefined) return byItem;
  for (const call of calls.values()) if (call.callId === callId) return call;
  return undefined;
}

function incompleteReason(response: OpenAI.Responses.Response): FinishReason {
  return response.incomplete_details?.reason === 'content_filter' ? 'content-filter' : 'length';
}

function failedResponse(response: OpenAI.Responses.Response): ModelError {
  const error = response.error as { code?: unknown; message?: unknown } | null | undefined;
  const message = typeof error?.message === 'string' && error.message !== '' ? error.message : 'The model response failed';
  return new ModelError(message, { retryable: isRetryableCode(error?.code), cause: response });
}

/** Codes of a failed response that another attempt may not meet: a server error, a rate limit, a timeout. */
const RETRYABLE_CODES: ReadonlySet<unknown> = new Set([null, undefined, 'server_error', 'rate_limit_exceeded', 'vector_store_timeout']);

function isRetryableCode(code: unknown): boolean {
  return RETRYABLE_CODES.has(code);
}

/** Builds the Responses request body of a {@link ModelRequest}. */
function toResponsesRequest(request: ModelRequest, defaults: ModelSettings, structuredOutputs: 'json_schema' | 'tool'): ResponsesStreamingParams {
  const settings: Record<string, unknown> = {};
  for (const key in defaults) if (defaults[key] !== undefined) settings[key] = defaults[key];
  for (const key in request.settings) if (request.settings[key] !== undefined) settings[key] = request.settings[key];
  const { model, temperature, maxTokens, stream: _stream, ...rest } = settings;

  const body: Record<string, unknown> = { ...rest, model, input: toInputItems(request.messages) };
  if (request.instructions) body.instructions = request.instructions;
  if (temperature !== undefined) body.temperature = temperature;
  if (maxTokens !== undefined) body.max_output_tokens = maxTokens;
  if (request.tools.length > 0) {
    // The settings' own tools (the API's built-in ones: web search…) stay, before the request's.
    body.tools = [...(isArray(rest.tools) ? rest.tools : []), ...request.tools.map(toFunctionTool)];
    if (request.toolChoice !== undefined) body.tool_choice = toResponsesToolChoice(request.toolChoice);
  }
  if (request.output) addOutput(body, request, request.output, structuredOutputs);
  body.stream = true;
  return body as unknown as ResponsesStreamingParams;
}

/**
 * Asks for structured output: a JSON Schema `text.format`, or a function tool the model must call.
 * The tool is forced by name when it is the only one the model may call (no other tools, or
 * `toolChoice: 'none'`), else `tool_choice: 'required'` lets the model call the other tools first;
 * a `toolChoice` naming another tool is kept for this request.
 */
function addOutput(body: Record<string, unknown>, request: ModelRequest, output: OutputFormat, structuredOutputs: 'json_schema' | 'tool'): void {
  const { name, description, schema, strict } = output;
  if (structuredOutputs === 'json_schema') {
    const format = description === undefined ? { type: 'json_schema', name, schema, strict } : { type: 'json_schema', name, description, schema, strict };
    body.text = { ...(isRecord(body.text) ? body.text : undefined), format };
    return;
  }
  if (request.tools.some((tool) => tool.name === name)) {
    throw new TypeError(`a tool is named '${name}', the name of the structured output's tool: rename one of them`);
  }
  const tool: FunctionTool = {
    type: 'function',
    name,
    description: description ?? 'Give the final answer.',
    parameters: schema,
    strict,
  };
  const choice = request.toolChoice;
  const others = choice === 'none' ? [] : request.tools;
  body.tools = others.length === 0 ? [tool] : [...(body.tools as FunctionTool[]), tool];
  body.tool_choice =
    typeof choice === 'object' && others.length > 0 ? toResponsesToolChoice(choice) : others.length === 0 ? { type: 'function', name } : 'required';
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function toFunctionTool(tool: ToolSpec): FunctionTool {
  return { type: 'function', name: tool.name, description: tool.description, parameters: tool.parameters, strict: false };
}

function toResponsesToolChoice(choice: ToolChoice): ResponsesToolChoice {
  return typeof choice === 'string' ? choice : { type: 'function', name: choice.name };
}

function toInputItems(messages: readonly Message[]): InputItem[] {
  const items: InputItem[] = [];
  for (const message of messages) {
    switch (message.role) {
      case 'system':
      case 'user':
      case 'assistant': {
        let text = '';
        for (const part of message.content) if (part.type === 'text') text += part.text;
        if (text !== '' || message.role !== 'assistant') items.push({ role: message.role, content: text });
        if (message.role !== 'assistant') break;
        for (const part of message.content) {
          if (part.type === 'tool-call') items.push({ type: 'function_call', call_id: part.callId, name: part.name, arguments: argumentsText(part.args) });
        }
        break;
      }
      case 'tool':
        for (const part of message.content) {
          if (part.type === 'tool-result') items.push({ type: 'function_call_output', call_id: part.callId, output: resultText(part.result) });
        }
        break;
    }
  }
  return items;
}
