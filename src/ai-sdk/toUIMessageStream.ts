import { Observable, Subscriber, type OperatorFunction } from 'rxjs';
import type { AgentEvent, EventOf } from '../index';
import { UnparsedArguments } from '../messages/unparsedArguments';
import { needsJsonEscape } from '../internal/jsonString';
import { checkOptions, optionNames } from '../internal/optionNames';
import { isPlainJson, PLAIN_SCAN_DEPTH, sendable, toldOfError, unsentResult, unsentArguments } from '../internal/unsent';
import { CALL_NOT_MADE } from './fromUIMessages';

/**
 * A chunk of the AI SDK's UI message stream, protocol v1 (what `useChat`, `DefaultChatTransport`
 * and `readUIMessageStream` of the `ai` package read). Declared here so that this entry needs
 * no `ai` at run time or for its types.
 */
export type UIMessageChunk =
  | { type: 'start'; messageId?: string }
  | { type: 'start-step' }
  | { type: 'finish-step' }
  | { type: 'text-start' | 'text-end' | 'reasoning-start' | 'reasoning-end'; id: string }
  | { type: 'text-delta' | 'reasoning-delta'; id: string; delta: string }
  | { type: 'tool-input-start'; toolCallId: string; toolName: string }
  | { type: 'tool-input-delta'; toolCallId: string; inputTextDelta: string }
  | { type: 'tool-input-available'; toolCallId: string; toolName: string; input: unknown }
  | { type: 'tool-input-error'; toolCallId: string; toolName: string; input: unknown; errorText: string }
  | { type: 'tool-approval-request'; approvalId: string; toolCallId: string }
  | { type: 'tool-output-available'; toolCallId: string; output: unknown; preliminary?: boolean }
  | { type: 'tool-output-error'; toolCallId: string; errorText: string }
  | { type: 'tool-output-denied'; toolCallId: string }
  | { type: `data-${string}`; id?: string; data: unknown; transient?: boolean }
  | { type: 'finish'; finishReason?: 'stop' | 'length' | 'content-filter' | 'tool-calls' | 'error' | 'other' }
  | { type: 'abort'; reason?: string }
  | { type: 'error'; errorText: string };

/** Options of {@link toUIMessageStream}. */
export interface ToUIMessageStreamOptions {
  /**
   * The assistant message's id in the `start` chunk (default: the id of the run's first answer in
   * its history, `iteration-start.messageId`, for a stream from the run's start; none for a resumed
   * one, which continues the client's message).
   */
  messageId?: string;
  /**
   * The text a client is told of an error: that of the `error` chunk of a failed run, and the
   * `message` of every error a data chunk carries (`data-error`, `data-model-retry`,
   * `data-model-fallback`; `data-error-threshold-exceeded`'s `lastError`). Default:
   * `An error occurred.` for every one, as the AI SDK's own `toUIMessageStream` masks errors, so
   * no server detail goes out; `onError: (error) => error.message` sends them as they are.
   * When `onError` throws or returns no string, the text is `An error occurred.` and the stream goes on to the run's end.
   * A tool's error result (`tool-output-error`) is the text the model read, not an error of the run: it goes out as it is.
   */
  onError?: (error: { name: string; message: string }) => string;
  /** @internal The id a UI answers a run's request with (default: the `requestId`). */
  approvalId?: (runId: string, requestId: string) => string;
}

/** The keys of {@link ToUIMessageStreamOptions}: any other is refused. */
const OPTIONS = optionNames<ToUIMessageStreamOptions>({ messageId: true, onError: true, approvalId: true });

