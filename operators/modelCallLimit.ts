import { z } from 'zod';
import { mapContext, defineState, type AgentMiddleware, type IterationContext } from '../src/index';
import { checkOptions, optionNames } from './internal/checkOptions';
import { show } from '../src/internal/show';

/** Model calls made in the thread (the session; without one, the run). */
const ThreadCalls = defineState({
  key: 'rx-agent.modelCallLimit.threadCount',
  schema: z.object({ count: z.number().int().nonnegative() }),
  initial: () => ({ count: 0 }),
  scope: 'session',
});

/**
 * Model calls made in this run, and the last iteration counted: every instance reads the same
 * counts, and whichever comes first in an iteration counts its call (once, however many there are).
 */
const RunCalls = defineState({
  key: 'rx-agent.modelCallLimit.runCount',
  schema: z.object({ count: z.number().int().nonnegative(), countedIteration: z.number().int() }),
  initial: () => ({ count: 0, countedIteration: -1 }),
  scope: 'run',
});

/** Options of {@link modelCallLimit}. */
export interface ModelCallLimitOptions {
  /** At most this many model calls in the thread (the session). */
  threadLimit?: number;
  /** At most this many model calls in one run. */
  runLimit?: number;
  /** `'end'` (default): terminate the run with the limit message; `'error'`: fail the run. */
  exitBehavior?: 'end' | 'error';
}

/** The keys of {@link ModelCallLimitOptions}: any other is refused. */
const OPTIONS = optionNames<ModelCallLimitOptions>({ threadLimit: true, runLimit: true, exitBehavior: true });

/**
 * A model call was blocked by {@link modelCallLimit} with `exitBehavior: 'error'`. The message is
 * `Model call limits exceeded: <thread|run> level call limit reached with N model calls`.
 */
export class ModelCallLimitExceededError extends Error {
  override readonly name = 'ModelCallLimitExceededError';
  constructor(
    /** Which limit blocked the call. */
    readonly scope: 'thread' | 'run',
    /** Model calls made in that scope (the limit reached). */
    readonly count: number,
    readonly limit: number,
  ) {
    super(limitMessage(scope, count));
  }
}

function limitMessage(scope: 'thread' | 'run', count: number): string {
  return `Model call limits exceeded: ${scope} level call limit reached with ${count} model calls`;
}

function checkLimit(name: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`modelCallLimit: '${name}' must be a non-negative integer, got ${show(value)}`);
  }
  return value;
}

/**
 * Limits the number of model calls, per thread (the session: the count is saved with it) and
 * per run. Before each model call the thread limit is checked first, then the run limit; a call
 * is blocked when the count has reached its limit. A call counts once it was made (a skipped
 * model call does not count; retries inside one call count once).
 *
 * Options (at least one limit is required):
 * - `threadLimit`: model calls allowed in the session (without a session: in the run).
 * - `runLimit`: model calls allowed in one run.
 * - `exitBehavior` (default `'end'`): `'end'` terminates the run with
 *   `Model call limits exceeded: <thread|run> level call limit reached with N model calls`;
 *   `'error'` fails the run with a {@link ModelCallLimitExceededError} carrying that text.
 *
 * @example
 * const agent = createAgent({ model, tools, middleware: [modelCallLimit({ threadLimit: 50, runLimit: 10 })] });
 */
export function modelCallLimit(options: ModelCallLimitOptions = {}): AgentMiddleware {
  checkOptions('modelCallLimit', options, OPTIONS); // no unknown option, none set to null
  const threadLimit = checkLimit('threadLimit', options.threadLimit);
  const runLimit = checkLimit('runLimit', options.runLimit);
  const exitBehavior = options.exitBehavior ?? 'end';
  if (threadLimit === undefined && runLimit === undefined) {
    throw new TypeError("modelCallLimit: give at least one of 'threadLimit' and 'runLimit'");
  }
  if (exitBehavior !== 'end' && exitBehavior !== 'error') {
    throw new TypeError(`modelCallLimit: 'exitBehavior' must be 'end' or 'error', got ${String(exitBehavior)}`);
  }

  const block = (ctx: IterationContext, scope: 'thread' | 'run', count: number, limit: number): IterationContext => {
    if (exitBehavior === 'error') throw new ModelCallLimitExceededError(scope, count, limit);
    return ctx.terminate(limitMessage(scope, count));
  };

  return {
    name: 'modelCallLimit',
    beforeIteration: mapContext((ctx) => {
      if (ctx.termination || ctx.response) return ctx;
      if (threadLimit !== undefined) {
        const { count } = ctx.state(ThreadCalls);
        if (count >= threadLimit) return block(ctx, 'thread', count, threadLimit);
      }
      if (runLimit !== undefined) {
        const { count } = ctx.state(RunCalls);
        if (count >= runLimit) return block(ctx, 'run', count, runLimit);
      }
      return ctx;
    }),
    afterIteration: mapContext((ctx) => {
      // Only a call that was made counts (not one skipped or terminated before the call).
      if (ctx.modelCallSkipped || ctx.response === undefined) return ctx;
      if (ctx.state(RunCalls).countedIteration === ctx.iteration) return ctx; // another instance counted it
      return ctx
        .updateState(ThreadCalls, (s) => ({ count: s.count + 1 }))
        .updateState(RunCalls, (s) => ({ count: s.count + 1, countedIteration: ctx.iteration }));
    }),
  };
}
