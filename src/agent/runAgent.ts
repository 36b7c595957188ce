import { EMPTY, NEVER, catchError, defer, from, noop, Observable, Subscriber, Subscription, expand, merge, of } from 'rxjs';
import { Answers } from './answers';
import { toErrorInfo, type AgentEvent, type AgentResponse, type ClientCall, type PendingRequest, type RunEndReason } from '../events/types';
import type { Tool } from '../tools/defineTool';
import { checkToolResults } from '../messages/checkToolResults';
import { checkRunTools, clientToolSpecs, NO_RUN_TOOLS, rebuildClientTools } from './perRunTools';
import { closeOpenCalls, unansweredCalls } from './clientCalls';
import { textOf, toMessages, type Message, type RunInput } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import { ErrorContext, TurnContext, type ErrorSource } from '../middleware/contexts';
import { LinkedSubscriber } from '../internal/linkedSubscriber';
import { ownField } from '../internal/ownField';
import { continueWith, phaseThen, type StepOwner } from '../middleware/runPhase';
import { HookFailure } from '../middleware/types';
import { createSession, type Session, type SessionClaim } from '../session/session';
import { JournalConflictError, RunFinishedError, RunNotFoundError } from '../journal/errors';
import { isStoreOutage } from '../session/errors';
import type { JournalEntry, JournalRecord } from '../journal/records';
import { settle } from '../internal/settle';
import type { ResumePoint } from '../journal/resumePoint';
import type { AgentStore, RunReceived } from '../journal/store';
import { PlainUsage } from '../model/usage';
import { DurableRun } from './durableRun';
import { addUsage, zeroUsage, type LoopState } from '../middleware/loopState';
import { StateBag } from '../state/stateBag';
import { startingState } from '../state/startingState';
import type { Usage } from '../model/types';
import { ModelFailure } from './callModel';
import type { CompiledAgent } from './compileAgent';
import { runIteration, terminateLoop } from './runIteration';
import { checkSessionWait } from '../session/claimSession';
import { RunScopeImpl } from './runScopeImpl';
import { parentCallOf } from './parentCall';
import { isPromiseLike } from '../internal/isPromiseLike';
import { unsubscribeQuietly } from '../internal/unsubscribeQuietly';
import { show } from '../internal/show';
import { checkOptionsObject } from '../internal/optionNames';
import { uniqueId } from '../internal/uniqueId';
import { isSubscribable } from '../internal/isSubscribable';
import type { z } from 'zod';
import { checkOutput, compileOutput, type CompiledOutput } from './compileOutput';

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
  /**
   * With a store (`createAgent({ store })`): the id of the session in the store this turn reads and
   * appends to, from any process (instead of a `session` object).
   */
  sessionId?: string;
  /** With a store: what the run does when a middleware waits for an answer (default: the agent's `onRequest`). */
  onRequest?: 'wait' | 'suspend';
  /** Structured output for this run: a `z.object()` schema, instead of the agent's `output`. */
  output?: z.ZodType;
  /** Retries after an answer that does not fit the output schema (default: the agent's `outputRetries`). */
  outputRetries?: number;
  /** How long this run waits for another run to free its session, in ms (default: the agent's `sessionWaitMs`). */
  sessionWaitMs?: number;
  /**
   * Starting values of shared state (the state a UI shares: defined with `shared: true` and listed
   * in a middleware's `state`), by key. Each is parsed by its definition's schema (its defaults and
   * transforms apply) and replaces the definition's `initial()`, or for session-scoped state the
   * session's value, from the run's start; it is then kept as any change is (a session-scoped value
   * is saved with the turn). A key no middleware of the agent shares, a value its schema refuses,
   * or a `state` that is not an object ends the run with an `error` event naming it and `run-end`
   * reason `error`.
   *
   * @example
   * agent.run('What is in my cart?', { state: { 'shop.cart': { items: 2 } } });
   */
  state?: Record<string, unknown>;
  /**
   * Tools for this run only, offered besides the agent's: typically client tools
   * (`defineClientTool`) a UI sends with its request. A tool named as one of the agent's (or its
   * middleware's), a list that is not one of tools, or, for a journaled run (an agent with a
   * store), a tool that is not a client tool ends the run with an `error` event naming it and
   * `run-end` reason `error`: a resume in another process rebuilds client tools from the journal,
   * but could not find a server tool's `execute`.
   *
   * @example
   * agent.run('Pick a color for the banner', { tools: [defineClientTool({ name: 'pick_color', description: 'Asks the user', parameters: z.object({}) })] });
   */
  tools?: readonly Tool[];
}