/**
 * Maps a run's events to the AI SDK UI message stream v1 chunks:
 *
 * - `run-start` → `start`, whose `messageId` is the id of the run's first answer in the history
 *   (events before the first iteration wait for it); `iteration-start` / `iteration-end` →
 *   `start-step` / `finish-step`;
 * - `text-delta` / `reasoning-delta` → `text-start`, `text-delta`, `text-end` (and `reasoning-*`), per iteration;
 * - `tool-input-start` / `tool-input-delta` → `tool-input-start` / `tool-input-delta`; `tool-call` →
 *   `tool-input-available` (`tool-input-error` for arguments that are not JSON);
 * - `permission-request` → `tool-approval-request` (`approvalId` the `requestId`);
 * - `tool-result` → `tool-output-available`, `tool-output-error` (an error result, `errorText` the
 *   result) or `tool-output-denied` (a refusal);
 * - `tool-progress` → `data-tool-progress` (`id` the call's, so each report replaces the last); a
 *   sub-agent's text (`agent.asTool()`: `value` is the child's `text-delta`) → a preliminary
 *   `tool-output-available` whose `output` is the child's text so far in its current iteration
 *   (the AI SDK's own streaming tool output; the result replaces it);
 * - `run-end` → `finish` (`finishReason` `stop`; `length` after max-iterations; `tool-calls` for a
 *   suspended run, which waits for approvals, and for a run that left calls to the client's own
 *   tools, `run-end.clientCalls`), `abort` when cancelled, `error` when the run failed;
 * - any other event → a transient `data-<type>` chunk (`onData` of `useChat` sees it; the message
 *   keeps none); that of an event with a `requestId` (a `continuation-request`, a `request-expired`)
 *   has `id`: the id to answer the request with.
 *
 * A value JSON cannot hold (a `BigInt`, a cycle) goes out as a string saying so, as `encodeSSE`
 * does: a tool result as a `tool-output-error` (`The tool result could not be sent: …`), a call's
 * input, and each field of a data chunk's `data` (a progress `value`…), as that string; the run's
 * later chunks follow. So any encoder takes every chunk (`JSON.stringify`, the `ai` package's
 * `createUIMessageStreamResponse`), and a chunk's JSON is what `aiSdkHandler` sends. The values
 * JSON holds go out as they are: the run's own objects, not copies.
 *
 * @example
 * const chunks$ = agent.run('Hi').pipe(toUIMessageStream());
 */
export function toUIMessageStream(options: ToUIMessageStreamOptions = {}): OperatorFunction<AgentEvent, UIMessageChunk> {
  checkOptions('toUIMessageStream', options, OPTIONS);
  return (source) => new Observable<UIMessageChunk>((subscriber) => source.subscribe(new ChunkMapper(options, subscriber)));
}

/**
 * @internal {@link toUIMessageStream} with each chunk written as its SSE frame, `data: <JSON>\n\n`:
 * a text delta's frame is made from its text alone, without the chunk object.
 */
export function toUIMessageFrames(options: ToUIMessageStreamOptions = {}): OperatorFunction<AgentEvent, string> {
  checkOptions('toUIMessageFrames', options, OPTIONS);
  return (source) =>
    new Observable<string>((subscriber) => source.subscribe(new ChunkMapper(options, subscriber as unknown as Subscriber<UIMessageChunk>, true)));
}

/** One stream's mapping state, as the Subscriber of the run: each event reaches the mapping in one call. */
class ChunkMapper extends Subscriber<AgentEvent> {
  private started = false;
  /** Events held after `run-start` until the first `iteration-start` gives `start` its message id. */
  private held: AgentEvent[] | undefined = undefined;
  private textId: string | undefined = undefined;
  private reasoningId: string | undefined = undefined;
  private part = 0;
  private stepOpen = false;
  /** The calls streaming (`tool-input-start` seen, `tool-call` not yet), by id: their name and arguments so far. */
  private readonly streamed = new Map<string, { readonly name: string; text: string }>();
  private lastError: { name: string; message: string } | undefined = undefined;
  /** A sub-agent's text so far, by the call that runs it. */
  private subagentText: Map<string, string> | undefined = undefined;
  /** What the client is told of an error: `options.onError`'s text (`An error occurred.` without it, or when it throws). */
  private readonly onError: (error: { name: string; message: string }) => string;

  /** The frame of a text delta up to the delta's JSON (`…"delta":`), and up to its text when it needs no escape (`…"delta":"`). */
  private textPrefix = '';
  private plainTextPrefix = '';

  constructor(
    private readonly options: ToUIMessageStreamOptions,
    private readonly out: Subscriber<UIMessageChunk>,
    /** Emit SSE frames (`data: <JSON>\n\n`) rather than chunks: text deltas skip the chunk object. */
    private readonly frames = false,
  ) {
    super(out);
    const onError = options.onError;
    this.onError = (error) => toldOfError(error, onError);
  }

