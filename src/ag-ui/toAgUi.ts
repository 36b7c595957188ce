import { Observable, Subscriber, type OperatorFunction } from 'rxjs';
import { EventType, type BaseEvent, type Interrupt, type RunAgentInput } from '@ag-ui/client';
import type { AgentEvent, EventOf } from '../index';
import { UnparsedArguments } from '../messages/unparsedArguments';
import { needsJsonEscape } from '../internal/jsonString';
import { checkOptions, optionNames } from '../internal/optionNames';
import { isPlainJson, PLAIN_SCAN_DEPTH, SENDABLE_DEPTH, sendable, toldOfError, unsentResult, unsentArguments } from '../internal/unsent';

/** Options of {@link toAgUi}. */
export interface ToAgUiOptions {
  /** The conversation's id in `RUN_STARTED`/`RUN_FINISHED` (default: the `input`'s, else the run's `sessionId`, else its `runId`). */
  threadId?: string;
  /** The run's id in `RUN_STARTED`/`RUN_FINISHED` (default: the `input`'s, else the rx-agent run's `runId`). */
  runId?: string;
  /** The request the run was started from, echoed in `RUN_STARTED.input`; its `threadId` and `runId` are the events' by default. */
  input?: RunAgentInput;
  /**
   * The text a client is told of an error: `RUN_ERROR.message`,
   * `SUBAGENT_ERROR.message`, `value.error.message` of the `CUSTOM` events that carry an error
   * (`error`, `model-retry`, `model-fallback`, a sub-agent's) and `value.lastError` of
   * `error-threshold-exceeded`; the error's `name` stays. Default: `An error occurred.` for every
   * one (as the AI SDK binding, so no server detail goes out); `onError: (error) => error.message`
   * sends them as they are. When `onError` throws or returns no string, the text is
   * `An error occurred.` and the stream goes on to the run's end.
   *
   * @example
   * toAgUi({ onError: (error) => (error.name === 'ModelError' ? 'The model is unavailable' : 'Something went wrong') })
   */
  onError?: (error: { name: string; message: string }) => string;
  /** @internal The interrupt id of a run's request (default: the `requestId`). */
  interruptId?: (runId: string, requestId: string) => string;
}

/** The keys of {@link ToAgUiOptions}: any other is refused. */
const TO_AG_UI_OPTIONS = optionNames<ToAgUiOptions>({ threadId: true, runId: true, input: true, onError: true, interruptId: true });

/** @internal Throws a TypeError naming `caller` for an `onError` option that is not a function. */
export function checkOnError(caller: string, onError: unknown): void {
  if (onError !== undefined && typeof onError !== 'function') throw new TypeError(`${caller}: onError must be a function (error) => string`);
}

/** The key of the `metadata` entries this mapping adds (`ag-ui` is the protocol's own). */
export const AG_UI_METADATA_KEY = 'rx-agent';

type Sink = Subscriber<BaseEvent>;

