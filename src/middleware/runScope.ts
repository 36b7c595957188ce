import type { Observable, SchedulerLike } from 'rxjs';
import type { AgentResponse, EmittedEvent } from '../events/types';
import type { RequestRegistry } from '../events/requestRegistry';
import type { ToolSpec } from '../model/types';
import type { Tool } from '../tools/defineTool';

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
}
