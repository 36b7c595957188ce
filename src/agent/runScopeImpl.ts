import type { Observable, SchedulerLike, Subscriber } from 'rxjs';
import type { AgentEvent, AgentResponse, EmittedEvent } from '../events/types';
import { RequestRegistry } from '../events/requestRegistry';
import type { RunScope } from '../middleware/runScope';

/** The run's services, bound to its subscriber. */
export class RunScopeImpl implements RunScope {
  readonly requests = new RequestRegistry();
  private cancelling = false;

  constructor(
    readonly runId: string,
    readonly sessionId: string | undefined,
    readonly scheduler: SchedulerLike,
    readonly responses$: Observable<AgentResponse>,
    private readonly subscriber: Subscriber<AgentEvent>,
    readonly newId: (prefix: string) => string,
    readonly maxIterations: number,
  ) {}

  emit(event: EmittedEvent): void {
    this.subscriber.next({ ...event, runId: this.runId } as AgentEvent);
  }

  /** Sends an event that already carries the run's id (the runtime's own, hot path). */
  send(event: AgentEvent): void {
    this.subscriber.next(event);
  }

  isCancelling(): boolean {
    return this.cancelling;
  }

  markCancelling(): void {
    this.cancelling = true;
  }
}
