import { EMPTY, noop, Observable, Subject, Subscriber, Subscription, expand, merge, of } from 'rxjs';
import { toErrorInfo, type AgentEvent, type AgentResponse } from '../events/types';
import { textOf, toMessages, type Message, type RunInput } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import { ErrorContext, TurnContext, type ErrorSource } from '../middleware/contexts';
import { LinkedSubscriber } from '../internal/linkedSubscriber';
import { ownField } from '../internal/ownField';
import { continueWith, phaseThen, type StepOwner } from '../middleware/runPhase';
import { HookFailure } from '../middleware/types';
import type { Session } from '../session/session';
import { addUsage, zeroUsage, type LoopState } from '../middleware/loopState';
import { StateBag } from '../state/stateBag';
import type { Usage } from '../model/types';
import { ModelFailure } from './callModel';
import type { CompiledAgent } from './compileAgent';
import { runIteration, terminateLoop } from './runIteration';
import { RunScopeImpl } from './runScopeImpl';
import { isPromiseLike } from '../internal/isPromiseLike';
import { unsubscribeQuietly } from '../internal/unsubscribeQuietly';
import { show } from '../internal/show';
import { uniqueId } from '../internal/uniqueId';
import { isSubscribable } from '../internal/isSubscribable';

/** Options of one run. */
export interface RunOptions {
  /** The conversation this turn belongs to: its history is read and the turn appended to it. */
  session?: Session;
  /** Answers to request events (permission, continuation…), e.g. a Subject bound to UI buttons. */
  responses?: Observable<AgentResponse>;
  /** Aborting it cancels the run (`run-end` reason `cancelled`). */
  signal?: AbortSignal;
  /** The run's id (default: generated). */
  runId?: string;
}

/** How a run ended, for `invoke`. */
export interface RunResult {
  readonly text: string;
  /** The messages this turn added (input included). */
  readonly messages: Message[];
  readonly usage: Usage;
  readonly reason: 'completed' | 'terminated' | 'max-iterations' | 'cancelled' | 'error';
  readonly terminationReason?: string;
}

/** @internal Hooks `start()` and `invoke()` use to reach into a run. */
export interface RunControl {
  onStart?(control: { cancel(): void; respond(response: AgentResponse): boolean }): void;
  onResult?(result: RunResult, error: unknown): void;
}

/**
 * A run as a cold Observable: every subscription is a new run. Always ends with exactly one
 * `run-end` and completes (errors are events, never Observable errors).
 */
export function runAgent(agent: CompiledAgent, input: RunInput, options: RunOptions = {}, control: RunControl = {}): Observable<AgentEvent> {
  return new Observable<AgentEvent>((subscriber) => {
    const run = new AgentRun(agent, input, options, control, subscriber);
    // Its teardown is held before it starts: a consumer that leaves during a synchronous step
    // (take(n) on a run whose model answers at once) stops it there.
    subscriber.add(run);
    run.start();
  });
}

/**
 * One run: the turn as a few continuations around the iteration loop
 * (`of(state).pipe(expand(iteration))`). Its fields are everything a suspended run holds.
 */
class AgentRun implements StepOwner {
  readonly subscription = new Subscription();
  private readonly scope: RunScopeImpl;
  private readonly session: Session | undefined;
  /** The session's id, read once while the run is set up (a getter that throws is a setup error). */
  private readonly sessionId: string | undefined;
  /** While onError hooks run: their subscription, and how to report the failure without them. */
  private onErrorHooks: Subscription | undefined;
  private reportFailure: (() => void) | undefined;
  /** The last state the turn reached: what a failed or cancelled run keeps. */
  private latest: LoopState | undefined;
  /** The state the turn starts from (before beforeMessageTurn): what onError hooks of a rejected turn read. */
  private initial: LoopState | undefined;
  private acquired = false;
  /** `end()` ran: the turn is being saved (or was), and `run-end` follows the save. */
  private ended = false;
  /** `run-end` was sent. */
  private finished = false;
  private failing = false;
  private onAbort: (() => void) | undefined;
  /** Bad run options or a failing id generator: reported once the run has started. */
  private readonly setupError: unknown;
  private readonly options: RunOptions;
  /** Follows the iteration loop; torn down with the run (not added to `subscription`: one array less per run). */
  private loopSink: LoopSink | undefined;

