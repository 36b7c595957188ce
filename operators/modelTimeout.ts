import { Observable, Subscriber, type SchedulerAction, type SchedulerLike, type Subscription } from 'rxjs';
import { ModelTimeoutError, type AgentMiddleware, type ModelUpdate } from '../src/index';
import { LinkedSubscriber } from '../src/internal/linkedSubscriber';
import { checkOptions, checkScheduler, optionNames } from './internal/checkOptions';
import { checkTimeoutMs } from '../src/internal/timers';

/** Options of {@link modelTimeout}. All in milliseconds; `Infinity` turns a limit off. */
export interface ModelTimeoutOptions {
  /** Longest wait from the call to its first update (default 30000). */
  firstTokenMs?: number;
  /** Longest wait between two updates, and from the last one to the end (default 30000). */
  idleMs?: number;
  /** Longest time for the whole call (default: no limit). */
  totalMs?: number;
  /**
   * How the idle limit is watched. `'sampled'` (default): no clock read per update; one check per
   * scheduler looks at the open calls at least every `idleMs / 20` ms (at most 1000), so an idle
   * timeout fires up to that much late, never early. `'exact'`: the scheduler's clock is read on
   * every update, so the idle limit is exact to the frame.
   */
  idleCheck?: 'sampled' | 'exact';
  /** Runs the timers (default: the agent's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link ModelTimeoutOptions}: any other is refused. */
const OPTIONS = optionNames<ModelTimeoutOptions>({ firstTokenMs: true, idleMs: true, totalMs: true, idleCheck: true, scheduler: true });

/**
 * Fails a model call that takes too long with a {@link ModelTimeoutError} (retryable, so a
 * `modelRetry` registered before it retries the call): no first update within `firstTokenMs`
 * (`No first token within <ms> ms`, kind `first-token`), no update for `idleMs` after the last
 * one (`No token for <ms> ms`, kind `idle`), or the call not finished within `totalMs`
 * (`Model call did not finish within <ms> ms`, kind `total`). The request is aborted
 * (unsubscribed) before the error is raised. An update arriving exactly at a limit is in time
 * (with `idleCheck: 'sampled'`, when it is not queued behind the check due at that same instant).
 *
 * Cheap per streamed delta: no timer is rescheduled per token; a scheduled check re-arms itself
 * for the time left. The first-token and total limits are exact to the frame. How the idle limit
 * is watched is `idleCheck`'s choice, the same on every scheduler, virtual or not (a marble test
 * sees what production does). `'sampled'` (default) counts updates and never reads the clock per
 * update, so an idle timeout fires up to `idleMs / 20` (at most 1000) ms late, never early; the
 * open calls of one `modelTimeout` on one scheduler share one check, so an agent's back-to-back
 * model calls arm one timer between them, and once no call is open a microtask stops it (nothing
 * holds the process open). `'exact'` reads the scheduler's clock on every update and gives each
 * call its own check, every limit exact to the frame: what a marble test of the idle limit wants;
 * on the wall clock that read is costly (S1 bench: 1.7-1.9× the floor, against 1.4× sampled).
 *
 * Options and defaults: `firstTokenMs = 30000`, `idleMs = 30000`, `totalMs` = no limit
 * (`Infinity` turns a limit off), `idleCheck = 'sampled'` (or `'exact'`), `scheduler` = the
 * agent's.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   middleware: [modelRetry(), modelTimeout({ firstTokenMs: 10_000, idleMs: 5_000, totalMs: 120_000 })],
 * });
 */
export function modelTimeout(options: ModelTimeoutOptions = {}): AgentMiddleware {
  const owner = 'modelTimeout';
  checkOptions(owner, options, OPTIONS);
  const firstTokenMs = checkTimeoutMs(owner, 'firstTokenMs', options.firstTokenMs ?? 30000);
  const idleMs = checkTimeoutMs(owner, 'idleMs', options.idleMs ?? 30000);
  const totalMs = options.totalMs === undefined ? Infinity : checkTimeoutMs(owner, 'totalMs', options.totalMs);
  const ownScheduler = checkScheduler(owner, options.scheduler);
  const idleCheck = options.idleCheck ?? 'sampled';
  if (idleCheck !== 'sampled' && idleCheck !== 'exact') {
    throw new TypeError(`modelTimeout: idleCheck must be 'sampled' or 'exact', got ${JSON.stringify(idleCheck)}`);
  }
  const step = idleMs === Infinity ? Infinity : Math.max(1, Math.min(1000, Math.ceil(idleMs / 20)));
  const limits: Limits = { firstTokenMs, idleMs, totalMs, step };
  // Sampled: one ticker per scheduler checks every open call of this instance.
  const tickers = new WeakMap<SchedulerLike, SharedTicker>();

  return {
    name: 'modelTimeout',
    wrapModel: (ctx) => {
      const scheduler = ownScheduler ?? ctx.scheduler;
      let ticker: SharedTicker | undefined;
      if (idleCheck === 'sampled') {
        ticker = tickers.get(scheduler);
        if (!ticker) tickers.set(scheduler, (ticker = new SharedTicker(scheduler)));
      }
      return (source) =>
        new Observable<ModelUpdate>((subscriber) => {
          new TimeoutWatch(subscriber, scheduler, limits, ticker).watch(source);
        });
    },
  };
}

interface Limits {
  readonly firstTokenMs: number;
  readonly idleMs: number;
  readonly totalMs: number;
  /** Sampled: the longest time between two checks of an open call. */
  readonly step: number;
}

// Hand-built: rxjs timeout({ first, each, with }) reschedules a timer per delta and measured S1 8.3× the floor (bench s1 A/B, 2026-11-27).
/**
 * One call's timeouts. The hot path (`next`) never allocates.
 *
 * Exact: the call has its own scheduled check, which compares the deadlines when it fires and
 * re-arms for the time left; `next` records `now()` per update, so every limit is exact to the
 * frame. When a deadline is reached the check runs once more at the same frame (after whatever
 * else is due then), so an update arriving exactly at a limit is in time whatever the order of the
 * timers.
 *
 * Sampled: `next` only counts updates, and the calls share one {@link SharedTicker}: it checks each
 * call at least every `step` ms, taking "now" as the last update's time when the count moved, so an
 * idle timeout fires at most `step` late, never early. The first-token and total limits are exact
 * in both modes.
 */
class TimeoutWatch extends LinkedSubscriber<ModelUpdate> {
  private start = 0;
  private last = 0;
  private count = 0;
  private counted = 0;
  private seen = false;
  /** Subscribe has returned: the checks are set up (an update during subscribe leaves that to `watch`). */
  private watching = false;
  private grace = false;
  /** Exact: this call's own check, and when it fires (scheduler time). */
  private check: Subscription | undefined = undefined;
  private armedFor = Infinity;

