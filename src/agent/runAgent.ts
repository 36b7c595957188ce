import { EMPTY, Observable, Subject, concatMap, defer, expand, last, map, merge, of, queueScheduler, subscribeOn, tap, type Subscription } from 'rxjs';
import { toErrorInfo, type AgentEvent, type AgentResponse } from '../events/types';
import { textOf, toMessages, type Message, type RunInput } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import { ErrorContext, TurnContext, type ErrorSource } from '../middleware/contexts';
import { runPhase } from '../middleware/runPhase';
import { HookFailure } from '../middleware/types';
import type { Session } from '../session/session';
import { zeroUsage, type LoopState } from '../state/loopState';
import { StateBag } from '../state/stateBag';
import type { Usage } from '../model/types';
import { ModelFailure } from './callModel';
import type { CompiledAgent } from './compileAgent';
import { runIteration, terminateLoop } from './runIteration';
import { RunScopeImpl } from './runScopeImpl';

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
    const runId = options.runId ?? agent.newId('run');
    const session = options.session;
    // Answers given with handle.respond() join those of options.responses.
    const answers = new Subject<AgentResponse>();
    const responses$ = options.responses ? merge(options.responses, answers) : answers.asObservable();
    const scope = new RunScopeImpl(runId, session?.id, agent.scheduler, responses$, subscriber, agent.newId, agent.maxIterations);
    let latest: LoopState | undefined;
    let ended = false;
    let main: Subscription | undefined;
    let acquired = false;

    const end = (reason: RunResult['reason'], loop: LoopState | undefined, error?: unknown): void => {
      if (ended) return;
      ended = true;
      let saveError: unknown;
      const finish = () => {
        if (session && acquired) session.release(runId);
        const log = loop?.log;
        const text = log ? lastAssistantText(log) : '';
        const usage = loop?.usage ?? zeroUsage;
        const finalReason = saveError === undefined ? reason : 'error';
        const terminationReason = finalReason === 'terminated' ? loop?.terminationReason : undefined;
        subscriber.next(
          terminationReason === undefined
            ? { type: 'run-end', runId, reason: finalReason, text, usage }
            : { type: 'run-end', runId, reason: finalReason, text, usage, terminationReason },
        );
        control.onResult?.(
          { text, messages: loop ? loop.log.since(loop.turnStart) : [], usage, reason: finalReason, terminationReason },
          saveError ?? error,
        );
        subscriber.complete();
      };
      const saved = session && loop && acquired ? safeCommit(session, loop) : undefined;
      if (saved instanceof Promise) {
        saved.then(
          () => finish(),
          (e: unknown) => {
            saveError = e;
            scope.send({ type: 'error', runId, error: toErrorInfo(e), source: 'run' });
            finish();
          },
        );
      } else {
        if (saved && 'error' in saved) {
          saveError = saved.error;
          scope.send({ type: 'error', runId, error: toErrorInfo(saved.error), source: 'run' });
        }
        finish();
      }
    };

    const fail = (failure: unknown): void => {
      const { error, source, middleware } = describeFailure(failure);
      const ctx = new ErrorContext(scope, latest ?? emptyLoop(agent), error, source, latest?.iteration ?? 0, middleware, undefined, undefined);
      runPhase(ctx, agent.hooks.onError, 'onError').subscribe({
        next: (seen) => report(seen.error, source, middleware),
        error: (hookFailure) => {
          const d = describeFailure(hookFailure);
          report(d.error, d.source, d.middleware);
        },
      });
      function report(e: unknown, s: ErrorSource, m: string | undefined) {
        scope.send(
          m === undefined
            ? { type: 'error', runId, error: toErrorInfo(e), source: s }
            : { type: 'error', runId, error: toErrorInfo(e), source: s, middleware: m },
        );
        end('error', latest, e);
      }
    };

    const cancel = (): void => {
      if (ended || scope.isCancelling()) return;
      scope.markCancelling();
      main?.unsubscribe();
      for (const requestId of scope.requests.pending()) {
        scope.requests.settle(requestId);
        scope.send({ type: 'request-expired', runId, requestId, reason: 'cancelled' });
      }
      end('cancelled', latest);
    };

    const respond = (response: AgentResponse): boolean => {
      if (!response || typeof response.requestId !== 'string' || !scope.requests.isOpen(response.requestId)) return false;
      answers.next(response);
      return !scope.requests.isOpen(response.requestId);
    };
    control.onStart?.({ cancel, respond });

    scope.send(session ? { type: 'run-start', runId, sessionId: session.id } : { type: 'run-start', runId });

    const signal = options.signal;
    const onAbort = () => cancel();
    if (signal?.aborted) {
      cancel();
      return;
    }
    signal?.addEventListener('abort', onAbort, { once: true });

    const turn$ = defer(() => {
      const inputMessages = toMessages(input);
      if (session) {
        session.acquire(runId);
        acquired = true;
        return session.load().pipe(map(({ log, state }) => initialLoop(agent, log, state, inputMessages)));
      }
      return [initialLoop(agent, MessageLog.empty, StateBag.empty, inputMessages)];
    }).pipe(
      // The input joins the conversation only once beforeMessageTurn accepts it: a turn that a
      // middleware rejects there (e.g. PII blocked) leaves the session as it was.
      concatMap((loop) => runPhase(TurnContext.create(scope, loop), agent.hooks.beforeMessageTurn, 'beforeMessageTurn')),
      concatMap((turn) => {
        const start = turn.termination ? terminateLoop(turn.loop, turn.termination.reason) : turn.loop;
        latest = start;
        // Each iteration is subscribed on queueScheduler: when the previous one finished synchronously
        // (inside a queue action) the next waits for the stack to unwind, so a long synchronous loop
        // does not grow the stack. (expand's own scheduler argument only applies to buffered values.)
        return of(start).pipe(
          expand((state) => (state.done ? EMPTY : runIteration(scope, agent, state).pipe(subscribeOn(queueScheduler)))),
          tap((state) => (latest = state)),
          last(),
        );
      }),
      concatMap((loop) =>
        runPhase(TurnContext.create(scope, loop, lastAssistant(loop.log)), agent.hooks.afterMessageTurn, 'afterMessageTurn').pipe(
          map((ctx) => (ctx.termination ? terminateLoop(ctx.loop, ctx.termination.reason) : ctx.loop)),
        ),
      ),
    );

    main = turn$.subscribe({
      next: (loop) => {
        latest = loop;
        end(loop.endReason ?? 'completed', loop);
      },
      error: (failure) => fail(failure),
    });

    return () => {
      signal?.removeEventListener('abort', onAbort);
      main?.unsubscribe();
      if (session && acquired && !ended) session.release(runId);
    };
  });
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
    state,
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

function lastAssistant(log: MessageLog): Message | undefined {
  for (let i = log.length - 1; i >= 0; i--) {
    const m = log.at(i);
    if (m?.role === 'assistant') return m;
  }
  return undefined;
}

function lastAssistantText(log: MessageLog): string {
  return textOf(lastAssistant(log));
}

function safeCommit(session: Session, loop: LoopState): Promise<void> | { error: unknown } | undefined {
  try {
    const saved: unknown = session.commit(loop.log, loop.state);
    return isPromiseLike(saved) ? Promise.resolve(saved) : undefined;
  } catch (error) {
    return { error };
  }
}

function describeFailure(failure: unknown): { error: unknown; source: ErrorSource; middleware?: string } {
  if (failure instanceof HookFailure) return { error: failure.error, source: 'middleware', middleware: failure.middleware };
  if (failure instanceof ModelFailure) return { error: failure.error, source: 'model' };
  return { error: failure, source: 'run' };
}

function isPromiseLike(value: unknown): value is PromiseLike<void> {
  return !!value && typeof (value as PromiseLike<void>).then === 'function';
}