/**
 * How a run ended, for `invoke`. `O` is the type of the structured output (`z.output` of the
 * `output` schema): `output` is set when a run with one completed.
 */
export interface RunResult<O = unknown> {
  readonly text: string;
  /** The final answer parsed by the `output` schema (a completed run with structured output). */
  readonly output?: O;
  /** The messages this turn added (input included). */
  readonly messages: Message[];
  readonly usage: Usage;
  readonly reason: RunEndReason;
  readonly terminationReason?: string;
  /** With reason `suspended`: the requests it waits for. */
  readonly pendingRequests?: readonly PendingRequest[];
  /** The calls of client tools the client must run, as `run-end.clientCalls` lists them. */
  readonly clientCalls?: readonly ClientCall[];
}

/** @internal Hooks `start()` and `invoke()` use to reach into a run. */
export interface RunControl {
  onStart?(control: StartedControl): void;
  onResult?(result: RunResult, error: unknown): void;
  /** Resumes the journaled run this journal describes (instead of starting a turn from `input`). */
  resume?: ResumePoint;
}

/** @internal What `start()`'s handle reaches the run by (the run itself: no closures of its own). */
export interface StartedControl {
  cancel(): void;
  respond(response: AgentResponse): boolean;
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
class AgentRun implements StepOwner, StartedControl {
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
  /** Bad run options or a failing id generator (or a journal that refused the run): reported once the run has started. */
  private setupError: unknown;
  /** What a run observer's factory threw: reported once the run has started. */
  private observeError: unknown;
  /** The journal side of a journaled run (a store on the agent). */
  private readonly durable: DurableRun | undefined;
  private readonly resume: ResumePoint | undefined;
  /** The history the turn started from (a journaled run's first checkpoint journals what follows it). */
  private history: MessageLog = MessageLog.empty;
  private pendingRequests: PendingRequest[] | undefined;
  private readonly subscriber: Subscriber<AgentEvent>;
  private readonly options: RunOptions;
  /** Follows the iteration loop; torn down with the run (not added to `subscription`: one array less per run). */
  private loopSink: LoopSink | undefined;
  /** A resume's answers and cancel flag, as the store held them once the lease was taken. */
  private received: RunReceived | undefined;
  /** Answers given with `start()`'s `respond()` (a started run only). */
  private answers: Answers | undefined;
  /** The starting values of shared state (the `state` option, or as a resumed run's journal holds them), over the session's. */
  private startState: StateBag | undefined;
  /** The agent's tools and the run's own. */
  private tools(): readonly Tool[] {
    return this.runTools.length > 0 ? [...this.agent.tools, ...this.runTools] : this.agent.tools;
  }

  /** The run's own tools (`RunOptions.tools`; a resumed run's client tools, rebuilt from its journal). */
  private runTools: readonly Tool[] = NO_RUN_TOOLS;