  constructor(
    private readonly agent: CompiledAgent,
    private readonly input: RunInput,
    options: RunOptions | null,
    private readonly control: RunControl,
    private readonly subscriber: Subscriber<AgentEvent>,
  ) {
    let runId: string;
    let session: Session | undefined;
    try {
      if (options === null || typeof options !== 'object') throw new TypeError(`run: options must be an object, got ${show(options)}`);
      const { responses } = options;
      if (responses !== undefined && !isSubscribable(responses)) {
        throw new TypeError(`run: 'responses' must be an Observable of responses (a Subject, say), got ${show(responses)}`);
      }
      runId = options.runId ?? agent.newId('run');
      if (typeof runId !== 'string' || runId === '') throw new TypeError(`run: a run id must be a non-empty string, got ${show(runId)}`);
      session = options.session;
      if (session !== undefined) {
        // Duck-typed: a Session of this package's other build (ESM beside CJS) is one too.
        if (session === null || typeof session.acquire !== 'function' || typeof session.commit !== 'function') {
          throw new TypeError("run: 'session' must be a Session made with createSession()");
        }
        this.sessionId = session.id;
      }
      this.options = options;
    } catch (error) {
      this.setupError = error;
      this.options = {};
      session = undefined;
      this.sessionId = undefined;
      runId = uniqueId('run');
    }
    options = this.options;
    this.session = session;
    let responses$: Observable<AgentResponse> = options.responses ?? EMPTY;
    if (control.onStart) {
      // Answers given with handle.respond() join those of options.responses.
      const answers = new Subject<AgentResponse>();
      responses$ = options.responses ? merge(options.responses, answers) : answers;
      control.onStart({ cancel: () => this.cancel(), respond: (r) => this.respond(answers, r) });
    }
    this.scope = new RunScopeImpl(agent, runId, this.sessionId, responses$, subscriber);
    this.scope.onReached = (loop) => this.reached(loop);
  }

  start(): void {
    const { scope, session, sessionId } = this;
    let observeError: unknown;
    try {
      for (const observe of this.agent.runObservers) scope.observe(observe(scope));
    } catch (error) {
      observeError = error;
    }
    scope.send(sessionId !== undefined ? { type: 'run-start', runId: scope.runId, sessionId } : { type: 'run-start', runId: scope.runId });
    if (this.ended) return; // the consumer left on run-start (firstValueFrom, take(1))
    if (this.setupError !== undefined) return this.fail(this.setupError);
    if (observeError !== undefined) return this.fail(observeError);
    try {
      const signal: unknown = this.options.signal;
      if (signal !== undefined) {
        if (signal === null || typeof (signal as AbortSignal).addEventListener !== 'function' || typeof (signal as AbortSignal).aborted !== 'boolean') {
          throw new TypeError("run: 'signal' must be an AbortSignal");
        }
        if ((signal as AbortSignal).aborted) return this.cancel();
        this.onAbort = () => this.cancel();
        (signal as AbortSignal).addEventListener('abort', this.onAbort, { once: true });
      }
      const input = toMessages(this.input);
      if (!session) return this.beforeTurn(initialLoop(this.agent, MessageLog.empty, StateBag.empty, input));
      session.acquire(scope.runId);
      this.acquired = true;
      const loaded = session.load().subscribe({
        next: ({ log, state }) => continueWith(this, (loop: LoopState) => this.beforeTurn(loop), initialLoop(this.agent, log, state, input)),
        error: (error) => this.fail(error),
      });
      if (!loaded.closed) this.subscription.add(loaded);
    } catch (error) {
      this.fail(error);
    }
  }

  /** The input joins the conversation only once beforeMessageTurn accepts it: a turn that a
   * middleware rejects there (e.g. PII blocked) leaves the session as it was. */
  private beforeTurn(loop: LoopState): void {
    this.initial = loop;
    phaseThen(TurnContext.create(this.scope, loop), this.agent.hooks.beforeMessageTurn, 'beforeMessageTurn', this, (turn) => {
      const start = turn.termination ? terminateLoop(turn.loop, turn.termination.reason) : turn.loop;
      this.latest = start;
      const loop$ = of(start).pipe(expand((state) => (state.done ? EMPTY : runIteration(this.scope, this.agent, state))));
      const sink = new LoopSink(this);
      this.loopSink = sink;
      loop$.subscribe(sink);
    });
  }

  /** @internal The loop reached `state` (an iteration ended). */
  reached(state: LoopState): void {
    this.latest = state;
  }

  /** @internal The loop is over: afterMessageTurn, then the end. */
  loopDone(): void {
    continueWith(this, (final: LoopState) => this.afterTurn(final), this.latest as LoopState);
  }

  private afterTurn(loop: LoopState): void {
    phaseThen(TurnContext.create(this.scope, loop, lastAssistant(loop.log, loop.turnStart)), this.agent.hooks.afterMessageTurn, 'afterMessageTurn', this, (ctx) => {
      const final = ctx.termination ? terminateLoop(ctx.loop, ctx.termination.reason) : ctx.loop;
      this.latest = final;
      this.end(final.endReason ?? 'completed', final);
    });
  }