  /** Sends a chunk; plain, as it is: for those of the stream's own strings (and a sub-agent's text). */
  private send(chunk: UIMessageChunk): void {
    if (!this.frames) return this.out.next(chunk);
    let json: string;
    try {
      json = JSON.stringify(chunk);
    } catch (error) {
      json = JSON.stringify(standIn(chunk, error));
    }
    this.out.next(`data: ${json}\n\n` as never);
  }

  /**
   * Sends a chunk that carries the run's `values` (a call's input, a tool's output, a progress
   * value, a data chunk's `data`): plain, what its frame carries ({@link sendableChunk}), so that
   * any encoder takes it.
   */
  private sendValues(chunk: UIMessageChunk, values: unknown): void {
    if (this.frames) return this.send(chunk);
    this.out.next(sendableChunk(chunk, values));
  }

  protected override _next(event: AgentEvent): void {
    try {
      this.accept(event);
    } catch (error) {
      // A mapping that fails errors this stream (and so cancels the run), as an operator's would,
      // rather than throwing into the code that emitted the event.
      this.error(error);
    }
  }

  private accept(event: AgentEvent): void {
    if (!this.started) {
      if (this.held) {
        if (event.type !== 'iteration-start' && event.type !== 'run-end') {
          this.held.push(event);
          return;
        }
        this.start(event.type === 'iteration-start' ? event.messageId : undefined);
      } else if (event.type === 'run-start' && event.resumed !== true && this.options.messageId === undefined) {
        this.held = [];
        return;
      } else this.start(this.options.messageId);
    }
    this.map(event);
  }

  protected override _complete(): void {
    if (!this.started) this.start(this.options.messageId);
    super._complete();
  }

  /** Sends `start`, then the events held for it. */
  private start(messageId: string | undefined): void {
    this.started = true;
    this.send(messageId === undefined ? { type: 'start' } : { type: 'start', messageId });
    const held = this.held;
    this.held = undefined;
    if (held) for (const event of held) this.map(event);
  }

  private map(event: AgentEvent): void {
    switch (event.type) {
      case 'run-start':
        return;
      case 'text-delta': {
        if (event.text === '') return;
        let id = this.textId;
        if (id === undefined) {
          if (this.reasoningId !== undefined) this.closeReasoning();
          id = this.textId = `${event.runId}-text-${this.part++}`;
          this.send({ type: 'text-start', id });
          // What JSON.stringify writes for the part's deltas, up to the delta.
          if (this.frames) {
            this.textPrefix = `data: {"type":"text-delta","id":${JSON.stringify(id)},"delta":`;
            this.plainTextPrefix = `${this.textPrefix}"`;
          }
        }
        if (this.frames) {
          // The frame JSON.stringify would write, in two concatenations and no intermediate string.
          const text = event.text;
          this.out.next((needsJsonEscape(text) ? this.textPrefix + JSON.stringify(text) + '}\n\n' : this.plainTextPrefix + text + '"}\n\n') as never);
        } else this.out.next({ type: 'text-delta', id, delta: event.text });
        return;
      }
      case 'reasoning-delta': {
        if (event.text === '') return;
        let id = this.reasoningId;
        if (id === undefined) {
          if (this.textId !== undefined) this.closeText();
          id = this.reasoningId = `${event.runId}-reasoning-${this.part++}`;
          this.send({ type: 'reasoning-start', id });
        }
        this.send({ type: 'reasoning-delta', id, delta: event.text });
        return;
      }
      case 'iteration-start':
        this.ensureStep();
        return;
      case 'iteration-end':
        this.closeParts();
        // A stream that started mid-iteration (a resumed run) finishes the step the client's message has open.
        this.stepOpen = false;
        this.send({ type: 'finish-step' });
        return;
      case 'tool-input-start':
        this.closeParts();
        this.streamed.set(event.callId, { name: event.name, text: '' });
        this.send({ type: 'tool-input-start', toolCallId: event.callId, toolName: event.name });
        return;
      case 'tool-input-delta': {
        if (event.argsDelta === '') return;
        const call = this.streamed.get(event.callId);
        if (call) call.text += event.argsDelta;
        this.send({ type: 'tool-input-delta', toolCallId: event.callId, inputTextDelta: event.argsDelta });
        return;
      }
      case 'tool-call':
        return this.call(event);
      case 'permission-request':
        this.send({
          type: 'tool-approval-request',
          approvalId: this.options.approvalId ? this.options.approvalId(event.runId, event.requestId) : event.requestId,
          toolCallId: event.callId,
        });
        return;
      case 'tool-result':
        this.subagentText?.delete(event.callId);
        if (event.denied) this.send({ type: 'tool-output-denied', toolCallId: event.callId });
        else if (event.isError)
          this.send({
            type: 'tool-output-error',
            toolCallId: event.callId,
            errorText: typeof event.result === 'string' ? event.result : resultText(event.result),
          });
        else this.sendValues({ type: 'tool-output-available', toolCallId: event.callId, output: event.result }, event.result);
        return;
      case 'tool-progress': {
        if (this.subagentProgress(event.callId, event.value)) return;
        const value = this.progressValue(event.value);
        this.sendValues({ type: 'data-tool-progress', id: event.callId, data: { callId: event.callId, value } }, value);
        return;
      }
      case 'model-retry':
      case 'model-fallback':
        // The attempt's partial answer stays as it was (its calls settled); the next streams in new parts.
        this.closeParts();
        this.settleCalls();
        return this.data(event);
      case 'error':
        this.lastError = event.error;
        return this.data(event);
      case 'run-end':
        return this.end(event);
      default:
        return this.data(event);
    }
  }