/**
 * Maps a run's events to AG-UI 1.0 events, for any AG-UI client (`@ag-ui/client`, CopilotKit):
 *
 * - `run-start` → `RUN_STARTED` (also sent first when a stream starts mid-run, as a resumed one does);
 * - `iteration-start` / `iteration-end` → `STEP_STARTED` / `STEP_FINISHED` (`stepName` `iteration-<n>`);
 * - `reasoning-delta` → `REASONING_START`, `REASONING_MESSAGE_START`, `…_CONTENT`, then `…_END` and `REASONING_END`;
 * - `text-delta` → `TEXT_MESSAGE_START` (role `assistant`), `TEXT_MESSAGE_CONTENT`, `TEXT_MESSAGE_END`;
 * - `tool-input-start` / `tool-input-delta` / `tool-call` → `TOOL_CALL_START` / `TOOL_CALL_ARGS` /
 *   `TOOL_CALL_END` (a call that did not stream gets its arguments in one `TOOL_CALL_ARGS`);
 * - `tool-result` → `TOOL_CALL_RESULT` (`content`: the result, JSON unless a string; an error or
 *   a refusal is told in `metadata['rx-agent']` as `{ isError, denied?, reason? }`, which
 *   {@link fromAgUiMessages} reads back);
 * - `state-changed` (state defined with `shared: true`) → `STATE_DELTA`, a JSON Patch `add` of
 *   the key, which the client applies to the state it has (its other keys kept). No
 *   `STATE_SNAPSHOT` is sent: a run started from the client's `state` holds what the client holds
 *   already, and a snapshot would drop the client's own keys;
 * - `run-end` → `RUN_FINISHED` with outcome `success` (`result`: `{ text, reason }`, plus `output`,
 *   the checked answer, for a run with structured output), `cancelled`,
 *   or `interrupt` for a suspended run (one interrupt per pending request: `id` the `requestId`,
 *   `reason` the request's type, `toolCallId` for a permission request); reason `error` → `RUN_ERROR`
 *   (`message`: what `onError` makes of the error, by default `An error occurred.`);
 * - `tool-progress` whose `value` is a sub-agent's event (`agent.asTool()`) → the sub-agent's
 *   segment: `SUBAGENT_STARTED` (`subagentRunId` the child's run id, `name` the tool's,
 *   `parentToolCallId`), its text as `TEXT_MESSAGE_*` with that `subagentRunId`, its other events
 *   as `CUSTOM` with it, then `SUBAGENT_FINISHED` (`result` its text) or `SUBAGENT_ERROR`;
 * - any other event (requests, other `tool-progress`, the operators' own) → `CUSTOM` with `name`
 *   the event's type and `value` its fields.
 *
 * Message ids are the history's: an iteration's text and its calls' `parentMessageId` carry the id
 * its answer gets in the run's messages (`iteration-start.messageId`); a model retry or fallback
 * closes the open messages and the next attempt streams under the id its event gives the next
 * answer. A reasoning message is `<id>-reasoning`; a tool result's message is
 * `<runId>-result-<callId>` (rx-agent keeps an iteration's results in one tool message).
 *
 * What JSON cannot hold (a `BigInt`, a cycle) still goes out, as the SSE binding sends it: a tool
 * result as `content` saying so (`The tool result could not be sent: …`, told as an error), call
 * arguments as a `TOOL_CALL_ARGS` saying so, and any other such value (in a `CUSTOM` event, a
 * `STATE_DELTA`, a structured output, an interrupt's request) as `The value could not be sent: …`
 * in its place, so that `JSON.stringify` or `@ag-ui/encoder` takes every event; the run's later
 * events follow. The values JSON holds are the run's own, not copies.
 *
 * @example
 * agent.run('Hi').pipe(toAgUi({ threadId: 't1' })).subscribe((event) => send(event));
 */
export function toAgUi(options: ToAgUiOptions = {}): OperatorFunction<AgentEvent, BaseEvent> {
  checkOptions('toAgUi', options, TO_AG_UI_OPTIONS);
  checkOnError('toAgUi', options.onError);
  return (source) => new Observable<BaseEvent>((subscriber) => source.subscribe(new AgUiMapper(options, subscriber)));
}

/**
 * @internal {@link toAgUi} with each event written as its SSE frame, `data: <JSON>\n\n` (what
 * `@ag-ui/encoder` writes): a text delta's frame is made from its text alone, without the event object.
 */
export function toAgUiFrames(options: ToAgUiOptions = {}): OperatorFunction<AgentEvent, string> {
  checkOptions('toAgUiFrames', options, TO_AG_UI_OPTIONS);
  checkOnError('toAgUiFrames', options.onError);
  return (source) => new Observable<string>((subscriber) => source.subscribe(new AgUiMapper(options, subscriber as unknown as Sink, true)));
}

/**
 * One stream's mapping state (the open messages and calls, the shared state so far), as the
 * Subscriber of the run: each event reaches the mapping in one call.
 */
