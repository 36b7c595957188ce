import { Observable, Subscription, type Subscriber } from 'rxjs';
import { messageId, textMessage, textOf } from '../messages/message';
import { checkOutput, outputRetryText, type CompiledOutput } from './compileOutput';
import { OutputValidationError } from './outputValidationError';
import { ModelFailure } from './callModel';
import { IterationContext } from '../middleware/contexts';
import { phaseThen, type StepOwner } from '../middleware/runPhase';
import { addUsage, loopWith, zeroUsage, type LoopState } from '../middleware/loopState';
import { callModel } from './callModel';
import type { CompiledAgent } from './compileAgent';
import { runTools } from './runTools';
import { unansweredCalls } from './clientCalls';
import type { RunScopeImpl } from './runScopeImpl';

/**
 * One iteration as a cold Observable of the next loop state (`done` when the turn is over):
 * beforeIteration, the model call (wrapped), the tools, afterIteration. The steps are plain
 * continuations, so an iteration costs a handful of objects, not a pipeline of operators; a
 * phase without hooks costs nothing. Unsubscribing tears down whatever step is in flight.
 */
export function runIteration(scope: RunScopeImpl, agent: CompiledAgent, state: LoopState): Observable<LoopState> {
  return new IterationSource(scope, agent, state);
}

/** The Observable of {@link runIteration}: a class, as it is made on every iteration. */
class IterationSource extends Observable<LoopState> {
  constructor(
    private readonly scope: RunScopeImpl,
    private readonly agent: CompiledAgent,
    private readonly state: LoopState,
  ) {
    super();
  }

  /** @internal rxjs 7's subscribe calls `_subscribe`. */
  protected _subscribe(subscriber: Subscriber<LoopState>): void {
    const iteration = new IterationRun(this.scope, this.agent, this.state, subscriber);
    // Held before it starts, so that a run cancelled during a synchronous first step closes it.
    subscriber.add(iteration);
    // A synchronous previous iteration is still on the stack: start once it has returned.
    this.scope.trampoline(iteration);
  }
}

/** One subscription to an iteration: the Subscription that tears down its step in flight. */
class IterationRun extends Subscription implements StepOwner {
  constructor(
    private readonly scope: RunScopeImpl,
    private readonly agent: CompiledAgent,
    private readonly state: LoopState,
    private readonly subscriber: Subscriber<LoopState>,
  ) {
    super();
  }

  get subscription(): Subscription {
    return this;
  }

  start(): void {
    if (this.closed) return;
    const durable = this.scope.durable;
    // The id the model's answer will have in the history, told up front so that a stream can name
    // the answer from its first delta (a resumed iteration's journaled answer keeps its own).
    const answerId = durable?.replayedAnswer(this.state.iteration)?.message.id ?? messageId();
    this.scope.send({ type: 'iteration-start', runId: this.scope.runId, iteration: this.state.iteration, messageId: answerId });
    const ctx = new IterationContext(this.scope, this.state);
    phaseThen(ctx, this.agent.hooks.beforeIteration, 'beforeIteration', this, (ready) => {
      if (ready.termination || ready.response) return this.afterModel(ready);
      if (!durable) return callModel(this, this.scope, this.agent, ready, answerId, (answered) => this.afterModel(answered));
      // A resumed iteration whose model answer is journaled does not call the model again.
      const replayed = durable.replayedAnswer(ready.iteration);
      if (replayed) {
        this.scope.pendingUsage = replayed.usage;
        return this.afterModel(ready.answered(replayed.message, replayed.usage));
      }
      // Its process stopped mid-stream: what that attempt streamed is discarded, as after a failed attempt.
      const discarded = durable.discardedStream(ready.iteration);
      if (discarded) this.scope.send({ ...discarded, messageId: answerId });
      callModel(this, this.scope, this.agent, ready, answerId, (answered) => {
        durable.modelAnswered(answered.iteration, answered.response, answered.usage);
        this.afterModel(answered);
      });
    });
  }

  fail(error: unknown): void {
    this.subscriber.error(error);
  }

  private afterModel(ctx: IterationContext): void {
    if (ctx.termination) this.afterTools(ctx);
    else runTools(this, this.scope, this.agent, ctx, (done) => this.afterTools(done));
  }