  /** Reports a failure (after the onError hooks) and ends the run with reason `error`. */
  fail(failure: unknown): void {
    if (this.ended || this.failing) return;
    this.failing = true;
    const { error, source, middleware } = describeFailure(failure);
    const latest = this.latest;
    const seenLoop = latest ?? this.initial ?? emptyLoop(this.agent);
    const ctx = new ErrorContext(this.scope, seenLoop, error, source, latest?.iteration ?? 0, middleware, undefined, undefined);
    const report = (e: unknown, s: ErrorSource, m: string | undefined) => {
      // Once: a consumer that cancels in reaction to this error event must not have it sent again.
      this.reportFailure = undefined;
      this.sendError(e, s, m);
      this.end('error', this.latest, e);
    };
    this.stop(); // a teardown that throws as well: the failure being reported comes first
    // onError hooks run on their own: the run's steps are torn down; a failing hook is reported instead.
    // A cancel while they run tears them down and reports the error as it was.
    this.onErrorHooks = new Subscription();
    this.reportFailure = () => report(error, source, middleware);
    const onErrorOwner: StepOwner = {
      subscription: this.onErrorHooks,
      fail: (hookFailure) => {
        const d = describeFailure(hookFailure);
        report(d.error, d.source, d.middleware);
      },
    };
    phaseThen(ctx, this.agent.hooks.onError, 'onError', onErrorOwner, (seen) => {
      // What the hooks wrote (updateState: an error count, a note) is kept with the turn.
      if (latest) this.latest = seen.loop;
      report(seen.error, source, middleware);
    });
  }

  private cancel(): void {
    if (this.ended || this.scope.isCancelling()) return;
    this.scope.markCancelling();
    if (this.failing) {
      // During onError hooks only they are left to stop (a throw there is nobody's: the failure
      // being reported comes first); the failure is then reported as it was.
      if (this.onErrorHooks) unsubscribeQuietly(this.onErrorHooks);
      this.expireRequests();
      return this.reportFailure?.();
    }
    const teardownError = this.stop();
    this.expireRequests();
    if (teardownError !== undefined) {
      // A tool's or a hook's teardown threw while the run was being stopped: a failure like any other.
      this.sendError(teardownError, 'run');
      return this.end('error', this.latest, teardownError);
    }
    this.end('cancelled', this.latest);
  }

  /** A cancel expires every open request, saying so (reason `cancelled`). */
  private expireRequests(): void {
    for (const requestId of this.scope.requests.pending()) {
      this.scope.requests.settle(requestId);
      this.scope.send({ type: 'request-expired', runId: this.scope.runId, requestId, reason: 'cancelled' });
    }
  }

  private respond(answers: Subject<AgentResponse>, response: AgentResponse): boolean {
    // Own properties only, as the operators read the rest of an answer.
    const requestId = ownField(response, 'requestId');
    if (typeof requestId !== 'string' || !this.scope.requests.isOpen(requestId)) return false;
    answers.next(response);
    return !this.scope.requests.isOpen(requestId);
  }

  /** Saves what the turn reached, then emits `run-end` and completes. */
  private end(reason: RunResult['reason'], loop: LoopState | undefined, error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    if (this.onAbort) this.options.signal?.removeEventListener('abort', this.onAbort);
    const { session } = this;
    const saved = session && loop && this.acquired ? safeCommit(session, loop) : undefined;
    if (saved instanceof Promise) {
      saved.then(
        () => this.finish(reason, loop, error),
        (saveError: unknown) => this.finishAfterSaveError(saveError, loop),
      );
    } else if (saved) {
      this.finishAfterSaveError(saved.error, loop);
    } else {
      this.finish(reason, loop, error);
    }
  }

  private finishAfterSaveError(saveError: unknown, loop: LoopState | undefined): void {
    this.sendError(saveError, 'run');
    this.finish('error', loop, saveError);
  }

  /** The `error` event (`middleware` names the failing hook's middleware, when there is one). */
  private sendError(error: unknown, source: ErrorSource, middleware?: string): void {
    const runId = this.scope.runId;
    const info = toErrorInfo(error);
    this.scope.send(middleware === undefined ? { type: 'error', runId, error: info, source } : { type: 'error', runId, error: info, source, middleware });
  }