  private ensureStep(): void {
    if (this.stepOpen) return;
    this.stepOpen = true;
    this.send({ type: 'start-step' });
  }

  private closeText(): void {
    this.send({ type: 'text-end', id: this.textId as string });
    this.textId = undefined;
  }

  private closeReasoning(): void {
    this.send({ type: 'reasoning-end', id: this.reasoningId as string });
    this.reasoningId = undefined;
  }

  private closeParts(): void {
    if (this.reasoningId !== undefined) this.closeReasoning();
    if (this.textId !== undefined) this.closeText();
  }

  /**
   * Ends the calls still streaming, whose answer was dropped (a retry, a fallback) or cut off (the
   * run's end): a `tool-input-error` with the arguments so far, which the `ai` package turns into a
   * finished `output-error` part, and which `fromUIMessages` leaves out of the history, as the
   * run's own history has no such call. Without it, the part would stay `input-streaming`.
   */
  private settleCalls(): void {
    for (const [toolCallId, { name, text }] of this.streamed) {
      this.send({ type: 'tool-input-error', toolCallId, toolName: name, input: text, errorText: CALL_NOT_MADE });
    }
    this.streamed.clear();
  }

  private call(event: EventOf<'tool-call'>): void {
    if (!this.streamed.has(event.callId)) {
      this.closeParts();
      this.send({ type: 'tool-input-start', toolCallId: event.callId, toolName: event.name });
    }
    this.streamed.delete(event.callId);
    if (event.args instanceof UnparsedArguments) {
      this.send({ type: 'tool-input-error', toolCallId: event.callId, toolName: event.name, input: event.args.text, errorText: event.args.reason });
    } else {
      this.sendValues({ type: 'tool-input-available', toolCallId: event.callId, toolName: event.name, input: event.args }, event.args);
    }
  }

  /** A sub-agent's text as the call's preliminary output; true when `value` was one of its text deltas or iteration starts. */
  private subagentProgress(callId: string, value: unknown): boolean {
    if (typeof value !== 'object' || value === null || typeof (value as AgentEvent).runId !== 'string') return false;
    const event = value as AgentEvent;
    if (event.type === 'iteration-start') {
      this.subagentText?.delete(callId); // the output shows the answer the sub-agent is writing now
      return true;
    }
    if (event.type !== 'text-delta') return false;
    if (event.text === '') return true;
    const texts = (this.subagentText ??= new Map());
    const text = (texts.get(callId) ?? '') + event.text;
    texts.set(callId, text);
    this.send({ type: 'tool-output-available', toolCallId: callId, output: text, preliminary: true });
    return true;
  }

  /** A progress value, a sub-agent's event with its errors' text through `onError`. */
  private progressValue(value: unknown): unknown {
    const onError = this.onError;
    if (typeof value !== 'object' || value === null || typeof (value as AgentEvent).runId !== 'string') return value;
    if (!MASKED.has((value as AgentEvent).type)) return value;
    const event = { ...(value as AgentEvent & Record<string, unknown>) };
    maskErrors(event.type, event, onError);
    return event;
  }

