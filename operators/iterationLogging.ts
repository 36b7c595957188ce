import { defer, type SchedulerLike } from 'rxjs';
import { z } from 'zod';
import { mapContext, defineState, type AgentMiddleware, type Message } from '../src/index';
import { checkOptions, checkScheduler, optionNames } from './internal/checkOptions';

/** A console-like logger: any of `info`, `debug`, `trace` (a missing method is skipped). */
export interface IterationLogger {
  info?(message: string): void;
  debug?(message: string): void;
  trace?(message: string): void;
}

/** How much {@link iterationLogging} writes: `info` < `debug` < `trace`. */
export type IterationLogLevel = 'info' | 'debug' | 'trace';

/** Options of {@link iterationLogging}. */
export interface IterationLoggingOptions {
  /** Where lines go (default `console`). */
  logger?: IterationLogger;
  /** `info` (default), `debug` or `trace`; each level includes the ones before it. */
  level?: IterationLogLevel;
  /** The clock of the durations (default: the agent's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link IterationLoggingOptions}: any other is refused. */
const OPTIONS = optionNames<IterationLoggingOptions>({ logger: true, level: true, scheduler: true });

/** Characters of the instructions shown by the `trace` line. */
export const INSTRUCTIONS_PREVIEW_LENGTH = 200;

const LEVELS: readonly IterationLogLevel[] = ['info', 'debug', 'trace'];

const IterationStart = defineState({
  key: 'rx-agent.iterationLogging.start',
  schema: z.object({ startedAt: z.number().nullable() }),
  initial: () => ({ startedAt: null }),
  scope: 'run',
});

/**
 * Logs each iteration of a run, with timing on the scheduler's clock.
 *
 * Lines (one string argument per call):
 * - `info` (`logger.info`), at the start and end of each iteration:
 *   `Iteration 0 starting (run r1)` and
 *   `Iteration 0 completed in 1234ms (run r1) - tool calls: 2, final: false`
 *   (`final: true` when the iteration ends the turn: an answer without tool calls, skipped tools
 *   with a final response, a termination, or the last iteration the agent's `maxIterations`
 *   allows).
 * - `debug` (`logger.debug`) adds, when the model is called, the counts of what it is sent:
 *   `Iteration 0 model call (run r1) - messages: 3, tools: 2` (once per attempt when a
 *   `modelRetry` registered before it retries).
 * - `trace` (`logger.trace`) adds, when the model is called, the first
 *   {@link INSTRUCTIONS_PREVIEW_LENGTH} characters of the instructions it is sent (`…` when cut,
 *   `(none)` without instructions): `Iteration 0 instructions (run r1): You are terse.`
 *
 * Decisions where the spec is silent: the duration runs from this middleware's `beforeIteration`
 * to its `afterIteration` (register it first so that it spans the other middleware); the start
 * time is run state, so one instance serves concurrent runs. The `debug`/`trace` lines describe the
 * request actually sent (after every `beforeIteration` hook), so an iteration whose model call was
 * skipped has none. An iteration that fails has no `completed` line. With the console (or a logger
 * whose `trace` is `console.trace`), `trace` lines are written with `debug`: `console.trace` would
 * add a stack trace to each.
 *
 * @param options `logger` (default `console`), `level` (default `'info'`), `scheduler` (default:
 *   the agent's).
 * @throws TypeError when an option is invalid (the message names it).
 *
 * @example
 * const agent = createAgent({ model, tools, middleware: [iterationLogging({ logger: pino(), level: 'debug' })] });
 */
export function iterationLogging(options: IterationLoggingOptions = {}): AgentMiddleware {
  checkOptions('iterationLogging', options, OPTIONS);
  const { logger = console, level = 'info', scheduler } = options;
  if (logger === null || (typeof logger !== 'object' && typeof logger !== 'function')) {
    throw new TypeError("iterationLogging: 'logger' must be an object with console-like info/debug/trace methods");
  }
  for (const method of LEVELS) {
    const fn = (logger as Record<string, unknown>)[method];
    if (fn !== undefined && typeof fn !== 'function') {
      throw new TypeError(`iterationLogging: 'logger.${method}' must be a function, got ${typeof fn}`);
    }
  }
  if (!LEVELS.includes(level)) {
    throw new TypeError(`iterationLogging: 'level' must be 'info', 'debug' or 'trace', got ${JSON.stringify(level)}`);
  }
  checkScheduler('iterationLogging', scheduler);
  const rank = LEVELS.indexOf(level);
  const info = logger.info ? (line: string) => logger.info?.(line) : undefined;
  const debug = rank >= 1 && logger.debug ? (line: string) => logger.debug?.(line) : undefined;
  // console.trace prints a stack trace after each line: a logger whose trace is the console's (the
  // console, a copy of it) gets its trace lines through its debug. Looked up per line, as the others
  // are: a logger may swap its methods when its level changes (pino does).
  const traceMethod = () => (logger.trace === console.trace ? 'debug' : 'trace');
  const trace = rank >= 2 && logger[traceMethod()] ? (line: string) => logger[traceMethod()]?.(line) : undefined;

  const middleware: AgentMiddleware = {
    name: 'iterationLogging',
    beforeIteration: mapContext((ctx) => {
      const now = (scheduler ?? ctx.scheduler).now();
      info?.(`Iteration ${ctx.iteration} starting (run ${ctx.runId})`);
      return ctx.updateState(IterationStart, () => ({ startedAt: now }));
    }),
    afterIteration: mapContext((ctx) => {
      const now = (scheduler ?? ctx.scheduler).now();
      const startedAt = ctx.state(IterationStart).startedAt ?? now;
      info?.(
        `Iteration ${ctx.iteration} completed in ${now - startedAt}ms (run ${ctx.runId}) - tool calls: ${toolCallCount(ctx.response)}, final: ${ctx.final}`,
      );
      // The start stays in the state: the next iteration's beforeIteration replaces it (one state
      // copy per iteration rather than two).
      return ctx;
    }),
  };
  if (!debug && !trace) return middleware;
  return {
    ...middleware,
    wrapModel: (ctx) => {
      // Logged when the call is made (subscribed), not when the chain is built: an outer wrapper
      // that sends another request through ctx.call() (contextEditing) leaves this chain unused.
      const { request } = ctx;
      return (source) =>
        defer(() => {
          debug?.(`Iteration ${ctx.iteration} model call (run ${ctx.runId}) - messages: ${request.messages.length}, tools: ${request.tools.length}`);
          trace?.(`Iteration ${ctx.iteration} instructions (run ${ctx.runId}): ${preview(request.instructions)}`);
          return source;
        });
    },
  };
}

/** `ctx.toolCalls.length` without the array that getter builds. */
function toolCallCount(response: Message | undefined): number {
  let count = 0;
  if (response) for (const part of response.content) if (part.type === 'tool-call') count++;
  return count;
}

function preview(instructions: string | undefined): string {
  if (instructions === undefined || instructions === '') return '(none)';
  return instructions.length > INSTRUCTIONS_PREVIEW_LENGTH ? `${instructions.slice(0, INSTRUCTIONS_PREVIEW_LENGTH)}…` : instructions;
}
