import { type SchedulerLike } from 'rxjs';
import { z } from 'zod';
import { mapContext, defineState, type AgentMiddleware, type AgentContext } from '../src/index';
import { checkOptions, checkScheduler, optionNames } from './internal/checkOptions';

/** Options of {@link lifecycleEvents}. */
export interface LifecycleEventsOptions {
  /** The clock of `durationMs` (default: the agent's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link LifecycleEventsOptions}: any other is refused. */
const OPTIONS = optionNames<LifecycleEventsOptions>({ scheduler: true });

const RunStart = defineState({
  key: 'rx-agent.lifecycleEvents.start',
  schema: z.object({ startedAt: z.number().nullable() }),
  initial: () => ({ startedAt: null }),
  scope: 'run',
});

/**
 * Brackets each run with two events, for metrics and audit logs.
 *
 * - `agent-run-started { sessionId?, inputMessageCount }` in `beforeMessageTurn`: `sessionId`
 *   only when the run has a session; `inputMessageCount` counts the turn's input messages (the
 *   history is not counted).
 * - `agent-run-completed { durationMs, iterations, functionCalls, success, terminationReason? }`
 *   in `afterMessageTurn`, just before `run-end`: `durationMs` on the scheduler's clock since
 *   `agent-run-started`; `iterations` the iterations (model calls or skipped calls) of the turn;
 *   `functionCalls` the tool calls executed; `success` true when the run ends with reason
 *   `completed`; `terminationReason` (only when the run was terminated) the run-end's
 *   `terminationReason`.
 *
 * Decisions where the spec is silent:
 * - A run that fails (a model, middleware or run error) also gets `agent-run-completed`, with
 *   `success: false` and no `terminationReason`, emitted from `onError` just before the `error`
 *   event; `iterations` and `functionCalls` then count the iterations that finished (the failing
 *   one is not counted). Tool errors do not end a run and emit nothing.
 * - A cancelled run gets no `agent-run-completed` (no middleware hook runs on cancellation;
 *   its `run-end` reason `cancelled` says how it ended).
 * - A run that fails before this middleware's `beforeMessageTurn` ran gets neither event. A run
 *   that fails in another middleware's `beforeMessageTurn` after it gets `agent-run-started`
 *   only: the runtime hands `onError` the run state from before the failing phase, where the
 *   start time is not yet recorded.
 * - Register it first: its `beforeMessageTurn` then runs before, and its `afterMessageTurn`
 *   after, every other middleware's, so it sees a termination decided by another
 *   `afterMessageTurn` and the duration spans them all. Registered after a middleware whose
 *   `afterMessageTurn` then throws, it has reported the run already (`success: true`, the turn
 *   had ended) and reports it once: not again from `onError`.
 * - `success` is the turn's: the session's save comes after `afterMessageTurn`, so a run whose
 *   save fails reports `success: true` here, then an `error` event and `run-end` reason `error`.
 *
 * @param options `scheduler` (default: the agent's).
 * @throws TypeError when an option is invalid (the message names it).
 *
 * @example
 * const agent = createAgent({ model, tools, middleware: [lifecycleEvents(), modelRetry()] });
 * agent.run('Hi').pipe(ofType('agent-run-completed')).subscribe(e => metrics.histogram('run_ms', e.durationMs));
 */
export function lifecycleEvents(options: LifecycleEventsOptions = {}): AgentMiddleware {
  checkOptions('lifecycleEvents', options, OPTIONS);
  const { scheduler } = options;
  checkScheduler('lifecycleEvents', scheduler);
  const now = (ctx: AgentContext): number => (scheduler ?? ctx.scheduler).now();
  // The start records of the runs reported in afterMessageTurn. onError sees the state from before
  // a failing phase, so a failure later in afterMessageTurn (another middleware's hook) still
  // shows the start: this set keeps such a run from being reported twice. Weak: gone with the run.
  const reported = new WeakSet<object>();

  return {
    name: 'lifecycleEvents',
    beforeMessageTurn: mapContext((ctx) => {
      const startedAt = now(ctx);
      const inputMessageCount = ctx.input.length;
      ctx.emit(
        ctx.sessionId === undefined
          ? { type: 'agent-run-started', inputMessageCount }
          : { type: 'agent-run-started', sessionId: ctx.sessionId, inputMessageCount },
      );
      return ctx.updateState(RunStart, () => ({ startedAt }));
    }),
    afterMessageTurn: mapContext((ctx) => {
      const start = ctx.state(RunStart);
      const { startedAt } = start;
      if (startedAt === null) return ctx;
      reported.add(start);
      // A termination set by an afterMessageTurn hook that ran before this one wins, as in the run.
      const reason = ctx.termination ? 'terminated' : (ctx.endReason ?? 'completed');
      const terminationReason = ctx.termination?.reason ?? ctx.terminationReason;
      const durationMs = now(ctx) - startedAt;
      const common = { durationMs, iterations: ctx.iterations, functionCalls: ctx.functionCalls, success: reason === 'completed' };
      ctx.emit(
        reason === 'terminated' && terminationReason !== undefined
          ? { type: 'agent-run-completed', ...common, terminationReason }
          : { type: 'agent-run-completed', ...common },
      );
      return ctx.updateState(RunStart, () => ({ startedAt: null }));
    }),
    onError: mapContext((ctx) => {
      if (ctx.source === 'tool') return ctx;
      const start = ctx.state(RunStart);
      const { startedAt } = start;
      if (startedAt === null || reported.has(start)) return ctx;
      ctx.emit({
        type: 'agent-run-completed',
        durationMs: now(ctx) - startedAt,
        iterations: ctx.iterations,
        functionCalls: ctx.functionCalls,
        success: false,
      });
      return ctx;
    }),
  };
}