  private data(event: AgentEvent): void {
    const { type, runId, ...data } = event as AgentEvent & Record<string, unknown>;
    maskErrors(type, data, this.onError);
    const requestId = data.requestId;
    if (typeof requestId !== 'string') return this.sendValues({ type: `data-${type}`, data, transient: true }, data);
    const id = this.options.approvalId ? this.options.approvalId(runId, requestId) : requestId;
    this.sendValues({ type: `data-${type}`, id, data, transient: true }, data);
  }

  private end(event: EventOf<'run-end'>): void {
    this.closeParts();
    this.settleCalls();
    if (this.stepOpen) {
      this.stepOpen = false;
      this.send({ type: 'finish-step' });
    }
    const reason = event.reason as string;
    if (reason === 'error') {
      const error = this.lastError ?? { name: 'Error', message: 'The run failed' };
      this.send({ type: 'error', errorText: this.onError(error) });
    } else if (reason === 'cancelled') {
      this.send({ type: 'abort', reason: 'cancelled' });
    } else {
      // A run that waits for answers (approvals, or the client's own tools' results) stopped for tool calls, as a model that calls client tools does.
      const waits = reason === 'suspended' || (event.clientCalls !== undefined && event.clientCalls.length > 0);
      this.send({ type: 'finish', finishReason: waits ? 'tool-calls' : reason === 'max-iterations' ? 'length' : 'stop' });
    }
  }
}

/** The events whose fields carry an error's text. */
const MASKED: ReadonlySet<string> = new Set(['error', 'model-retry', 'model-fallback', 'error-threshold-exceeded']);

/** Puts the error text an event's `fields` carry through `onError`: an `error`'s, a retry's or fallback's, a threshold's last error. */
function maskErrors(type: string, fields: Record<string, unknown>, onError: (error: { name: string; message: string }) => string): void {
  if (type === 'error' || type === 'model-retry' || type === 'model-fallback') {
    const error = fields.error as { name: string; message: string } | undefined;
    if (typeof error === 'object' && error !== null) fields.error = { ...error, message: onError(error) };
  } else if (type === 'error-threshold-exceeded' && typeof fields.lastError === 'string') {
    fields.lastError = onError({ name: 'Error', message: fields.lastError });
  }
}

/** The text of an error result that is not a string: its JSON (its string form when JSON has no text for it). */
function resultText(result: unknown): string {
  try {
    return JSON.stringify(result) ?? String(result); // JSON has no text for undefined or a function
  } catch (error) {
    return unsentResult(error);
  }
}

/**
 * What goes out instead of a chunk JSON cannot hold (a `BigInt`, a cycle), as `encodeSSE` does: a
 * tool result becomes an error saying so; a call's input, and each field of a data chunk's `data`
 * that JSON cannot hold, a string saying so. The other chunks carry only the stream's own strings.
 */
function standIn(chunk: UIMessageChunk, error: unknown): UIMessageChunk {
  switch (chunk.type) {
    case 'tool-output-available':
      return { type: 'tool-output-error', toolCallId: chunk.toolCallId, errorText: unsentResult(error) };
    case 'tool-input-available':
      return { ...chunk, input: unsentArguments(error) };
  }
  if (!('data' in chunk)) throw error;
  return { ...chunk, data: sendable(chunk.data, 1) };
}

/**
 * A plain chunk that carries the run's `values`, as its frame carries it: itself (the same object,
 * no copy) when JSON holds it, else {@link standIn}, made from the error of its `JSON.stringify` as
 * the frame's is. Values of strings, numbers and booleans in plain objects and arrays (a sub-agent's
 * deltas in progress values, most data) are seen to be JSON without writing it ({@link isPlainJson}).
 */
function sendableChunk(chunk: UIMessageChunk, values: unknown): UIMessageChunk {
  try {
    if (isPlainJson(values, PLAIN_SCAN_DEPTH)) return chunk;
  } catch {
    // A getter or a proxy that throws: JSON.stringify tells, as it does for the frame.
  }
  try {
    JSON.stringify(chunk);
    return chunk;
  } catch (error) {
    return standIn(chunk, error);
  }
}
