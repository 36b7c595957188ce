import { catchError, defer, retry, throwError, timer, type SchedulerLike } from 'rxjs';
import { ToolError, type AgentMiddleware } from '../src/index';
import { BACKOFF_OPTION_NAMES, backoffDelay, resolveBackoff, type BackoffOptions } from './internal/backoffDelay';
import { checkFunction, checkMaxRetries, checkOptions, checkScheduler, checkToolNames, optionNames } from './internal/checkOptions';
import { errorMessage } from '../src/internal/errorMessage';

/** Options of {@link toolRetry}. */
export interface ToolRetryOptions extends BackoffOptions {
  /** Retries after the first attempt (default 2, so at most 3 executions). */
  maxRetries?: number;
  /** Whether an error is worth another attempt (default: every error). */
  retryOn?: (error: unknown) => boolean;
  /** Only these tools are retried (default: every tool). */
  tools?: readonly string[];
  /** Runs the delays (default: the agent's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link ToolRetryOptions}: any other is refused. */
const OPTIONS = optionNames<ToolRetryOptions>({
  maxRetries: true,
  ...BACKOFF_OPTION_NAMES,
  retryOn: true,
  tools: true,
  scheduler: true,
});

/**
 * Runs a failing tool again with exponential backoff (rxjs `retry({ count, delay })`); each
 * attempt is a new execution with a fresh AbortSignal.
 *
 * The delay before retry n is min(initialDelayMs · backoffFactor^(n-1), maxDelayMs) ± jitter; an
 * error's `retryAfterMs` replaces it (capped by maxDelayMs, no jitter). When the last attempt
 * fails (or `retryOn` says no), the model reads the error result
 * `Tool '<name>' failed after N attempts: <message>` (N counts the first execution). Put it
 * before `toolTimeout` (outermost) so timeouts are retried.
 *
 * Options and defaults: `maxRetries = 2`, `initialDelayMs = 1000`, `backoffFactor = 2`,
 * `maxDelayMs = 60000`, `jitter = 0.25`, `random = Math.random`, `retryOn` = every error,
 * `tools` = every tool, `scheduler` = the agent's.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   tools: [getWeather, sendMail],
 *   middleware: [toolRetry({ tools: ['get_weather'], maxRetries: 3, initialDelayMs: 200 })],
 * });
 */
export function toolRetry(options: ToolRetryOptions = {}): AgentMiddleware {
  const owner = 'toolRetry';
  checkOptions(owner, options, OPTIONS);
  const maxRetries = checkMaxRetries(owner, options.maxRetries ?? 2);
  const backoff = resolveBackoff(owner, options);
  const retryOn = checkFunction(owner, 'retryOn', options.retryOn);
  const tools = checkToolNames(owner, options.tools);
  const ownScheduler = checkScheduler(owner, options.scheduler);

  return {
    name: 'toolRetry',
    wrapFunction: (ctx) => {
      if (tools && !tools.has(ctx.toolName)) return (source) => source;
      const scheduler = ownScheduler ?? ctx.scheduler;
      const toolName = ctx.toolName;
      return (source) =>
        defer(() => {
          // Per subscription (one call): the executions so far.
          let attempts = 1;
          return source.pipe(
            retry({
              count: maxRetries,
              delay: (error: unknown, retryCount: number) => {
                if (retryOn && !retryOn(error)) return throwError(() => error);
                attempts = retryCount + 1;
                return timer(backoffDelay(backoff, retryCount, error), scheduler);
              },
            }),
            catchError((error: unknown) => {
              throw new ToolError(`Tool '${toolName}' failed after ${attempts} attempts: ${errorMessage(error)}`, {
                cause: error,
              });
            }),
          );
        });
    },
  };
}