  constructor(
    private readonly agent: CompiledAgent,
    private readonly input: RunInput,
    options: RunOptions | null,
    private readonly control: RunControl,
    subscriber: Subscriber<AgentEvent>,
  ) {
    let runId: string;
    let session: Session | undefined;
    let onRequest: 'wait' | 'suspend' = agent.onRequest;
    let output = agent.output;
    const resume = control.resume;
    this.resume = resume;
    try {
      checkOptionsObject('run', options);
      const { responses } = options;
      if (responses !== undefined && !isSubscribable(responses)) {
        throw new TypeError(`run: 'responses' must be an Observable of responses (a Subject, say), got ${show(responses)}`);
      }
      runId = resume ? resume.runId : (options.runId ?? agent.newId('run'));
      if (typeof runId !== 'string' || runId === '') throw new TypeError(`run: a run id must be a non-empty string, got ${show(runId)}`);
      session = options.session;
      const sessionId = resume ? resume.sessionId : options.sessionId;
      if (sessionId !== undefined) {
        if (typeof sessionId !== 'string' || sessionId === '') throw new TypeError(`run: 'sessionId' must be a non-empty string, got ${show(sessionId)}`);
        if (!agent.store) throw new TypeError("run: 'sessionId' needs a store (createAgent({ store })); without one, pass a Session as 'session'");
        if (session !== undefined && session?.id !== sessionId)
          throw new TypeError(`run: 'session' (id '${String(session?.id)}') and 'sessionId' ('${sessionId}') disagree`);
        session ??= createSession({ id: sessionId, store: agent.store });
      }
      const mode = options.onRequest ?? resume?.onRequest ?? agent.onRequest;
      if (mode !== 'wait' && mode !== 'suspend') throw new TypeError(`run: 'onRequest' must be 'wait' or 'suspend', got ${show(mode)}`);
      if (options.onRequest !== undefined && !agent.store) throw new TypeError("run: 'onRequest' needs a store (createAgent({ store }))");
      onRequest = mode;
      output = runOutput(agent, options);
      if (options.sessionWaitMs !== undefined) checkSessionWait('run', options.sessionWaitMs);
      if (session !== undefined) {
        // Duck-typed: a Session of this package's other build (ESM beside CJS) is one too.
        if (session === null || typeof session.open !== 'function' || typeof session.commit !== 'function') {
          throw new TypeError("run: 'session' must be a Session made with createSession()");
        }
        this.sessionId = session.id;
      }
      const started = resume?.state;
      if (started) this.startState = StateBag.fromScopes(started.session, started.run);
      else if (options.state !== undefined) this.startState = startingState(agent.states, options.state);
      // Checked again: the agent resuming may have a tool of that name now, which would take its calls.
      if (resume) this.runTools = checkRunTools(agent, rebuildClientTools(resume.clientTools));
      else if (options.tools !== undefined) this.runTools = checkRunTools(agent, options.tools);
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
    const store = agent.store;
    const parentCall = parentCallOf(subscriber); // before a journal's sink takes the subscriber's place
    if (store && this.setupError === undefined) {
      this.durable = new DurableRun(store, agent, runId, onRequest, subscriber, resume);
      subscriber = this.durable.sink as unknown as Subscriber<AgentEvent>;
    }
    this.subscriber = subscriber;
    let responses$: Observable<AgentResponse> = options.responses ?? EMPTY;
    if (this.durable && store) {
      // Answers kept by the store (given from any process), and, for a resume, those the journal
      // says the run took and those the store held when the resume took the lease (at once,
      // however late the store's notifications are).
      const kept = fromStore(this.durable, () => store.answers(runId));
      const taken = resume
        ? merge(
            defer(() => from(this.resumeAnswers(resume))),
            kept,
          )
        : kept;
      responses$ = options.responses ? merge(taken, options.responses) : taken;
    }
    if (control.onStart) {
      // Answers given with handle.respond() join those of options.responses.
      const answers = new Answers();
      this.answers = answers;
      responses$ = responses$ === EMPTY ? answers : merge(responses$, answers);
      control.onStart(this);
    }
    this.scope = new RunScopeImpl(agent, runId, this.sessionId, responses$, subscriber);
    this.scope.parentCall = parentCall;
    this.scope.onReached = (loop) => this.reached(loop);
    this.scope.durable = this.durable;
    this.scope.output = output;
    if (resume) this.scope.resumed = { context: resume.context };
  }

  /** A resumed run's answers known at its start: journaled ones, then those the store had kept. */
  private resumeAnswers(resume: ResumePoint): AgentResponse[] {
    const answers = [...resume.answers.values()];
    const received = this.received?.answers;
    return received && received.length > 0 ? answers.concat(received) : answers;
  }

  start(): void {
    // The observers from the run's start: a journaled run's start record keeps what they ask it to.
    const { scope } = this;
    try {
      for (const observe of this.agent.runObservers) scope.observe(observe(scope));
    } catch (error) {
      this.observeError = error;
    }
    const durable = this.durable;
    if (!durable) return this.begin();
    // A journaled run: the lease first, then (a new run) the start record; then the turn.
    durable.journal.onFailure = (error) => this.fail(error);
    durable.onSuspend = () => this.suspend();
    durable.journal.acquire(
      () => this.opened(durable),
      (error) => this.refused(durable, error),
    );
  }

  private opened(durable: DurableRun): void {
    if (this.ended) return durable.journal.release(); // left while the store answered
    const go = () => {
      if (this.ended) return durable.journal.release();
      durable.sink.active = true;
      this.begin();
    };
    const resume = this.resume;
    if (resume) {
      // The journal as read before the lease was taken must still be the whole of it: another
      // process may have run the run in between.
      const { runId } = this.scope;
      return settle(
        () => durable.store.read(runId, resume.position),
        (newer) => {
          if (newer === undefined) return this.refused(durable, new RunNotFoundError(runId));
          if (newer.length > 0) return this.refused(durable, wentOn(runId, resume.position, newer));
          if (!durable.store.received) return go();
          settle(
            () => (durable.store.received as NonNullable<AgentStore['received']>)(runId),
            (received) => {
              if (received === null || typeof received !== 'object' || !Array.isArray(received.answers)) {
                return this.refused(durable, new TypeError(`store.received('${runId}') must answer { answers, cancelled }, got ${show(received)}`));
              }
              this.received = received;
              go();
            },
            (error) => this.refused(durable, error),
          );
        },
        (error) => this.refused(durable, error),
      );
    }
    let input: Message[];
    try {
      input = toMessages(this.input);
    } catch (error) {
      return this.refused(durable, error);
    }
    const { runId } = this.scope;
    const sessionId = this.sessionId;
    const context = this.scope.journalContext();
    const state = this.startState;
    const clientTools = clientToolSpecs(this.runTools);
    durable.journal.record({
      kind: 'start',
      runId,
      ...(sessionId === undefined ? {} : { sessionId }),
      agent: this.agent.name,
      input,
      onRequest: durable.mode,
      ...(context === undefined ? {} : { context }),
      // What a resume before the first checkpoint starts from again (JSON, as a checkpoint's state).
      ...(state === undefined ? {} : { state: { run: state.toStored('run'), session: state.toStored('session') } }),
      ...(clientTools === undefined ? {} : { clientTools }),
    });
    durable.journal.durable(go, (error) =>
      this.refused(
        durable,
        error instanceof JournalConflictError && error.expected === 0 ? new Error(`run: a run with id '${runId}' exists in the store already`) : error,
      ),
    );
  }

  /** The journal refused the run (the lease is held elsewhere, the id is taken, the store failed): reported, not journaled. */
  private refused(durable: DurableRun, error: unknown): void {
    durable.journal.onFailure = undefined;
    durable.journal.release();
    if (this.ended) return;
    this.setupError = error;
    this.begin();
  }

  private begin(): void {
    const { scope, session, sessionId } = this;
    const start: AgentEvent = sessionId !== undefined ? { type: 'run-start', runId: scope.runId, sessionId } : { type: 'run-start', runId: scope.runId };
    if (this.resume) (start as { resumed?: true }).resumed = true;
    scope.send(start);
    if (this.ended) return; // the consumer left on run-start (firstValueFrom, take(1))
    if (this.setupError !== undefined) return this.fail(this.setupError);
    if (this.observeError !== undefined) return this.fail(this.observeError);
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
      const resume = this.resume;
      const input = resume ? [...resume.input] : toMessages(this.input);
      const proceed = (stored: MessageLog, state: StateBag) => {
        // A run resumed after its process saved its turn and died before its end: the history it
        // started from is the session without that turn (the store keeps the turn once).
        const cp = resume?.checkpoint;
        const turnAt = cp !== undefined && !cp.replace && session?.lastRunId === scope.runId ? savedTurnStart(stored, cp.messages) : -1;
        const history = turnAt >= 0 ? MessageLog.of(stored.since(0).slice(0, turnAt)) : stored;
        this.history = history;
        if (resume?.checkpoint) return this.resumeLoop(resume, history);
        let turnInput: Message[];
        try {
          checkToolResults(history, input); // the results of calls the client ran answer calls of the history
          turnInput = closeOpenCalls(history, input); // and those it did not run get an error result
        } catch (error) {
          return this.fail(error);
        }
        this.beforeTurn(initialLoop(this.agent, history, this.startState ? state.overlay(this.startState) : state, turnInput, this.tools()));
      };
      if (!session) return proceed(MessageLog.empty, StateBag.empty);
      this.acquired = true;
      const { agent, durable } = this;
      const claim: SessionClaim = {
        runId: scope.runId,
        ttlMs: agent.leaseMs,
        waitMs: this.options.sessionWaitMs ?? agent.sessionWaitMs,
        scheduler: agent.scheduler,
        // A session store that fails as a journaled run takes its session fails it as a failed
        // journal write does: nothing of the turn is lost, so the run is left interrupted.
        // Only for a session in the agent's store: the one a resume reads.
        onStoreFailure: durable && session.store !== undefined && session.store === agent.store ? (error) => durable.journal.storeFailed(error) : undefined,
      };
      const loaded = session.open(claim).subscribe({
        next: ({ log, state }) => continueWith(this, ({ log, state }: { log: MessageLog; state: StateBag }) => proceed(log, state), { log, state }),
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
      this.durable?.turn(start, this.history);
      this.startLoop(start);
    });
  }

  private startLoop(start: LoopState): void {
    this.latest = start;
    const durable = this.durable;
    if (durable) {
      // A cancel sent from any process (or before this resume) stops the run, keeping what it completed.
      if (this.received?.cancelled) return this.cancel();
      const { runId } = this.scope;
      const cancels = fromStore(durable, () => durable.store.cancellations(runId)).subscribe(() => this.cancel());
      // Ended (a cancel set before), or failing (the store's notifications failed at once): no loop.
      if (this.ended || this.failing) return cancels.unsubscribe();
      this.subscription.add(cancels);
    }
    const loop$ = of(start).pipe(expand((state) => (state.done ? EMPTY : runIteration(this.scope, this.agent, state))));
    const sink = new LoopSink(this);
    this.loopSink = sink;
    loop$.subscribe(sink);
  }

  /**
   * A resumed run goes on from its last checkpoint: the messages and the state of both scopes as
   * journaled, the turn's instructions, settings and tools; beforeMessageTurn is not run again.
   */
  private resumeLoop(point: ResumePoint, history: MessageLog): void {
    const cp = point.checkpoint as NonNullable<ResumePoint['checkpoint']>;
    const agent = this.agent;
    const turn = point.turn;
    const all = this.tools();
    const tools = turn ? all.filter((tool) => turn.tools.includes(tool.name)) : all;
    const loop: LoopState = {
      iteration: cp.iteration,
      log: cp.replace ? MessageLog.of(cp.messages) : history.appendAll(cp.messages),
      turnStart: cp.replace ? (cp.turnStart ?? 0) : history.length,
      instructions: turn ? turn.instructions : agent.instructions,
      tools,
      toolChoice: turn ? turn.toolChoice : agent.toolChoice,
      settings: turn ? turn.settings : agent.settings,
      state: StateBag.fromScopes(cp.state.session, cp.state.run),
      usage: new PlainUsage(cp.usage.inputTokens, cp.usage.outputTokens),
      functionCalls: cp.functionCalls,
      done: cp.done !== undefined,
      endReason: cp.done?.reason,
      terminationReason: cp.done?.terminationReason,
    };
    this.initial = loop;
    this.durable?.resumedAt(loop);
    this.startLoop(loop);
  }

  /** @internal The loop reached `state` (an iteration ended). */
  reached(state: LoopState): void {
    this.latest = state;
    this.durable?.checkpoint(state);
  }

  /**
   * A journaled run with `onRequest: 'suspend'` waits for an answer: its steps stop, its requests
   * stay open in the journal, and it ends with `run-end` reason `suspended` (the session is not
   * saved: the turn goes on when the run is resumed).
   */
  private suspend(): void {
    if (this.ended || this.failing || this.scope.isCancelling() || !this.durable) return;
    this.pendingRequests = this.durable.pending(this.scope.requests.pending());
    const teardownError = this.stop();
    if (teardownError !== undefined) {
      this.sendError({ error: teardownError, source: 'run' });
      return this.end('error', this.latest, teardownError);
    }
    this.end('suspended', this.latest);
  }

  /** @internal The loop is over: afterMessageTurn, then the end. */
  loopDone(): void {
    continueWith(this, (final: LoopState) => this.afterTurn(final), this.latest as LoopState);
  }

  private afterTurn(loop: LoopState): void {
    phaseThen(
      TurnContext.create(this.scope, loop, lastAssistant(loop.log, loop.turnStart)),
      this.agent.hooks.afterMessageTurn,
      'afterMessageTurn',
      this,
      (ctx) => {
        const final = ctx.termination ? terminateLoop(ctx.loop, ctx.termination.reason) : ctx.loop;
        this.latest = final;
        this.end(final.endReason ?? 'completed', final);
      },
    );
  }

  /** Reports a failure (after the onError hooks) and ends the run with reason `error`. */
  fail(failure: unknown): void {
    if (this.ended || this.failing) return;
    this.failing = true;
    const described = describeFailure(failure);
    const { error, source, middleware, hook } = described;
    const latest = this.latest;
    const seenLoop = latest ?? this.initial ?? emptyLoop(this.agent);
    const ctx = new ErrorContext(this.scope, seenLoop, error, source, latest?.iteration ?? 0, middleware, undefined, undefined, hook);
    const report = (reported: DescribedFailure) => {
      // Once: a consumer that cancels in reaction to this error event must not have it sent again.
      this.reportFailure = undefined;
      this.sendError(reported);
      this.end('error', this.latest, reported.error);
    };
    this.stop(); // a teardown that throws as well: the failure being reported comes first
    // onError hooks run on their own: the run's steps are torn down; a failing hook is reported instead.
    // A cancel while they run tears them down and reports the error as it was.
    this.onErrorHooks = new Subscription();
    this.reportFailure = () => report(described);
    const onErrorOwner: StepOwner = {
      subscription: this.onErrorHooks,
      fail: (hookFailure) => report(describeFailure(hookFailure)),
    };
    phaseThen(ctx, this.agent.hooks.onError, 'onError', onErrorOwner, (seen) => {
      // What the hooks wrote (updateState: an error count, a note) is kept with the turn.
      if (latest) this.latest = seen.loop;
      report({ ...described, error: seen.error });
    });
  }

  /** Also `start()`'s `cancel()`. */
  cancel(): void {
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
      this.sendError({ error: teardownError, source: 'run' });
      return this.end('error', this.latest, teardownError);
    }
    this.end('cancelled', this.latest);
  }

