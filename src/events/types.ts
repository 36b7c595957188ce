import type { Usage } from '../model/types';

/** How an error travels inside an event: plain data, safe to serialise. */
export interface ErrorInfo {
  readonly name: string;
  readonly message: string;
  readonly status?: number;
}

/** Why a run ended. */
export type RunEndReason = 'completed' | 'terminated' | 'max-iterations' | 'cancelled' | 'error' | 'suspended';

/**
 * A request a suspended run waits for (in `run-end` and `agent.runs.get()`).
 *
 * @example
 * for (const { requestId, deadline } of runEnd.pendingRequests ?? []) showApproval(requestId, deadline);
 */
export interface PendingRequest {
  readonly requestId: string;
  /** The request event's type (`permission-request`…). */
  readonly type: string;
  /** When it expires (ms since the epoch), if it has a timeout. */
  readonly deadline?: number;
}

/**
 * A call of a client tool (`defineClientTool`) that the client must run and answer: in `run-end`
 * and `invoke()`'s result (`clientCalls`).
 *
 * @example
 * for (const { callId, name, args } of runEnd.clientCalls ?? []) results.push(await runInBrowser(callId, name, args));
 */
export interface ClientCall {
  readonly callId: string;
  readonly name: string;
  readonly args: unknown;
}

/** A todo item of the `todoList` operator. */
export interface TodoItem {
  readonly content: string;
  readonly status: 'pending' | 'in_progress' | 'completed';
}

/**
 * Every event type and its fields (besides `type` and `runId`). Add your own event types by
 * augmenting this interface:
 *
 * @example
 * declare module 'rx-agent' {
 *   interface AgentEventMap { 'audit-logged': { entry: string } }
 * }
 */
export interface AgentEventMap {
  'run-start': { sessionId?: string; resumed?: true };
  /** `messageId`: the id the model's answer in this iteration gets in the history (see `Message.id`). */
  'iteration-start': { iteration: number; messageId?: string };
  'text-delta': { iteration: number; text: string };
  'reasoning-delta': { iteration: number; text: string };
  'tool-call': { iteration: number; callId: string; name: string; args: unknown };
  /** A tool call's arguments begin to stream (the model named the tool); `tool-call` follows with the complete call. */
  'tool-input-start': { iteration: number; callId: string; name: string };
  /** A piece of a streaming tool call's arguments (raw JSON text, as the model sends it). */
  'tool-input-delta': { iteration: number; callId: string; name: string; argsDelta: string };
  /** A running tool's report (`ctx.progress(value)`), before its `tool-result`. */
  'tool-progress': { iteration: number; callId: string; value: unknown };
  /**
   * A call's outcome. `denied: true` (with the refusal's `reason`) when a person or a policy
   * refused the call (`ctx.block(result, { denied: reason })`, as `permissions()` does): it did not run.
   * `replayed: true` in a resumed run, when the outcome is the one its journal kept: the tool did not
   * run again (a result sent before the stop is not sent again; run observers see every one).
   */
  'tool-result': { iteration: number; callId: string; name: string; result: unknown; isError: boolean; denied?: true; reason?: string; replayed?: true };
  'iteration-end': { iteration: number; usage?: Usage };
  'permission-request': { requestId: string; callId: string; toolName: string; args: unknown; description?: string };
  'continuation-request': { requestId: string; iteration: number; limit: number };
  /** `messageId`: the id of the next attempt's answer (the failed attempt's partial answer is dropped). */
  'model-retry': { iteration: number; attempt: number; error: ErrorInfo; delayMs: number; messageId?: string };
  /** `middleware` and `hook`: with source `middleware`, the middleware that failed and its hook (`beforeIteration`, `wrapModel`…). */
  error: { error: ErrorInfo; source: 'model' | 'tool' | 'middleware' | 'run'; middleware?: string; hook?: string };
  'request-expired': { requestId: string; reason: 'timeout' | 'cancelled' };
  /**
   * `output`: the final answer parsed by the run's `output` schema (a completed run with structured output).
   * `clientCalls`: the model called client tools (`defineClientTool`): the run ended (reason
   * `completed`) without running them, and these are the calls the client must run; their results
   * are the next run's input (a `tool` message of `tool-result` parts with these `callId`s).
   */
  'run-end': {
    reason: RunEndReason;
    text: string;
    usage: Usage;
    terminationReason?: string;
    pendingRequests?: readonly PendingRequest[];
    output?: unknown;
    clientCalls?: readonly ClientCall[];
  };
  /**
   * With structured output (`createAgent({ output })`): the answer parsed so far as its JSON text
   * streams (open strings, objects and arrays included), sent when it changes. Not checked by the
   * schema yet: `run-end.output` is the answer that fitted.
   */
  'output-delta': { iteration: number; partial: unknown };
  /** A state defined with `shared: true` changed (`defineState`): its key and new value. */
  'state-changed': { key: string; value: unknown };