  constructor(
    downstream: Subscriber<ModelUpdate>,
    private readonly scheduler: SchedulerLike,
    private readonly limits: Limits,
    private readonly ticker: SharedTicker | undefined,
  ) {
    // A Subscriber subclass (rather than an observer object) spares a wrapper per delta; it is
    // added to `downstream`, so unsubscribing downstream unsubscribes it, and the source with it.
    super(downstream);
  }

  watch(source: Observable<ModelUpdate>): void {
    const now = this.scheduler.now();
    this.start = now;
    source.subscribe(this);
    // A stream that ended while subscribing needs no check at all.
    if (this.closed) return;
    this.watching = true;
    if (this.ticker) this.ticker.add(this, this.nextCheck(now));
    else this.arm(now);
  }

  /** Overrides `next` itself (not `_next`): one call per delta instead of two. */
  override next(update: ModelUpdate): void {
    if (this.isStopped) return;
    if (this.ticker) this.count++;
    else this.last = this.scheduler.now();
    if (!this.seen) this.first();
    this.destination.next(update);
  }

  override unsubscribe(): void {
    if (this.closed) return;
    if (this.ticker) this.ticker.delete(this);
    else this.disarm();
    super.unsubscribe();
  }

  /**
   * Once per call: from the first-token deadline to the idle one. Sampled, the ticker looks again
   * within `step` anyway; exact, the check is moved only when the idle deadline comes before it
   * (it re-arms itself for the idle deadline when it fires).
   */
  private first(): void {
    this.seen = true;
    const now = this.scheduler.now();
    this.last = now;
    this.counted = this.count;
    if (!this.watching) return;
    if (this.ticker) {
      // Usually a no-op (the ticker looks within `step`); not when no deadline was finite before.
      this.ticker.add(this, this.nextCheck(now));
      return;
    }
    if (!this.check || this.deadline() < this.armedFor) this.arm(now);
  }

  private deadline(): number {
    const { firstTokenMs, idleMs, totalMs } = this.limits;
    const stall = this.seen ? this.last + idleMs : this.start + firstTokenMs;
    const total = this.start + totalMs;
    return stall < total ? stall : total;
  }

  /** Sampled: when the ticker should look at this call next (its deadline, at most `step` away). */
  private nextCheck(now: number): number {
    const due = this.deadline();
    if (due === Infinity) return due;
    return due - now > this.limits.step ? now + this.limits.step : due;
  }

  /** Exact: (re)schedules this call's check for its deadline. */
  private arm(now: number): void {
    this.disarm();
    if (this.closed) return;
    this.grace = false;
    const due = this.deadline();
    if (due === Infinity) return;
    this.armedFor = due;
    this.check = this.scheduler.schedule(fire, due > now ? due - now : 0, this);
  }

  private disarm(): void {
    this.check?.unsubscribe();
    this.check = undefined;
    this.armedFor = Infinity;
  }

  /** Exact: the check fired; re-arm for the time left, or fail. */
  fired(action: SchedulerAction<TimeoutWatch>): void {
    if (this.closed) return;
    const now = this.scheduler.now();
    const due = this.deadline();
    if (due > now) {
      this.grace = false;
      this.armedFor = due;
      this.check = action.schedule(this, due - now);
      return;
    }
    if (!this.grace) {
      // Let whatever else is due at this very frame run first.
      this.grace = true;
      this.armedFor = now;
      this.check = action.schedule(this, 0);
      return;
    }
    this.fail(now);
  }