  private finish(reason: RunResult['reason'], loop: LoopState | undefined, error: unknown): void {
    this.finished = true;
    const runId = this.scope.runId;
    if (this.session && this.acquired) this.session.release(runId);
    const text = loop ? textOf(lastAssistant(loop.log, loop.turnStart)) : '';
    const usage = addUsage(addUsage(loop?.usage ?? zeroUsage, this.scope.pendingUsage), this.scope.reportedUsage);
    const terminationReason = reason === 'terminated' ? loop?.terminationReason : undefined;
    this.scope.send(
      terminationReason === undefined
        ? { type: 'run-end', runId, reason, text, usage }
        : { type: 'run-end', runId, reason, text, usage, terminationReason },
    );
    this.control.onResult?.({ text, messages: loop ? loop.log.since(loop.turnStart) : [], usage, reason, terminationReason }, error);
    this.subscriber.complete();
  }

  /**
   * Tears the run's steps down: the loop, and whatever hook or load is in flight. Returns what a
   * teardown threw (every one runs regardless).
   */
  private stop(): unknown {
    const loopError = this.loopSink && unsubscribeQuietly(this.loopSink);
    return unsubscribeQuietly(this.subscription) ?? loopError;
  }

  /**
   * Teardown (unsubscribe, or after completion). Left before its end, the run keeps in its session
   * what it completed, as a cancelled run does; nobody is listening for a failed save any more
   * (the session still holds the turn, and its next save carries it).
   */
  unsubscribe(): void {
    if (this.onAbort) this.options.signal?.removeEventListener('abort', this.onAbort);
    const stepsError = this.stop();
    const teardownError = (this.onErrorHooks && unsubscribeQuietly(this.onErrorHooks)) ?? stepsError;
    const { session } = this;
    if (!this.ended) {
      this.ended = true;
      if (session && this.acquired) {
        const saved = this.latest ? safeCommit(session, this.latest) : undefined;
        // Released at once: this object holds the turn, and another object's run waits for the save.
        if (saved instanceof Promise) saved.then(noop, noop);
        session.release(this.scope.runId);
      }
    } else if (!this.finished && session && this.acquired) {
      // Left while its final save is in flight: free at once too (the save goes on, and is waited for).
      session.release(this.scope.runId);
    }
    // The observers last: what the steps' teardown told them (a model call cut short) comes first.
    this.scope.close();
    // As rxjs does: every teardown ran, then the consumer's unsubscribe() hears what one threw.
    // eslint-disable-next-line @typescript-eslint/only-throw-error -- what a teardown threw, passed on as it is
    if (teardownError !== undefined) throw teardownError;
  }
}

/** Follows the iteration loop for its run (a Subscriber of its own: no observer wrapper kept alive). */
class LoopSink extends LinkedSubscriber<LoopState> {
  constructor(private readonly run: AgentRun) {
    super();
  }

  /** Nothing to do: the run learns each iteration's state from `scope.onReached`, before `iteration-end`. */
  override next(): void {}

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.isStopped = true;
    unsubscribeQuietly(this);
    this.run.fail(error);
  }

  override complete(): void {
    if (this.isStopped) return;
    this.isStopped = true;
    const teardownError = unsubscribeQuietly(this);
    if (teardownError === undefined) this.run.loopDone();
    else this.run.fail(teardownError);
  }
}

function initialLoop(agent: CompiledAgent, history: MessageLog, state: StateBag, input: Message[]): LoopState {
  return {
    iteration: 0,
    log: history.append(...input),
    turnStart: history.length,
    instructions: agent.instructions,
    tools: agent.tools,
    toolChoice: agent.toolChoice,
    settings: agent.settings,
    // The run's own copy: a stored value it migrates on reading reaches the session only with the turn.
    state: state.fork(),
    usage: zeroUsage,
    functionCalls: 0,
    done: false,
    endReason: undefined,
    terminationReason: undefined,
  };
}

function emptyLoop(agent: CompiledAgent): LoopState {
  return initialLoop(agent, MessageLog.empty, StateBag.empty, []);
}

/** The turn's last assistant message (from `turnStart` on: an earlier turn's answer is not this one's). */
function lastAssistant(log: MessageLog, turnStart: number): Message | undefined {
  for (let i = log.length - 1; i >= turnStart; i--) {
    const m = log.at(i);
    if (m?.role === 'assistant') return m;
  }
  return undefined;
}

function safeCommit(session: Session, loop: LoopState): Promise<void> | { error: unknown } | undefined {
  try {
    const saved: unknown = session.commit(loop.log, loop.state);
    return isPromiseLike<void>(saved) ? Promise.resolve(saved) : undefined;
  } catch (error) {
    return { error };
  }
}

function describeFailure(failure: unknown): { error: unknown; source: ErrorSource; middleware?: string } {
  if (failure instanceof HookFailure) return { error: failure.error, source: 'middleware', middleware: failure.middleware };
  if (failure instanceof ModelFailure) return { error: failure.error, source: 'model' };
  return { error: failure, source: 'run' };
}