  // Built-in operators' events (rx-agent/operators).
  'circuit-breaker-triggered': { toolName: string; count: number; iteration: number };
  'error-threshold-exceeded': { consecutiveErrors: number; maxAllowed: number; lastError: string };
  'skill-activated': { skill: string };
  'cost-recorded': { inputTokens: number; outputTokens: number; cost: number; totalCost: number };
  'agent-run-started': { sessionId?: string; inputMessageCount: number };
  'agent-run-completed': {
    durationMs: number;
    iterations: number;
    functionCalls: number;
    success: boolean;
    terminationReason?: string;
  };
  /** `messageId`: the id of the fallback model's answer, as with `model-retry`. */
  'model-fallback': { from: number; to: number; error: ErrorInfo; messageId?: string };
  'tool-call-limit-exceeded': { toolName?: string; scope: 'thread' | 'run'; count: number; limit: number };
  'pii-detected': { piiType: string; strategy: 'redact' | 'mask' | 'hash' | 'block'; count: number };
  'context-edited': { cleared: number; tokensBefore: number; tokensAfter: number };
  summarized: { messagesBefore: number; messagesAfter: number };
  'summary-skipped': { reason: 'no-text' | 'content-filter' };
  'tool-selection': { selected: string[]; ignored: string[] };
  'todos-updated': { todos: TodoItem[] };
}

/** The type names of all events. */
export type AgentEventType = keyof AgentEventMap;

/** The event of a given type; for a union of types, the union of their events (so `type` narrows). */
export type EventOf<T extends AgentEventType> = T extends AgentEventType
  ? { readonly type: T; readonly runId: string; readonly seq?: number } & Readonly<AgentEventMap[T]>
  : never;

/**
 * Anything a run emits, discriminated by `type`. Every event has the run's `runId`.
 *
 * @example
 * events$.subscribe(e => { if (e.type === 'text-delta') process.stdout.write(e.text); });
 */
export type AgentEvent = { [T in AgentEventType]: EventOf<T> }[AgentEventType];

/** An event as a middleware emits it: the runtime adds `runId`. */
export type EmittedEvent = { [T in AgentEventType]: { readonly type: T } & Readonly<AgentEventMap[T]> }[AgentEventType];

/** A person's answer to a `permission-request`. */
export interface PermissionResponse {
  readonly type: 'permission-response';
  readonly requestId: string;
  readonly approved: boolean;
  readonly remember?: 'always' | 'never';
  readonly reason?: string;
}

/** A person's answer to a `continuation-request`. */
export interface ContinuationResponse {
  readonly type: 'continuation-response';
  readonly requestId: string;
  readonly approved: boolean;
  readonly extension?: number;
}

/**
 * Every response type and its fields (besides `type` and `requestId`), as {@link AgentEventMap}
 * is for events. A middleware that asks its own questions declares its answer here, so that
 * `handle.respond()` and `options.responses` check it and `type` narrows it:
 *
 * @example
 * declare module 'rx-agent' {
 *   interface AgentResponseMap { 'go-on-response': { approved: boolean } }
 * }
 */
export interface AgentResponseMap {
  'permission-response': Omit<PermissionResponse, 'type' | 'requestId'>;
  'continuation-response': Omit<ContinuationResponse, 'type' | 'requestId'>;
}

/** The type names of all responses. */
export type AgentResponseType = keyof AgentResponseMap;

/** The response of a given type; for a union of types, the union of their responses. */
export type ResponseOf<T extends AgentResponseType> = T extends AgentResponseType
  ? { readonly type: T; readonly requestId: string } & Readonly<AgentResponseMap[T]>
  : never;

/**
 * Any answer to a request event, discriminated by `type` (add your own through
 * {@link AgentResponseMap}).
 *
 * @example
 * handle.respond({ type: 'permission-response', requestId: q.requestId, approved: true });
 */
export type AgentResponse = { [T in AgentResponseType]: ResponseOf<T> }[AgentResponseType];

/** Turns an error into the plain `{ name, message, status? }` that events carry. */
export function toErrorInfo(error: unknown): ErrorInfo {
  if (error instanceof Error) {
    const status = (error as { status?: unknown }).status;
    return typeof status === 'number' ? { name: error.name, message: error.message, status } : { name: error.name, message: error.message };
  }
  return { name: 'Error', message: typeof error === 'string' ? error : safeString(error) };
}

function safeString(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
