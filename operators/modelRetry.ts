import { catchError, defer, of, retry, throwError, timer, type SchedulerLike } from 'rxjs';
import { ModelError, toErrorInfo, type AgentMiddleware, type ModelUpdate } from '../src/index';
import { backoffDelay, resolveBackoff, type BackoffOptions } from './internal/backoffDelay';
import { checkFunction, checkMaxRetries, checkOptions, checkScheduler } from './internal/checkOptions';
import { isNetworkError } from './internal/isNetworkError';
import { errorMessage } from '../src/internal/errorMessage';
import { giveUpText } from './internal/modelGiveUp';

/** Options of {@link modelRetry}. */
export interface ModelRetryOptions extends BackoffOptions {
  /** Retries after the first attempt (default 2, so at most 3 attempts). */
  maxRetries?: number;
  /** Whether an error is worth another attempt (default: `ModelError.retryable`, or a network error). */
  retryOn?: (error: unknown) => boolean;
  /**
   * When every attempt failed (or the error is not retryable): `'error'` fails the run with the
   * last error (default); `'continue'` ends the iteration with the assistant message
   * `Model call failed after N attempts: <message>` and the run completes.
   */
  onFailure?: 'error' | 'continue';
  /** Runs the delays (default: the agent's scheduler). */
  scheduler?: SchedulerLike;
}

/**
 * The default `retryOn` of {@link modelRetry}: a {@link ModelError} says itself whether it is
 * `retryable` (429, 5xx, timeouts, dropped connections; a 400 is not); other errors are retried
 * only when they are network failures (ECONNRESET, `fetch failed`…).
 */
export function isRetryableModelError(error: unknown): boolean {
  if (error instanceof ModelError) return error.retryable;
  return isNetworkError(error);
}

/**
 * Retries a failed model call with exponential backoff.
 *
 * The delay before retry n is min(initialDelayMs · backoffFactor^(n-1), maxDelayMs) ± jitter; an
 * error's `retryAfterMs` (the server's `retry-after-ms` / `retry-after`) replaces it, capped by
 * maxDelayMs, without jitter. Each retry emits `model-retry { iteration, attempt, error, delayMs }`
 * (attempt = n) when the attempt fails, and the failed attempt's partial text is dropped from the
 * turn's text and messages. Put it before `modelTimeout` (outermost) so timeouts are retried.
 *
 * Options and defaults: `maxRetries = 2`, `initialDelayMs = 1000`, `backoffFactor = 2`,
 * `maxDelayMs = 60000`, `jitter = 0.25` (±25 %), `random = Math.random` (the jitter's
 * randomness), `retryOn` = {@link isRetryableModelError}, `onFailure = 'error'` (or `'continue'`:
 * the iteration ends with `Model call failed after N attempts: <message>` and the run completes,
 * also for a non-retryable error after 1 attempt), `scheduler` = the agent's.
 *
 * It is rxjs `retry({ count: maxRetries, delay })`, the delay a `timer` on the scheduler (exact in
 * virtual time), with `catchError` for `'continue'`. A `retryOn` that throws fails the call with
 * what it threw, as a throwing `delay` does in `retry`.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   middleware: [modelRetry({ maxRetries: 3, initialDelayMs: 500 }), modelTimeout({ firstTokenMs: 10_000 })],
 * });
 */
export function modelRetry(options: ModelRetryOptions = {}): AgentMiddleware {
  const owner = 'modelRetry';
  checkOptions(owner, options);
  const maxRetries = checkMaxRetries(owner, options.maxRetries ?? 2);
  const backoff = resolveBackoff(owner, options);
  const retryOn = checkFunction(owner, 'retryOn', options.retryOn) ?? isRetryableModelError;
  const onFailure = options.onFailure ?? 'error';
  if (onFailure !== 'error' && onFailure !== 'continue') {
    throw new TypeError(`modelRetry: onFailure must be 'error' or 'continue', got ${JSON.stringify(onFailure)}`);
  }
  const ownScheduler = checkScheduler(owner, options.scheduler);

  return {
    name: 'modelRetry',
    wrapModel: (ctx) => {
      // Nothing to retry and nothing to catch: the stream as it is (rxjs `retry(0)` is `identity`).
      if (maxRetries === 0 && onFailure === 'error') return (source) => source;
      const scheduler = ownScheduler ?? ctx.scheduler;
      // The stateless part of the retry, one per call; rxjs keeps each subscription's count itself.
      const retrying = (counted?: (attempts: number) => void) =>
        retry<ModelUpdate>({
          count: maxRetries,
          delay: (error: unknown, retryCount: number) => {
            if (!retryOn(error)) return throwError(() => error);
            const delayMs = backoffDelay(backoff, retryCount, error);
            counted?.(retryCount + 1);
            ctx.emit({ type: 'model-retry', iteration: ctx.iteration, attempt: retryCount, error: toErrorInfo(error), delayMs });
            return timer(delayMs, scheduler);
          },
        });
      // No count to keep per subscription: the operator itself, without a defer around it.
      if (onFailure === 'error') return retrying();
      return (source) =>
        defer(() => {
          // Per subscription (one model call): the attempts so far.
          let attempts = 1;
          return source.pipe(
            retrying((n) => (attempts = n)),
            catchError((error: unknown) => {
              ctx.discardPartialResponse();
              return of<ModelUpdate[]>({ type: 'text-delta', text: giveUpText(attempts, errorMessage(error)) }, { type: 'finish', reason: 'stop' });
            }),
          );
        });
    },
  };
}