class AgUiMapper extends Subscriber<AgentEvent> {
  private started = false;
  private threadId: string | undefined;
  private runId: string | undefined;
  /** The assistant message of the current iteration attempt, and whether its text is open. */
  private messageId = '';
  private textOpen = false;
  private reasoningId: string | undefined = undefined;
  private attempt = 0;
  private iteration = 0;
  /** The step (iteration) STEP_STARTED opened and STEP_FINISHED has not closed. */
  private step: string | undefined = undefined;
  /** Calls whose TOOL_CALL_START was sent and whose TOOL_CALL_END was not. */
  private readonly openCalls = new Set<string>();
  /** Request events seen, by `requestId` (a suspended run's interrupts are told from them). */
  private readonly requests = new Map<string, AgentEvent>();
  private lastError: { name: string; message: string } | undefined = undefined;
  /** The tool names of the calls seen, by call id (a sub-agent is named after its tool). */
  private readonly callNames = new Map<string, string>();
  /** The sub-agents whose segment is open, by their run id. */
  private readonly subagents = new Map<string, Subagent>();

  /** The frame of a text delta up to the delta's JSON (`…"delta":`), and up to its text when it needs no escape (`…"delta":"`). */
  private textPrefix = '';
  private plainTextPrefix = '';

  constructor(
    private readonly options: ToAgUiOptions,
    private readonly out: Sink,
    /** Emit SSE frames (`data: <JSON>\n\n`) rather than events: text deltas skip the event object. */
    private readonly frames = false,
  ) {
    super(out);
  }

  private send(event: BaseEvent): void {
    this.out.next(this.frames ? (frameOf(event) as never) : event);
  }

  /**
   * Sends an event that carries the run's values (a state, an event's fields, an output) with what
   * JSON cannot hold in them replaced by a string saying so, as its frame has it: a frame's own
   * `JSON.stringify` finds such a value; an event is scanned, and written only when the scan cannot
   * tell (never a delta's).
   */
  private sendValues(event: BaseEvent): void {
    if (this.frames) return this.out.next(frameOf(event) as never);
    this.out.next(isPlainJson(event, PLAIN_SCAN_DEPTH) ? event : (sendable(event, SENDABLE_DEPTH) as BaseEvent));
  }

  /** What the client is told of `error` (`onError`'s text, by default `An error occurred.`). */
  private errorText(error: { name: string; message: string }): string {
    return toldOfError(error, this.options.onError);
  }

  protected override _next(event: AgentEvent): void {
    if (!this.started) this.start(event);
    switch (event.type) {
      case 'run-start':
        return;
      case 'text-delta':
        if (event.text === '') return;
        if (this.reasoningId) this.closeReasoning();
        if (!this.textOpen) {
          this.textOpen = true;
          this.send({ type: EventType.TEXT_MESSAGE_START, messageId: this.messageId, role: 'assistant' });
          // What JSON.stringify writes for the message's content events, up to the delta.
          if (this.frames) {
            this.textPrefix = `data: {"type":"${EventType.TEXT_MESSAGE_CONTENT}","messageId":${JSON.stringify(this.messageId)},"delta":`;
            this.plainTextPrefix = `${this.textPrefix}"`;
          }
        }
        if (this.frames) {
          // The frame JSON.stringify would write, in two concatenations and no intermediate string.
          const text = event.text;
          this.out.next((needsJsonEscape(text) ? this.textPrefix + JSON.stringify(text) + '}\n\n' : this.plainTextPrefix + text + '"}\n\n') as never);
        } else this.out.next({ type: EventType.TEXT_MESSAGE_CONTENT, messageId: this.messageId, delta: event.text });
        return;
      case 'reasoning-delta': {
        if (event.text === '') return;
        if (this.textOpen) this.closeText();
        let id = this.reasoningId;
        if (!id) {
          id = this.reasoningId = `${this.messageId}-reasoning`;
          this.send({ type: EventType.REASONING_START, messageId: id });
          this.send({ type: EventType.REASONING_MESSAGE_START, messageId: id, role: 'reasoning' });
        }
        this.send({ type: EventType.REASONING_MESSAGE_CONTENT, messageId: id, delta: event.text });
        return;
      }
      case 'iteration-start':
        this.iteration = event.iteration;
        this.attempt = 0;
        this.messageId = event.messageId ?? this.newMessageId();
        this.closeStep();
        this.step = `iteration-${event.iteration}`;
        this.send({ type: EventType.STEP_STARTED, stepName: this.step });
        return;
      case 'iteration-end':
        this.closeMessages();
        // A stream that started mid-iteration (a resumed run) opens the step it finishes.
        if (this.step === undefined) this.send({ type: EventType.STEP_STARTED, stepName: `iteration-${event.iteration}` });
        this.step = `iteration-${event.iteration}`;
        this.closeStep();
        return;
      case 'tool-input-start':
        this.startCall(event.callId, event.name);
        return;
      case 'tool-input-delta':
        if (this.openCalls.has(event.callId) && event.argsDelta !== '')
          this.send({ type: EventType.TOOL_CALL_ARGS, toolCallId: event.callId, delta: event.argsDelta });
        return;
      case 'tool-call':
        return this.completeCall(event);
      case 'tool-result':
        return this.result(event);
      case 'model-retry':
      case 'model-fallback':
        // The attempt's partial answer is dropped: close what is open, stream the next under new ids.
        this.closeMessages();
        this.attempt++;
        this.messageId = event.messageId ?? this.newMessageId();
        return this.custom(event);
      case 'error':
        this.lastError = event.error;
        return this.custom(event);
      case 'run-end':
        return this.end(event);
      case 'state-changed':
        return this.stateChanged(event);
      case 'tool-progress':
        if (isAgentEvent(event.value)) return this.subagentEvent(event.callId, event.value, undefined);
        return this.custom(event);
      default:
        if (typeof (event as { requestId?: unknown }).requestId === 'string' && event.type.endsWith('-request')) {
          this.requests.set((event as { requestId: string }).requestId, event);
        }
        return this.custom(event);
    }
  }