  /** A cancel expires every open request, saying so (reason `cancelled`). */
  private expireRequests(): void {
    // A resumed run's journaled requests that it has not asked again yet.
    for (const requestId of this.durable?.unasked ?? []) {
      this.scope.send({ type: 'request-expired', runId: this.scope.runId, requestId, reason: 'cancelled' });
    }
    for (const requestId of this.scope.requests.pending()) {
      this.scope.requests.settle(requestId);
      this.scope.send({ type: 'request-expired', runId: this.scope.runId, requestId, reason: 'cancelled' });
    }
  }

  /** `start()`'s `respond()`. */
  respond(response: AgentResponse): boolean {
    // Own properties only, as the operators read the rest of an answer.
    const requestId = ownField(response, 'requestId');
    const { answers } = this;
    if (!answers || typeof requestId !== 'string' || !this.scope.requests.isOpen(requestId)) return false;
    return this.scope.took(response, () => answers.next(response));
  }

  /** Saves what the turn reached, then emits `run-end` and completes. */
  private end(reason: RunResult['reason'], loop: LoopState | undefined, error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    if (this.onAbort) this.options.signal?.removeEventListener('abort', this.onAbort);
    const { session } = this;
    // A suspended run's turn is saved when it ends after its resume; so is that of a run whose journal
    // failed (it is left interrupted, and its resume saves the turn: saving it here too would repeat it).
    const keep = reason !== 'suspended' && !this.durable?.journal.failure;
    // Asked by the session only for a failure of the store's append it may hand over: what it answered is what happened.
    const handed = { taken: false };
    const policy = session && this.saveHandOver(reason, session);
    const handOver = policy && ((failure: unknown) => (handed.taken = policy(failure)));
    const saved = session && loop && this.acquired && keep ? safeCommit(session, this.scope.runId, loop, handOver) : undefined;
    if (saved instanceof Promise) {
      saved.then(
        () => this.finish(reason, loop, error),
        (saveError: unknown) => this.finishAfterSaveError(saveError, loop, handed.taken),
      );
    } else if (saved) {
      this.finishAfterSaveError(saved.error, loop, handed.taken);
    } else {
      this.finish(reason, loop, error);
    }
  }

