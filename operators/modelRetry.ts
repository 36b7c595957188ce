import { Observable, Subscriber, Subscription, type SchedulerAction, type SchedulerLike } from 'rxjs';
import { ModelError, toErrorInfo, type AgentMiddleware, type ModelCallContext, type ModelUpdate } from '../src/index';
import { LinkedSubscriber } from '../src/internal/linkedSubscriber';
import { backoffDelay, resolveBackoff, type Backoff, type BackoffOptions } from './internal/backoffDelay';
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
 * Semantics are those of rxjs `retry({ count: maxRetries, delay })` (+ `catchError` for
 * `'continue'`), but it is not built on them: every streamed delta crosses this wrapper, and
 * `retry`'s OperatorSubscriber costs three calls per delta (the base `next`, the try/catch closure,
 * the `next` handler) and `catchError` as many again. Measured on the S1 bench (100,000 deltas,
 * rxjs's ES5 CJS build under tsx) that was +16-19 ns/delta over a bare agent, this is +4-7: one
 * Subscriber per attempt forwards a delta with one call, and only its `error` does any work
 * (decide, emit `model-retry`, wait on the scheduler — the same single `schedule(…, delayMs)`
 * that `timer(delayMs, scheduler)` makes, so delays are exact in virtual time — and subscribe
 * the source again).
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
      const policy: RetryPolicy = { maxRetries, backoff, retryOn, continueOnFailure: onFailure === 'continue', scheduler: ownScheduler ?? ctx.scheduler, ctx };
      return (source) =>
        new Observable<ModelUpdate>((subscriber) => {
          // Per subscription (one model call): its own attempt count.
          new RetryingCall(source, subscriber, policy).subscribeAttempt();
        });
    },
  };
}

/** The settings of one `wrapModel` (one model call's context). */
interface RetryPolicy {
  readonly maxRetries: number;
  readonly backoff: Backoff;
  readonly retryOn: (error: unknown) => boolean;
  readonly continueOnFailure: boolean;
  readonly scheduler: SchedulerLike;
  readonly ctx: ModelCallContext;
}

/** One subscription to the wrapped call: its attempts, each a fresh {@link AttemptSubscriber}. */
class RetryingCall {
  /** Attempts made so far, the current one (or the one waited for) included. */
  private attempts = 1;
  private attempt: AttemptSubscriber | undefined = undefined;

  constructor(
    private readonly source: Observable<ModelUpdate>,
    private readonly downstream: Subscriber<ModelUpdate>,
    private readonly policy: RetryPolicy,
  ) {}

  /** Subscribes the source (again: the previous attempt is torn down first). */
  subscribeAttempt(): void {
    this.attempt?.unsubscribe();
    if (this.downstream.closed) return;
    const attempt = new AttemptSubscriber(this.downstream, this);
    this.attempt = attempt;
    this.source.subscribe(attempt);
  }

  /** The current attempt failed: emit `model-retry` and retry after the delay, or give up. */
  failed(error: unknown): void {
    const { policy, downstream } = this;
    let delayMs: number;
    try {
      if (this.attempts > policy.maxRetries || !policy.retryOn(error)) {
        this.giveUp(error);
        return;
      }
      const retry = this.attempts;
      delayMs = backoffDelay(policy.backoff, retry, error);
      this.attempts = retry + 1;
      policy.ctx.emit({ type: 'model-retry', iteration: policy.ctx.iteration, attempt: retry, error: toErrorInfo(error), delayMs });
    } catch (thrown) {
      // As rxjs `retry` does with a throwing `delay` callback: the call fails with what was thrown.
      this.giveUp(thrown);
      return;
    }
    // The delay is a child of downstream: unsubscribing during it cancels the retry. (`timer(delayMs,
    // scheduler)` would make this very `schedule` call.) A synchronous scheduler runs `resume` before
    // `schedule` returns; `wait` is closed by then and adding the spent action to it is harmless.
    const wait = new Subscription();
    downstream.add(wait);
    wait.add(policy.scheduler.schedule(resume, delayMs, { call: this, wait }));
  }

  /** The delay is over. */
  resume(wait: Subscription): void {
    this.downstream.remove(wait);
    wait.unsubscribe();
    this.subscribeAttempt();
  }

  /**
   * A downstream `next` threw: never retried; as with rxjs `retry` (+ `catchError`), the call
   * fails with it, or with `onFailure: 'continue'` ends with the failure message (a contract
   * breach downstream; mirrored only so that behaviour is exactly that of the rxjs composition).
   */
  downstreamThrew(error: unknown): void {
    // rxjs `retry(0)` is `identity` and `catchError` does not guard `next`: the throw propagates.
    if (this.policy.maxRetries === 0) throw error;
    this.giveUp(error);
  }

  /** No more attempts: fail the call, or (`onFailure: 'continue'`) end it with the failure message. */
  private giveUp(error: unknown): void {
    const { policy, downstream } = this;
    if (!policy.continueOnFailure) {
      downstream.error(error);
      return;
    }
    let message: string;
    try {
      policy.ctx.discardPartialResponse();
      message = giveUpText(this.attempts, errorMessage(error));
    } catch (thrown) {
      downstream.error(thrown);
      return;
    }
    if (!downstream.closed) downstream.next({ type: 'text-delta', text: message });
    if (!downstream.closed) downstream.next({ type: 'finish', reason: 'stop' });
    downstream.complete();
  }
}

interface Waiting {
  readonly call: RetryingCall;
  readonly wait: Subscription;
}

function resume(this: SchedulerAction<Waiting>, state?: Waiting): void {
  state!.call.resume(state!.wait);
}

/**
 * One attempt's subscriber: the per-delta hot path is a single forwarding call (`next` is
 * overridden, skipping the base class's `_next` hop); only `error` does anything else. Added to
 * the downstream subscriber, so unsubscribing downstream tears the attempt (and its source) down.
 */
class AttemptSubscriber extends LinkedSubscriber<ModelUpdate> {
  constructor(
    private readonly downstream: Subscriber<ModelUpdate>,
    private readonly call: RetryingCall,
  ) {
    super(downstream);
  }

  override next(update: ModelUpdate): void {
    if (this.isStopped) return;
    try {
      this.downstream.next(update);
    } catch (error) {
      this.call.downstreamThrew(error);
    }
  }

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.isStopped = true;
    try {
      this.call.failed(error);
    } finally {
      this.unsubscribe();
    }
  }
}
