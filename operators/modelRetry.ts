import { Observable, type SchedulerAction, type SchedulerLike, type Subscriber } from 'rxjs';
import { ModelError, toErrorInfo, type AgentMiddleware, type ModelCallContext, type ModelUpdate } from '../src/index';
import { LinkedSubscriber } from '../src/internal/linkedSubscriber';
import { BACKOFF_OPTION_NAMES, backoffDelay, resolveBackoff, type Backoff, type BackoffOptions } from './internal/backoffDelay';
import { checkFunction, checkMaxRetries, checkOptions, checkScheduler, optionNames } from './internal/checkOptions';
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

/** The keys of {@link ModelRetryOptions}: any other is refused. */
const OPTIONS = optionNames<ModelRetryOptions>({
  maxRetries: true,
  ...BACKOFF_OPTION_NAMES,
  retryOn: true,
  onFailure: true,
  scheduler: true,
});

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
 * It behaves as rxjs `retry({ count: maxRetries, delay })` with the delay scheduled on the
 * scheduler (exact in virtual time), and a `catchError` for `'continue'`: each subscription counts
 * its own attempts, and unsubscribing during a delay cancels it. A `retryOn` that throws fails the
 * call with what it threw, as a throwing `delay` does in `retry`.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   middleware: [modelRetry({ maxRetries: 3, initialDelayMs: 500 }), modelTimeout({ firstTokenMs: 10_000 })],
 * });
 */
export function modelRetry(options: ModelRetryOptions = {}): AgentMiddleware {
  const owner = 'modelRetry';
  checkOptions(owner, options, OPTIONS);
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
      // Nothing to retry and nothing to catch: the stream as it is.
      if (maxRetries === 0 && onFailure === 'error') return (source) => source;
      const policy: RetryPolicy = { maxRetries, backoff, retryOn, onFailure, ctx, scheduler: ownScheduler ?? ctx.scheduler };
      return (source) => new RetryingCall(source, policy);
    },
  };
}

/** What one model call's retries need, made once per call. */
interface RetryPolicy {
  readonly maxRetries: number;
  readonly backoff: Backoff;
  readonly retryOn: (error: unknown) => boolean;
  readonly onFailure: 'error' | 'continue';
  readonly ctx: ModelCallContext;
  readonly scheduler: SchedulerLike;
}

// Hand-built: rxjs retry({ count, delay }) made 1.7 KB of closures and subscribers per model call, 11% of S2's 15.5 KB per iteration (alloc.mjs 500 10, 2026-11-27).
/**
 * The retried stream of one model call: each subscription is a run of attempts, with its own count
 * (as rxjs `retry` keeps it per subscription), so a call subscribed again starts afresh.
 */
class RetryingCall extends Observable<ModelUpdate> {
  constructor(
    private readonly attempted: Observable<ModelUpdate>,
    private readonly policy: RetryPolicy,
  ) {
    super();
  }

  /** @internal rxjs 7's subscribe calls `_subscribe`. */
  protected _subscribe(subscriber: Subscriber<ModelUpdate>): void {
    new Attempt(subscriber, this.attempted, this.policy, 1).start();
  }
}

/**
 * One attempt: forwards the model's updates; on an error, either schedules the next attempt (after
 * `model-retry`) or gives up. It is added to the downstream subscriber, so unsubscribing that ends
 * the attempt, and a pending delay with it.
 */
class Attempt extends LinkedSubscriber<ModelUpdate> {
  constructor(
    downstream: Subscriber<ModelUpdate>,
    private readonly attempted: Observable<ModelUpdate>,
    private readonly policy: RetryPolicy,
    private readonly attempt: number,
  ) {
    super(downstream);
  }

  start(): void {
    this.attempted.subscribe(this);
  }

  /** Overrides `next` itself (not `_next`): one call per delta instead of two. */
  override next(update: ModelUpdate): void {
    if (!this.isStopped) this.destination.next(update);
  }

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.isStopped = true;
    const downstream = this.destination as Subscriber<ModelUpdate>;
    let delayMs: number | undefined;
    let failure = error;
    try {
      delayMs = this.retryDelay(error);
    } catch (thrown) {
      failure = thrown; // a throwing retryOn fails the call with what it threw
    }
    // The failed attempt is torn down before the next one starts (also on a synchronous scheduler).
    this.unsubscribe();
    if (delayMs === undefined) return this.giveUp(downstream, failure);
    // The consumer unsubscribed on `model-retry`: no next attempt (a synchronous scheduler would
    // start it inside `schedule`, before the attempt could hold its delay and so cancel it).
    if (downstream.closed) return;
    const next = new Attempt(downstream, this.attempted, this.policy, this.attempt + 1);
    // The next attempt holds its delay: unsubscribing downstream cancels it, starting it replaces it.
    next.add(this.policy.scheduler.schedule(startAttempt, delayMs, next));
  }

  /** The delay before the next attempt (after emitting `model-retry`), or undefined to give up. */
  private retryDelay(error: unknown): number | undefined {
    const { maxRetries, retryOn, backoff, ctx } = this.policy;
    const retry = this.attempt; // attempt n failed: the next one is retry n
    if (retry > maxRetries || !retryOn(error)) return undefined;
    const delayMs = backoffDelay(backoff, retry, error);
    ctx.emit({ type: 'model-retry', iteration: ctx.iteration, attempt: retry, error: toErrorInfo(error), delayMs });
    return delayMs;
  }

  /** Every attempt failed, or the error is not retried: fail the call, or answer that it failed. */
  private giveUp(downstream: Subscriber<ModelUpdate>, error: unknown): void {
    if (this.policy.onFailure === 'error') return downstream.error(error);
    this.policy.ctx.discardPartialResponse();
    downstream.next({ type: 'text-delta', text: giveUpText(this.attempt, errorMessage(error)) });
    downstream.next({ type: 'finish', reason: 'stop' });
    downstream.complete();
  }
}

/** The scheduled start of an attempt after its delay. */
function startAttempt(this: SchedulerAction<Attempt>, attempt: Attempt | undefined): void {
  attempt!.remove(this);
  attempt!.start();
}