  /**
   * Whether a failed save of the turn is left to the run's resume, which saves it (found by its
   * first message's id if this save landed after all): for a journaled run whose loop ended as
   * planned, whose session is in the agent's store (the one a resume reads), when the store had an
   * outage ({@link isStoreOutage}). A cancelled or failed run is not resumed; a conflict means
   * another run's turn came in between, which this one must not follow.
   */
  private saveHandOver(reason: RunResult['reason'], session: Session): ((error: unknown) => boolean) | undefined {
    if (!this.durable || session.store === undefined || session.store !== this.agent.store) return undefined;
    if (reason !== 'completed' && reason !== 'terminated' && reason !== 'max-iterations') return undefined;
    return isStoreOutage;
  }

  private finishAfterSaveError(saveError: unknown, loop: LoopState | undefined, handedOver: boolean): void {
    if (handedOver) this.durable?.journal.storeFailed(saveError); // left interrupted
    this.sendError({ error: saveError, source: 'run' });
    this.finish('error', loop, saveError);
  }

  /** The `error` event (`middleware` and `hook` name the failing hook, when there is one). */
  private sendError({ error, source, middleware, hook }: DescribedFailure): void {
    const runId = this.scope.runId;
    const info = toErrorInfo(error);
    this.scope.send(middleware === undefined ? { type: 'error', runId, error: info, source } : { type: 'error', runId, error: info, source, middleware, hook });
  }

