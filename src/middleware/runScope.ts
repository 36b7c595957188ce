import type { Observable, SchedulerLike } from 'rxjs';
import type { AgentEvent, AgentResponse, EmittedEvent } from '../events/types';
import type { RequestRegistry } from '../events/requestRegistry';
import type { OutputFormat, ToolSpec, Usage } from '../model/types';
import type { Tool } from '../tools/defineTool';

/**
 * @internal What a journaled run adds to requests: ids that stay the same when the run is resumed,
 * absolute deadlines, answers kept, and suspension.
 */
export interface RequestJournal {
  /** The id of a request asked without one: the same when a resumed run asks it again. */
  requestId(where: number | 'turn' | 'end', callId: string | undefined, type: string): string;
  /**
   * The request is being asked: journals it with its deadline (now + `timeout`) the first time,
   * and answers the time left to that deadline (0 when it has passed; undefined: no limit).
   */
  opened(requestId: string, type: string, timeout: number | undefined): number | undefined;
  /** The run took `response` for the request. */
  answered(requestId: string, response: AgentResponse): void;
  /** The request's event is out and it waits: a run that suspends on requests does so now. */
  waiting(requestId: string): void;
  /** Nobody waits for the request any more (its `request-expired` is out): stored now, so that no process takes an answer to it. */
  expired(requestId: string): void;
}

/** The services of one run that every context reaches: ids, the event sink, responses. */
export interface RunScope {
  readonly runId: string;
  /** The agent's `name`. */
  readonly agentName: string;
  readonly sessionId: string | undefined;
  readonly scheduler: SchedulerLike;
  /** The agent's `maxIterations`: the most iterations a turn runs (one that `skipModelCall` answered counts too). */
  readonly maxIterations: number;
  /** Sends an event to the run's subscriber, adding `runId`. */
  emit(event: EmittedEvent): void;
  /** Every response that reaches the run (options.responses and handle.respond). */
  readonly responses$: Observable<AgentResponse>;
  /** True from the moment the run is cancelled. */
  isCancelling(): boolean;
  /** True from the moment the run's steps are torn down: its end, a failure, a suspension, a cancel, its consumer leaving. */
  isStopping(): boolean;
  readonly requests: RequestRegistry;
  newId(prefix: string): string;
  /** The specs of `tools`, as the model sees them (remembered for the last list asked about). */
  toolSpecs(tools: readonly Tool[]): readonly ToolSpec[];
  /** @internal Set for a journaled run. */
  readonly journal?: RequestJournal;
  /** @internal Set when the run asks for structured output: what every model request carries. */
  readonly output?: { readonly format: OutputFormat };
  /** Counts the usage of a model call a middleware made itself (see `AgentContext.reportUsage`). */
  reportUsage(usage: Usage, options?: { model?: string; provider?: string }): void;
  /** @internal Follows the run from now on (see {@link RunObserver}). */
  observe(observer: RunObserver): void;
  /** @internal A request was answered with `response`; `callId`: the call it is about, if any (told to the observers). */
  responded(response: AgentResponse, callId: string | undefined): void;
  /**
   * @internal Set when the run is a resumed one: the `context` its observers asked the journal to
   * keep when it started (undefined when none did).
   */
  readonly resumed?: { readonly context: Readonly<Record<string, string>> | undefined };
  /** @internal Set when `agent.asTool()` started the run: the parent run's scope and the call's id. */
  readonly parentCall?: ParentCall;
}

/**
 * @internal What a run tells an observer (telemetry): every event it sends except the text and
 * reasoning deltas (those stay on the hot path), before its consumer sees it; each answer to one
 * of its requests; each usage a middleware reported; and its teardown, whether it ended or its
 * consumer left. An observer must not throw. A journaled run asks its observers, before it
 * writes its start record, for the context to keep there (`journalContext`: telemetry's trace
 * context); a resumed run finds it in `RunScope.resumed`.
 */
export interface RunObserver {
  /** String entries to keep in the journal's start record (a W3C `traceparent`, say). */
  journalContext?(): Readonly<Record<string, string>> | undefined;
  event(event: AgentEvent): void;
  /** An answer, with the call its request is about (if any): known also when a resumed run found the answer without asking again. */
  response(response: AgentResponse, callId: string | undefined): void;
  usage(usage: Usage, model: string | undefined, provider?: string): void;
  closed(): void;
}

/** @internal The call a sub-agent's run serves (`agent.asTool()`): its parent run's scope and the call's id. */
export interface ParentCall {
  readonly scope: RunScope;
  readonly callId: string;
}
