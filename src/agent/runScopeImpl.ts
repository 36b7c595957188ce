import type { Observable, SchedulerLike, Subscriber } from 'rxjs';
import type { AgentEvent, AgentResponse, EmittedEvent } from '../events/types';
import { RequestRegistry } from '../events/requestRegistry';
import type { ToolSpec } from '../model/types';
import type { Tool } from '../tools/defineTool';
import type { RunScope } from '../middleware/runScope';

/** The run's services, bound to its subscriber. */
export class RunScopeImpl implements RunScope {
  readonly requests = new RequestRegistry();
  private cancelling = false;
  private queue: Array<{ start(): void }> | undefined;
  private specsOf: readonly Tool[];
  private specs: readonly ToolSpec[];

  constructor(
    readonly runId: string,
    readonly sessionId: string | undefined,
    readonly scheduler: SchedulerLike,
    readonly responses$: Observable<AgentResponse>,
    /** @internal The run's subscriber (the model stream's sink sends text deltas to it directly). */
    readonly subscriber: Subscriber<AgentEvent>,
    readonly newId: (prefix: string) => string,
    readonly maxIterations: number,
    /** The agent's tools and their specs (the tools of every iteration that does not change them). */
    agentTools: { readonly tools: readonly Tool[]; readonly toolSpecs: readonly ToolSpec[] },
  ) {
    this.specsOf = agentTools.tools;
    this.specs = agentTools.toolSpecs;
  }

  emit(event: EmittedEvent): void {
    // Object.assign, then the new key: on V8 a spread literal with an added key (`{ ...event, runId }`)
    // is about ten times slower.
    const out = Object.assign({}, event) as Record<string, unknown>;
    out.runId = this.runId;
    this.subscriber.next(out as AgentEvent);
  }

  /** Sends an event that already carries the run's id (the runtime's own, hot path). */
  send(event: AgentEvent): void {
    this.subscriber.next(event);
  }

  /**
   * Starts `work` now, or, when called from inside work this method is already running, right
   * after it: synchronous iterations follow one another without growing the stack.
   */
  trampoline(work: { start(): void }): void {
    if (this.queue) {
      this.queue.push(work);
      return;
    }
    const queue: Array<{ start(): void }> = (this.queue = [work]);
    try {
      for (let i = 0; i < queue.length; i++) queue[i].start();
    } finally {
      this.queue = undefined;
    }
  }

  toolSpecs(tools: readonly Tool[]): readonly ToolSpec[] {
    if (tools !== this.specsOf) {
      this.specsOf = tools;
      this.specs = tools.map((tool) => tool.spec);
    }
    return this.specs;
  }

  isCancelling(): boolean {
    return this.cancelling;
  }

  markCancelling(): void {
    this.cancelling = true;
  }
}