  private finish(reason: RunResult['reason'], loop: LoopState | undefined, error: unknown): void {
    this.finished = true;
    const runId = this.scope.runId;
    if (this.session && this.acquired) this.session.release(runId);
    const text = loop ? textOf(lastAssistant(loop.log, loop.turnStart)) : '';
    const usage = addUsage(addUsage(loop?.usage ?? zeroUsage, this.scope.pendingUsage), this.scope.reportedUsage);
    const terminationReason = reason === 'terminated' ? loop?.terminationReason : undefined;
    const pendingRequests = reason === 'suspended' ? (this.pendingRequests ?? []) : undefined;
    // A turn that ended on client tools' calls: the client runs them, and answers with the next run's
    // input. Such a turn gave no final answer, so no structured output either.
    const clientCalls = reason === 'completed' && loop ? unansweredCalls(loop.log, loop.turnStart) : [];
    const output = this.scope.output && reason === 'completed' && clientCalls.length === 0 ? this.finalOutput(this.scope.output, text) : undefined;
    const end: AgentEvent =
      pendingRequests !== undefined
        ? { type: 'run-end', runId, reason, text, usage, pendingRequests }
        : terminationReason === undefined
          ? { type: 'run-end', runId, reason, text, usage }
          : { type: 'run-end', runId, reason, text, usage, terminationReason };
    if (output !== undefined) (end as { output?: unknown }).output = output;
    if (clientCalls.length > 0) (end as { clientCalls?: readonly ClientCall[] }).clientCalls = clientCalls;
    this.scope.send(end);
    const messages = loop ? loop.log.since(loop.turnStart) : [];
    const result: RunResult =
      pendingRequests !== undefined ? { text, messages, usage, reason, pendingRequests } : { text, messages, usage, reason, terminationReason };
    if (output !== undefined) (result as { output?: unknown }).output = output;
    if (clientCalls.length > 0) (result as { clientCalls?: readonly ClientCall[] }).clientCalls = clientCalls;
    this.control.onResult?.(result, error);
    this.subscriber.complete();
  }