  private start(event: AgentEvent): void {
    this.started = true;
    const sessionId = event.type === 'run-start' ? event.sessionId : undefined;
    const { input } = this.options;
    this.runId = this.options.runId ?? input?.runId ?? event.runId;
    this.threadId = this.options.threadId ?? input?.threadId ?? sessionId ?? event.runId;
    this.messageId = this.newMessageId();
    const started: Record<string, unknown> = { type: EventType.RUN_STARTED, threadId: this.threadId, runId: this.runId };
    if (this.options.input) {
      started.input = this.options.input;
      this.sendValues(started as BaseEvent);
    } else this.send(started as BaseEvent);
  }

  /** An id for an answer whose events do not name it (a stream that starts mid-iteration). */
  private newMessageId(): string {
    return this.attempt === 0 ? `${this.runId}-${this.iteration}` : `${this.runId}-${this.iteration}-${this.attempt}`;
  }

  private closeStep(): void {
    if (this.step === undefined) return;
    this.send({ type: EventType.STEP_FINISHED, stepName: this.step });
    this.step = undefined;
  }

  private closeText(): void {
    this.textOpen = false;
    this.send({ type: EventType.TEXT_MESSAGE_END, messageId: this.messageId });
  }

  private closeReasoning(): void {
    const id = this.reasoningId as string;
    this.reasoningId = undefined;
    this.send({ type: EventType.REASONING_MESSAGE_END, messageId: id });
    this.send({ type: EventType.REASONING_END, messageId: id });
  }

  private closeMessages(): void {
    // Sub-agents still open when their parent's step closes (the parent was cancelled mid-call).
    for (const [runId, sub] of this.subagents) this.endSubagent(runId, sub, { error: 'The sub-agent ended with its call', code: 'cancelled' });
    if (this.reasoningId) this.closeReasoning();
    if (this.textOpen) this.closeText();
    for (const callId of this.openCalls) this.send({ type: EventType.TOOL_CALL_END, toolCallId: callId });
    this.openCalls.clear();
  }

  private startCall(callId: string, name: string): void {
    if (this.reasoningId) this.closeReasoning();
    if (this.textOpen) this.closeText();
    this.openCalls.add(callId);
    this.callNames.set(callId, name);
    this.send({ type: EventType.TOOL_CALL_START, toolCallId: callId, toolCallName: name, parentMessageId: this.messageId });
  }

