import { throwError, timeout, type SchedulerLike } from 'rxjs';
import { ToolError, type AgentMiddleware } from '../src/index';
import { checkOptions, checkScheduler, checkToolNames, optionNames } from './internal/checkOptions';
import { checkTimeoutMs } from '../src/internal/timers';

/** Options of {@link toolTimeout}. */
export interface ToolTimeoutOptions {
  /** Longest run of one tool call, in milliseconds (default 30000). */
  ms?: number;
  /** Only these tools are limited (default: every tool). */
  tools?: readonly string[];
  /** Runs the timer (default: the agent's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link ToolTimeoutOptions}: any other is refused. */
const OPTIONS = optionNames<ToolTimeoutOptions>({ ms: true, tools: true, scheduler: true });

/**
 * A tool call that ran out of time. A {@link ToolError}, so the model reads its message as is
 * (`Tool '<name>' timed out after <ms> ms`) and a `toolRetry` registered before `toolTimeout`
 * retries it.
 */
export class ToolTimeoutError extends ToolError {
  override readonly name: string = 'ToolTimeoutError';
  constructor(
    readonly toolName: string,
    readonly ms: number,
  ) {
    super(`Tool '${toolName}' timed out after ${ms} ms`);
  }
}

/**
 * Limits how long a tool call may run. When `ms` pass first, the call is unsubscribed (so the
 * tool's `ctx.signal` aborts) and the model reads the error result
 * `Tool '<name>' timed out after <ms> ms` (a {@link ToolTimeoutError}: register `toolRetry` before
 * `toolTimeout` to retry timed-out calls).
 *
 * Options and defaults: `ms = 30000`, `tools` = every tool, `scheduler` = the agent's.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   tools: [search, fetchPage],
 *   middleware: [toolTimeout({ ms: 10_000, tools: ['fetch_page'] })],
 * });
 */
export function toolTimeout(options: ToolTimeoutOptions = {}): AgentMiddleware {
  const owner = 'toolTimeout';
  checkOptions(owner, options, OPTIONS);
  const ms = checkTimeoutMs(owner, 'ms', options.ms ?? 30000);
  const tools = checkToolNames(owner, options.tools);
  const ownScheduler = checkScheduler(owner, options.scheduler);

  return {
    name: 'toolTimeout',
    wrapFunction: (ctx) => {
      if ((tools && !tools.has(ctx.toolName)) || ms === Infinity) return (source) => source;
      const toolName = ctx.toolName;
      return timeout({
        first: ms,
        scheduler: ownScheduler ?? ctx.scheduler,
        with: () => throwError(() => new ToolTimeoutError(toolName, ms)),
      });
    },
  };
}
