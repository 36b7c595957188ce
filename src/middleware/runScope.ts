import type { Observable, SchedulerLike } from 'rxjs';
import type { AgentResponse, EmittedEvent } from '../events/types';
import type { RequestRegistry } from '../events/requestRegistry';
import type { ToolSpec } from '../model/types';
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
  readonly requests: RequestRegistry;
  newId(prefix: string): string;
  /** The specs of `tools`, as the model sees them (remembered for the last list asked about). */
  toolSpecs(tools: readonly Tool[]): readonly ToolSpec[];
  /** @internal Set for a journaled run. */
  readonly journal?: RequestJournal;
}
