import type { LoopState } from '../middleware/loopState';
import type { Observable, SchedulerLike, Subscriber } from 'rxjs';
import type { AgentEvent, AgentResponse, EmittedEvent } from '../events/types';
import { RequestRegistry } from '../events/requestRegistry';
import type { ToolSpec, Usage } from '../model/types';
import type { Tool } from '../tools/defineTool';
import type { ParentCall, RunObserver, RunScope } from '../middleware/runScope';
import { addUsage, zeroUsage } from '../middleware/loopState';
import { PlainUsage } from '../model/usage';
import { show } from '../internal/show';
import type { CompiledAgent } from './compileAgent';
import type { DurableRun } from './durableRun';
import type { CompiledOutput } from './compileOutput';

/** The run's services, bound to its subscriber. */
export class RunScopeImpl implements RunScope {
  readonly requests = new RequestRegistry();
  private cancelling = false;
  private stopping = false;
  private queue: Array<{ start(): void }> | undefined;
  private specsOf: readonly Tool[];
  private specs: readonly ToolSpec[];
  readonly scheduler: SchedulerLike;
  readonly newId: (prefix: string) => string;
  readonly maxIterations: number;
  readonly agentName: string;

  constructor(
    agent: CompiledAgent,
    readonly runId: string,
    readonly sessionId: string | undefined,
    readonly responses$: Observable<AgentResponse>,
    /** @internal The run's subscriber (the model stream's sink sends text deltas to it directly). */
    readonly subscriber: Subscriber<AgentEvent>,
  ) {
    this.scheduler = agent.scheduler;
    this.newId = agent.newId;
    this.maxIterations = agent.maxIterations;
    this.agentName = agent.name;
    // The agent's own tools are those of every iteration that does not change them.
    this.specsOf = agent.tools;
    this.specs = agent.toolSpecs;
  }

  /** @internal The usage of a model call whose iteration has not ended yet (run-end counts it, whatever happens next). */
  pendingUsage: Usage | undefined = undefined;

  /** @internal Usage middleware reported (`reportUsage`) that no iteration's usage holds yet. */
  reportedUsage: Usage | undefined = undefined;

  /** @internal Who follows the run (telemetry); none in the common case. */
  private observers: RunObserver[] | undefined = undefined;

  /** The answer `start()`'s `respond()` is handing out, and whether a waiting request took it. */
  private offered: AgentResponse | undefined = undefined;
  private taken = false;

  /** @internal The run's structured output (undefined without one: nothing checked, nothing paid). */
  output: CompiledOutput | undefined = undefined;

  /** @internal Answers judged against `output` so far, and the value of the one that fitted. */
  outputAttempts = 0;
  outputValue: unknown = undefined;

  /** @internal The journal side of a journaled run (undefined otherwise: nothing journaled, nothing paid). */
  durable: DurableRun | undefined = undefined;

  /** @internal The same object, as the requests of the middleware layer see it. */
  get journal(): DurableRun | undefined {
    return this.durable;
  }

  /** @internal Told of each iteration's end state before its `iteration-end` event (a cancel on that event keeps it). */
  onReached: ((loop: LoopState) => void) | undefined = undefined;

  emit(event: EmittedEvent): void {
    const type = (event as { type?: unknown } | null)?.type;
    if (type === 'run-start' || type === 'run-end') {
      // The runtime's own: a second run-end would break "exactly one run-end, last".
      throw new TypeError(`emit: '${type}' is sent by the runtime only`);
    }
    // Object.assign, then the new key: on V8 a spread literal with an added key (`{ ...event, runId }`)
    // is about ten times slower.
    const out = Object.assign({}, event) as Record<string, unknown>;
    out.runId = this.runId;
    if (this.observers) this.tell(out as AgentEvent);
    this.subscriber.next(out as AgentEvent);
  }

  /** Sends an event that already carries the run's id (the runtime's own, hot path). */
  send(event: AgentEvent): void {
    if (this.observers) this.tell(event);
    this.subscriber.next(event);
  }

  reportUsage(usage: Usage, options?: { model?: string; provider?: string }): void {
    const inputTokens = (usage as Usage | null)?.inputTokens;
    const outputTokens = (usage as Usage | null)?.outputTokens;
    if (!isCount(inputTokens) || !isCount(outputTokens)) {
      throw new TypeError(`reportUsage: usage must be { inputTokens, outputTokens }, each a non-negative integer, got ${show(usage)}`);
    }
    const model = options?.model;
    if (model !== undefined && typeof model !== 'string') throw new TypeError(`reportUsage: 'model' must be a string, got ${show(model)}`);
    const provider = options?.provider;
    if (provider !== undefined && typeof provider !== 'string') throw new TypeError(`reportUsage: 'provider' must be a string, got ${show(provider)}`);
    const counted = new PlainUsage(inputTokens, outputTokens);
    this.reportedUsage = addUsage(this.reportedUsage ?? zeroUsage, counted);
    if (this.observers) for (const observer of this.observers) observer.usage(counted, model, provider);
  }

  /** @internal */
  observe(observer: RunObserver): void {
    (this.observers ??= []).push(observer);
  }

  /** @internal */
  resumed: { readonly context: Readonly<Record<string, string>> | undefined } | undefined = undefined;

  /** @internal */
  parentCall: ParentCall | undefined = undefined;

  /** @internal What the observers ask the start record to keep (undefined: nothing). */
  journalContext(): Record<string, string> | undefined {
    let kept: Record<string, string> | undefined;
    if (this.observers) {
      for (const observer of this.observers) {
        const context = observer.journalContext?.();
        if (context) kept = Object.assign(kept ?? {}, context);
      }
    }
    return kept;
  }

  /** @internal */
  responded(response: AgentResponse, callId: string | undefined): void {
    if (response === this.offered) this.taken = true;
    if (this.observers) for (const observer of this.observers) observer.response(response, callId);
  }

  /**
   * @internal Whether a waiting request took `response` while `deliver` handed it out. Asked, not
   * inferred from the request being closed after: the run may go on at once and ask the same id again.
   */
  took(response: AgentResponse, deliver: () => void): boolean {
    const { offered, taken } = this;
    this.offered = response;
    this.taken = false;
    try {
      deliver();
      return this.taken;
    } finally {
      this.offered = offered;
      this.taken = taken;
    }
  }

  /** @internal Tells the observers of an event (before the consumer sees it). */
  tell(event: AgentEvent): void {
    for (const observer of this.observers as RunObserver[]) observer.event(event);
  }

  /** @internal The run is torn down: the observers are told, once. */
  close(): void {
    const observers = this.observers;
    this.observers = undefined;
    if (observers) for (const observer of observers) observer.closed();
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

  isStopping(): boolean {
    return this.stopping;
  }

  markStopping(): void {
    this.stopping = true;
  }

  markCancelling(): void {
    this.cancelling = true;
  }
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}