  private completeCall(event: EventOf<'tool-call'>): void {
    if (!this.openCalls.has(event.callId)) {
      // Not streamed (a model that sends calls whole, a call a middleware added): sent whole.
      this.startCall(event.callId, event.name);
      const args = argumentsText(event.args);
      if (args !== '') this.send({ type: EventType.TOOL_CALL_ARGS, toolCallId: event.callId, delta: args });
    }
    this.openCalls.delete(event.callId);
    this.send({ type: EventType.TOOL_CALL_END, toolCallId: event.callId });
  }

  private result(event: EventOf<'tool-result'>): void {
    // A sub-agent the call ran and that sent no end of its own (a tool that forwards some events only).
    for (const [runId, sub] of this.subagents) if (sub.callId === event.callId) this.endSubagent(runId, sub, { type: 'success' });
    this.callNames.delete(event.callId);
    let content: string;
    let unsent = false;
    if (typeof event.result === 'string') content = event.result;
    else {
      try {
        content = JSON.stringify(event.result) ?? '';
      } catch (error) {
        // What the SSE binding sends for it: a string saying so, told as an error.
        content = unsentResult(error);
        unsent = true;
      }
    }
    const out: Record<string, unknown> = {
      type: EventType.TOOL_CALL_RESULT,
      messageId: `${this.runId}-result-${event.callId}`,
      toolCallId: event.callId,
      content,
      role: 'tool',
    };
    if (event.isError || event.denied || unsent) {
      const about: Record<string, unknown> = { isError: event.isError || unsent };
      if (event.denied) {
        about.denied = true;
        if (event.reason !== undefined) about.reason = event.reason;
      }
      out.metadata = { [AG_UI_METADATA_KEY]: about };
    }
    this.send(out as BaseEvent);
  }