  private afterTools(answered: IterationContext): void {
    let ctx = withReportedUsage(this.scope, answered);
    // The model's answer ended the turn (no tool calls, or skipped tools with a response).
    let completed = ctx.final && ctx.termination === undefined;
    const output = this.scope.output;
    // A turn that ends on client calls has no final answer yet: the output is judged once it has.
    if (completed && output && !leftToClient(ctx)) {
      const judged = judgeOutput(this.scope, this.agent, output, ctx);
      if (judged instanceof OutputValidationError) return this.fail(new ModelFailure(judged));
      ctx = judged;
      completed = ctx.final;
    }
    // afterIteration sees whether this iteration ends the turn: `final` is already set by the model's
    // answer or a termination, not yet at the maxIterations limit.
    const seen = !ctx.final && ctx.iteration + 1 >= this.agent.maxIterations ? ctx.record({ final: true }) : ctx;
    phaseThen(seen, this.agent.hooks.afterIteration, 'afterIteration', this, (done) => {
      const next = endIteration(this.scope, this.agent, done, completed);
      const subscriber = this.subscriber;
      // Closed first, so that it leaves the finalizer array of the subscriber `expand` made for
      // it before that subscriber completes and drops the array (see LinkedSubscriber for why).
      this.unsubscribe();
      subscriber.next(next);
      subscriber.complete();
    });
  }
}

/**
 * Structured output: judges the turn's final answer. One that fits is kept for `run-end`; one that
 * does not goes back to the model (a user message saying what is wrong: the turn goes on) while
 * retries and iterations are left, else the run fails with an {@link OutputValidationError}.
 */
function judgeOutput(scope: RunScopeImpl, agent: CompiledAgent, output: CompiledOutput, ctx: IterationContext): IterationContext | OutputValidationError {
  const text = textOf(lastAssistant(ctx));
  const verdict = checkOutput(output, text);
  const attempts = ++scope.outputAttempts;
  if (verdict.ok) {
    scope.outputValue = verdict.value;
    return ctx;
  }
  if (attempts <= output.retries && ctx.iteration + 1 < agent.maxIterations) {
    const log = ctx.loop.log.append(textMessage('user', outputRetryText(verdict.problem)));
    return ctx.record({ loop: loopWith(ctx.loop, { log }), final: false });
  }
  return new OutputValidationError(verdict.problem, verdict.issues, text, attempts);
}

/** The turn's last message when it is the assistant's (the final answer), else undefined. */
function lastAssistant(ctx: IterationContext) {
  const log = ctx.loop.log;
  const last = log.at(log.length - 1);
  return last?.role === 'assistant' ? last : undefined;
}

/** Whether the iteration's answer has calls the client runs (they have no result). */
function leftToClient(ctx: IterationContext): boolean {
  return ctx.toolCalls.length > 0 && unansweredCalls(ctx.loop.log, ctx.loop.turnStart).length > 0;
}

/** The iteration's usage with what middleware reported since the last iteration (from now on in `pendingUsage`). */
function withReportedUsage(scope: RunScopeImpl, ctx: IterationContext): IterationContext {
  const reported = scope.reportedUsage;
  if (reported === undefined) return ctx;
  scope.reportedUsage = undefined;
  const usage = addUsage(ctx.usage ?? zeroUsage, reported);
  scope.pendingUsage = usage;
  return ctx.record({ usage });
}

function endIteration(scope: RunScopeImpl, agent: CompiledAgent, ctx: IterationContext, completed: boolean): LoopState {
  const iteration = ctx.iteration;
  let loop = loopWith(ctx.loop, { iteration: iteration + 1, usage: addUsage(ctx.loop.usage, ctx.usage) });
  if (ctx.termination) {
    loop = terminateLoop(loop, ctx.termination.reason);
  } else if (completed) {
    loop = loopWith(loop, { done: true, endReason: 'completed' });
  } else if (iteration + 1 >= agent.maxIterations) {
    loop = loopWith(loop, { done: true, endReason: 'max-iterations' });
  }
  scope.pendingUsage = undefined; // in `loop` from now on
  scope.onReached?.(loop);
  scope.send(ctx.usage ? { type: 'iteration-end', runId: scope.runId, iteration, usage: ctx.usage } : { type: 'iteration-end', runId: scope.runId, iteration });
  return loop;
}

/** Ends the loop with `reason` as the final assistant message. */
export function terminateLoop(loop: LoopState, reason: string): LoopState {
  return loopWith(loop, { log: loop.log.append(textMessage('assistant', reason)), done: true, endReason: 'terminated', terminationReason: reason });
}