  /**
   * The structured output of a completed run: the answer the loop judged, or (a run resumed after
   * its loop was over) the final text judged now.
   */
  private finalOutput(output: CompiledOutput, text: string): unknown {
    if (this.scope.outputValue !== undefined) return this.scope.outputValue;
    const verdict = checkOutput(output, text);
    return verdict.ok ? verdict.value : undefined;
  }

  /**
   * Tears the run's steps down: the loop, and whatever hook or load is in flight. Returns what a
   * teardown threw (every one runs regardless).
   */
  private stop(): unknown {
    this.scope.markStopping(); // a request whose wait ends now ends with the run, not on its own
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
    const durable = this.durable;
    if (!this.ended && durable) {
      // A journaled run left before its end is interrupted, not over: the journal keeps it for a
      // resume (which saves the turn), so the session is not saved here; the lease is let go.
      this.ended = true;
      if (session && this.acquired) session.release(this.scope.runId);
      durable.journal.flush();
      durable.journal.release();
    } else if (!this.ended) {
      this.ended = true;
      if (session && this.acquired) {
        const saved = this.latest ? safeCommit(session, this.scope.runId, this.latest) : undefined;
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
    // Failing first: the loop is torn down as the run stops (a request it waits for ends with the run).
    this.run.fail(error);
    unsubscribeQuietly(this);
  }

  override complete(): void {
    if (this.isStopped) return;
    this.isStopped = true;
    const teardownError = unsubscribeQuietly(this);
    if (teardownError === undefined) this.run.loopDone();
    else this.run.fail(teardownError);
  }
}

/**
 * A store's notifications for a journaled run (its kept answers, its cancel). When they fail (a
 * network store's listening connection lost for good) or cannot be subscribed, the store has
 * failed the run as a failed write does: the journal stops, the run ends with an `error` event and
 * is left interrupted, to be resumed. The Observable never errors (nor does the run's, then).
 */
function fromStore<T>(durable: DurableRun, notifications: () => Observable<T>): Observable<T> {
  return defer(notifications).pipe(
    catchError((error: unknown) => {
      durable.journal.storeFailed(error);
      return NEVER;
    }),
  );
}

/** The run's structured output: its own `output` / `outputRetries`, else the agent's. */
function runOutput(agent: CompiledAgent, options: RunOptions): CompiledOutput | undefined {
  const { output, outputRetries } = options;
  if (output === undefined && outputRetries === undefined) return agent.output;
  if (output === undefined) {
    if (!agent.output) throw new TypeError("run: 'outputRetries' needs an 'output' schema (the run's or the agent's)");
    if (!(typeof outputRetries === 'number' && Number.isInteger(outputRetries) && outputRetries >= 0)) {
      throw new TypeError(`run: 'outputRetries' must be an integer >= 0, got ${show(outputRetries)}`);
    }
    return { ...agent.output, retries: outputRetries };
  }
  return compileOutput(output, outputRetries ?? agent.outputRetries, 'run');
}

function initialLoop(agent: CompiledAgent, history: MessageLog, state: StateBag, input: Message[], tools: readonly Tool[] = agent.tools): LoopState {
  return {
    iteration: 0,
    log: history.append(...input),
    turnStart: history.length,
    instructions: agent.instructions,
    tools,
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

/**
 * Why a resume is refused when the journal grew between its read and its lease: the run finished
 * in the other process ({@link RunFinishedError}, as a resume of a finished run is), or it went on
 * there and stopped again ({@link JournalConflictError}: resuming again starts from where it is now).
 */
function wentOn(runId: string, position: number, newer: readonly JournalEntry[]): Error {
  const end = newer.find((entry) => entry.record.kind === 'end')?.record as Extract<JournalRecord, { kind: 'end' }> | undefined;
  if (end) return new RunFinishedError(runId, end.reason);
  return new JournalConflictError(runId, position, newer[newer.length - 1].position);
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

/**
 * Where a run's saved turn starts in the session: at its first message, found by id. The last
 * checkpoint may hold fewer of the turn's messages than the store does (the journal's writes can
 * lag behind the session's), so its length alone does not say where the turn starts. -1: not there.
 */
function savedTurnStart(stored: MessageLog, turn: readonly Message[]): number {
  const id = turn[0]?.id;
  if (id === undefined) return stored.length >= turn.length ? stored.length - turn.length : -1;
  for (let i = stored.length - 1; i >= 0; i--) if (stored.at(i)?.id === id) return i;
  return -1;
}

function safeCommit(session: Session, runId: string, loop: LoopState, handOver?: (error: unknown) => boolean): Promise<void> | { error: unknown } | undefined {
  try {
    const saved: unknown = session.commit(runId, loop.log, loop.turnStart, loop.state, handOver);
    return isPromiseLike<void>(saved) ? Promise.resolve(saved) : undefined;
  } catch (error) {
    return { error };
  }
}

/** A failure as the `error` event and the onError hooks tell it: a middleware's comes with its hook. */
interface DescribedFailure {
  readonly error: unknown;
  readonly source: ErrorSource;
  readonly middleware?: string;
  readonly hook?: string;
}

function describeFailure(failure: unknown): DescribedFailure {
  if (failure instanceof HookFailure) return { error: failure.error, source: 'middleware', middleware: failure.middleware, hook: failure.phase };
  if (failure instanceof ModelFailure) return { error: failure.error, source: 'model' };
  return { error: failure, source: 'run' };
}