  /** Sampled: the ticker looks at this call; returns when to look next (Infinity: failed or closed). */
  checkAt(now: number): number {
    if (this.closed) return Infinity;
    if (this.count !== this.counted) {
      // Updates came since the last look (at most `step` ago), the last of them by now.
      this.counted = this.count;
      this.last = now;
    }
    if (this.deadline() > now) return this.nextCheck(now);
    this.fail(now);
    return Infinity;
  }

  private fail(now: number): void {
    const { firstTokenMs, idleMs, totalMs } = this.limits;
    let error: ModelTimeoutError;
    if (!this.seen && this.start + firstTokenMs <= now) {
      error = new ModelTimeoutError(`No first token within ${firstTokenMs} ms`, 'first-token');
    } else if (this.seen && this.last + idleMs <= now) {
      error = new ModelTimeoutError(`No token for ${idleMs} ms`, 'idle');
    } else {
      error = new ModelTimeoutError(`Model call did not finish within ${totalMs} ms`, 'total');
    }
    const downstream = this.destination;
    try {
      this.unsubscribe(); // abort the request before anyone reacts to the error (a retry re-subscribes)
    } finally {
      downstream.error(error);
    }
  }
}

function fire(this: SchedulerAction<TimeoutWatch>, watch?: TimeoutWatch): void {
  watch!.fired(this);
}

/** Where the ticker's sweep is queued (a microtask). */
const RESOLVED = /* @__PURE__ */ Promise.resolve();

/**
 * Sampled: one timer for every open call of one `modelTimeout` on one scheduler. A call joins
 * without touching the timer unless it needs a look sooner than the timer fires; a call that ends
 * leaves the timer alone, and when none is left a microtask stops it, unless another call joined
 * meanwhile (a loop's next model call follows the previous one in the same task): back-to-back
 * calls arm one timer between them, not one each.
 */
class SharedTicker {
  private readonly watches = new Set<TimeoutWatch>();
  private action: Subscription | undefined = undefined;
  private armedFor = Infinity;
  private sweepQueued = false;
  private readonly sweepLater = () => this.sweep();

  constructor(private readonly scheduler: SchedulerLike) {}

  add(watch: TimeoutWatch, lookAt: number): void {
    this.watches.add(watch);
    this.forgetClosedAction();
    if (lookAt < this.armedFor) this.arm(lookAt, this.scheduler.now());
  }

  delete(watch: TimeoutWatch): void {
    this.watches.delete(watch);
    this.forgetClosedAction();
    if (this.watches.size === 0 && this.action && !this.sweepQueued) {
      this.sweepQueued = true;
      // Not queueMicrotask: Node makes an AsyncResource and a bound function for each (about 100 ns more per call).
      void RESOLVED.then(this.sweepLater);
    }
  }

  /** An action closed from outside (rxjs closes the actions queued behind one that throws) is gone. */
  private forgetClosedAction(): void {
    if (this.action?.closed) {
      this.action = undefined;
      this.armedFor = Infinity;
    }
  }

  private sweep(): void {
    this.sweepQueued = false;
    if (this.watches.size > 0 || !this.action) return;
    this.action.unsubscribe();
    this.action = undefined;
    this.armedFor = Infinity;
  }

  private arm(at: number, now: number): void {
    this.armedFor = at;
    const wait = at > now ? at - now : 0;
    // Rescheduling an action with the delay it had keeps its interval: no timer churn. (rxjs's
    // schedulers return the action itself; anything else is replaced by a new one.)
    const action = this.action as Partial<SchedulerAction<SharedTicker>> | undefined;
    if (action && typeof action.schedule === 'function') {
      this.action = action.schedule(this, wait);
    } else {
      this.action?.unsubscribe();
      this.action = this.scheduler.schedule(tick, wait, this);
    }
  }

  /** The timer fired: look at every call (one that fails leaves the set), re-arm for the soonest. */
  fired(action: SchedulerAction<SharedTicker>): void {
    this.action = action;
    const now = this.scheduler.now();
    let soonest = Infinity;
    let thrown: { error: unknown } | undefined;
    for (const watch of this.watches) {
      let at: number;
      try {
        at = watch.checkAt(now);
      } catch (error) {
        // One call's failing teardown must not stop the checks of the others.
        thrown ??= { error };
        continue;
      }
      if (at < soonest) soonest = at;
    }
    if (soonest === Infinity) {
      // Nothing to look at: the action ends without rescheduling (rxjs clears its interval).
      this.action = undefined;
      this.armedFor = Infinity;
    } else {
      this.armedFor = soonest;
      action.schedule(this, soonest > now ? soonest - now : 0);
    }
    // Thrown from a timer of its own, as it was when each call had one.
    if (thrown) this.scheduler.schedule(rethrow, 0, thrown.error);
  }
}

function rethrow(this: SchedulerAction<unknown>, error?: unknown): void {
  throw error;
}

function tick(this: SchedulerAction<SharedTicker>, ticker?: SharedTicker): void {
  ticker!.fired(this);
}