  /**
   * A JSON Patch `add` of the key: it sets a member whether or not the client's state has it, and
   * leaves the rest of that state alone (a `STATE_SNAPSHOT` would replace all of it, the client's
   * initial state and earlier runs' keys included, with the keys this run happened to change).
   */
  private stateChanged(change: { key: string; value: unknown }): void {
    const path = `/${change.key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    this.sendValues({ type: EventType.STATE_DELTA, delta: [{ op: 'add', path, value: change.value }] });
  }

  private custom(event: AgentEvent, subagentRunId?: string): void {
    const { type, runId: _runId, ...value } = event as AgentEvent & Record<string, unknown>;
    const delta = DELTAS.has(type);
    if (!delta) this.maskErrors(type, value);
    const custom: BaseEvent =
      subagentRunId === undefined ? { type: EventType.CUSTOM, name: type, value } : { type: EventType.CUSTOM, name: type, value, subagentRunId };
    // A sub-agent's deltas hold strings and numbers only: no check per delta.
    if (delta) this.send(custom);
    else this.sendValues(custom);
  }

  /**
   * Puts the error text an event's fields carry through `onError`: an `error`'s (`error`,
   * `model-retry`, `model-fallback`…), a threshold's last error.
   */
  private maskErrors(type: string, fields: Record<string, unknown>): void {
    const error = fields.error;
    if (isErrorInfo(error)) fields.error = { ...error, message: this.errorText(error) };
    else if (type === 'error-threshold-exceeded' && typeof fields.lastError === 'string')
      fields.lastError = this.errorText({ name: 'Error', message: fields.lastError });
  }

  /** An event of the sub-agent a call runs (`parent`: the sub-agent that runs this one, if nested). */
  private subagentEvent(callId: string, event: AgentEvent, parent: string | undefined): void {
    if (event.type === 'tool-progress' && isAgentEvent(event.value)) return this.subagentEvent(event.callId, event.value, event.runId);
    const runId = event.runId;
    let sub = this.subagents.get(runId);
    if (!sub) {
      sub = { callId, messageId: undefined, answerId: undefined, messages: 0, error: undefined };
      this.subagents.set(runId, sub);
      const started: Record<string, unknown> = {
        type: EventType.SUBAGENT_STARTED,
        subagentRunId: runId,
        name: this.callNames.get(callId) ?? 'agent',
        parentToolCallId: callId,
      };
      if (parent !== undefined) started.parentSubagentRunId = parent;
      this.send(started as BaseEvent);
    }
    switch (event.type) {
      case 'run-start':
        return;
      case 'iteration-start':
        sub.answerId = event.messageId;
        return;
      case 'text-delta':
        if (event.text === '') return;
        if (sub.messageId === undefined) {
          // The sub-agent's answer id (its history's), once; a later text segment of the iteration gets its own.
          sub.messageId = sub.answerId ?? `${runId}-${sub.messages++}`;
          sub.answerId = undefined;
          this.send({ type: EventType.TEXT_MESSAGE_START, messageId: sub.messageId, role: 'assistant', subagentRunId: runId });
        }
        this.send({ type: EventType.TEXT_MESSAGE_CONTENT, messageId: sub.messageId, delta: event.text, subagentRunId: runId });
        return;
      case 'iteration-end':
        return this.closeSubagentText(runId, sub);
      case 'run-end': {
        const reason = event.reason as string;
        if (reason === 'error') {
          const error = sub.error ?? { name: 'Error', message: 'The sub-agent failed' };
          return this.endSubagent(runId, sub, { error: this.errorText(error), code: error.name });
        }
        if (reason === 'cancelled') return this.endSubagent(runId, sub, { error: 'The sub-agent was cancelled', code: 'cancelled' });
        return this.endSubagent(runId, sub, reason === 'suspended' ? { type: 'suspended' } : { type: 'success', result: event.text });
      }
      case 'error':
        sub.error = event.error;
        return this.custom(event, runId);
      case 'model-retry':
      case 'model-fallback':
        this.closeSubagentText(runId, sub);
        sub.answerId = event.messageId;
        return this.custom(event, runId);
      case 'tool-input-start':
      case 'tool-call':
        this.closeSubagentText(runId, sub);
        return this.custom(event, runId);
      default:
        return this.custom(event, runId);
    }
  }

  private closeSubagentText(runId: string, sub: Subagent): void {
    if (sub.messageId === undefined) return;
    this.send({ type: EventType.TEXT_MESSAGE_END, messageId: sub.messageId, subagentRunId: runId });
    sub.messageId = undefined;
  }

  private endSubagent(runId: string, sub: Subagent, end: { type: 'success'; result?: string } | { type: 'suspended' } | { error: string; code: string }): void {
    this.closeSubagentText(runId, sub);
    this.subagents.delete(runId);
    if ('error' in end) {
      this.send({ type: EventType.SUBAGENT_ERROR, subagentRunId: runId, message: end.error, code: end.code });
      return;
    }
    const finished: Record<string, unknown> = { type: EventType.SUBAGENT_FINISHED, subagentRunId: runId, outcome: { type: end.type } };
    if (end.type === 'success' && end.result !== undefined) finished.result = end.result;
    this.send(finished as BaseEvent);
  }

  private end(event: EventOf<'run-end'>): void {
    this.closeMessages();
    this.closeStep();
    const reason = event.reason as string;
    if (reason === 'error') {
      const error = this.lastError ?? { name: 'Error', message: 'The run failed' };
      this.send({ type: EventType.RUN_ERROR, message: this.errorText(error), code: error.name });
      return;
    }
    const finished: Record<string, unknown> = { type: EventType.RUN_FINISHED, threadId: this.threadId, runId: this.runId };
    if (reason === 'cancelled') {
      finished.outcome = { type: 'cancelled' };
    } else if (reason === 'suspended') {
      const pending = (event as { pendingRequests?: ReadonlyArray<{ requestId: string; type: string; deadline?: number }> }).pendingRequests ?? [];
      finished.outcome = { type: 'interrupt', interrupts: pending.map((p) => this.interrupt(event.runId, p)) };
    } else {
      const result: Record<string, unknown> = { text: event.text, reason };
      if (event.terminationReason !== undefined) result.terminationReason = event.terminationReason;
      // A run with structured output: the answer its schema checked (and transformed).
      if (event.output !== undefined) result.output = event.output;
      finished.result = result;
      finished.outcome = { type: 'success' };
    }
    const usage = event.usage;
    if (usage && (usage.inputTokens > 0 || usage.outputTokens > 0)) {
      finished.usage = [{ inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, totalTokens: usage.inputTokens + usage.outputTokens }];
    }
    this.sendValues(finished as BaseEvent);
  }

  private interrupt(runId: string, pending: { requestId: string; type: string; deadline?: number }): Interrupt {
    const request = this.requests.get(pending.requestId) as (AgentEvent & Record<string, unknown>) | undefined;
    const { interruptId } = this.options;
    const id = interruptId ? interruptId(runId, pending.requestId) : pending.requestId;
    const interrupt: Interrupt = { id, reason: pending.type };
    if (pending.deadline !== undefined) interrupt.expiresAt = new Date(pending.deadline).toISOString();
    if (!request) return interrupt;
    const { type: _type, runId: _runId, ...fields } = request;
    if (typeof fields.callId === 'string') interrupt.toolCallId = fields.callId;
    if (request.type === 'permission-request') {
      interrupt.message = `Allow ${request.toolName}?${request.description ? ` (${request.description})` : ''}`;
      interrupt.responseSchema = PERMISSION_ANSWER_SCHEMA;
    } else if (request.type === 'continuation-request') {
      interrupt.message = `Continue past ${request.limit} iterations?`;
      interrupt.responseSchema = CONTINUATION_ANSWER_SCHEMA;
    }
    interrupt.metadata = { [AG_UI_METADATA_KEY]: { request: fields } };
    return interrupt;
  }
}

const PERMISSION_ANSWER_SCHEMA = {
  type: 'object',
  properties: { approved: { type: 'boolean' }, reason: { type: 'string' }, remember: { enum: ['always', 'never'] } },
  required: ['approved'],
};

const CONTINUATION_ANSWER_SCHEMA = {
  type: 'object',
  properties: { approved: { type: 'boolean' }, extension: { type: 'integer', minimum: 1 } },
  required: ['approved'],
};

/** The events that stream a piece of text, whose fields JSON always holds. */
const DELTAS: ReadonlySet<string> = new Set(['text-delta', 'reasoning-delta', 'tool-input-delta']);

/** A sub-agent's open segment: the call that runs it, its open text message, its last error. */
interface Subagent {
  readonly callId: string;
  messageId: string | undefined;
  /** The id the sub-agent's current iteration gives its answer, until its text uses it. */
  answerId: string | undefined;
  messages: number;
  error: { name: string; message: string } | undefined;
}

/** A `tool-progress` value that is an event of a run (a sub-agent's, from `agent.asTool()`). */
function isAgentEvent(value: unknown): value is AgentEvent {
  return typeof value === 'object' && value !== null && typeof (value as AgentEvent).type === 'string' && typeof (value as AgentEvent).runId === 'string';
}

/** An `ErrorInfo` (`{ name, message }`), as events carry errors. */
function isErrorInfo(value: unknown): value is { name: string; message: string } {
  return typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string';
}

/**
 * A call's arguments as the JSON text AG-UI streams (arguments the model sent unparsed stay as
 * sent; arguments JSON cannot hold are a string saying so, as the SSE binding sends them).
 */
function argumentsText(args: unknown): string {
  if (args instanceof UnparsedArguments) return args.text;
  try {
    return JSON.stringify(args) ?? '';
  } catch (error) {
    return unsentArguments(error);
  }
}

/**
 * The SSE frame of an event, `data: <JSON>\n\n`. An event JSON cannot hold (a `BigInt`, a cycle
 * in a `CUSTOM` value or a state) is sent with each value it cannot hold replaced by a string
 * saying so (as the SSE binding sends a tool result), so the client still gets the event and the
 * rest of the run.
 */
function frameOf(event: BaseEvent): string {
  let json: string;
  try {
    json = JSON.stringify(event);
  } catch {
    json = JSON.stringify(sendable(event, SENDABLE_DEPTH));
  }
  return `data: ${json}\n\n`;
}
