import { Observable, Subscriber, asyncScheduler, type SchedulerAction, type SchedulerLike, type Subscription } from 'rxjs';
import { ModelTimeoutError, type AgentMiddleware, type ModelUpdate } from '../src/index';
import { checkOptions, checkScheduler, checkTimeoutMs } from './internal/backoff';

/** Options of {@link modelTimeout}. All in milliseconds; `Infinity` turns a limit off. */
export interface ModelTimeoutOptions {
  /** Longest wait from the call to its first update (default 30000). */
  firstTokenMs?: number;
  /** Longest wait between two updates, and from the last one to the end (default 30000). */
  idleMs?: number;
  /** Longest time for the whole call (default: no limit). */
  totalMs?: number;
  /** Runs the timers (default: the agent's scheduler). */
  scheduler?: SchedulerLike;
}

/**
 * Fails a model call that takes too long with a {@link ModelTimeoutError} (retryable, so a
 * `modelRetry` registered before it retries the call): no first update within `firstTokenMs`
 * (`No first token within <ms> ms`, kind `first-token`), no update for `idleMs` after the last
 * one (`No token for <ms> ms`, kind `idle`), or the call not finished within `totalMs`
 * (`Model call did not finish within <ms> ms`, kind `total`). The request is aborted
 * (unsubscribed) before the error is raised. An update arriving exactly at a limit is in time.
 *
 * Options and defaults: `firstTokenMs = 30000`, `idleMs = 30000`, `totalMs` = no limit
 * (`Infinity` turns a limit off), `scheduler` = the agent's.
 *
 * Cheap per streamed delta: no timer is rescheduled per token; one scheduled check re-arms
 * itself for the time left. In virtual time (`TestScheduler`) every limit is exact to the frame.
 * On the wall clock (asyncScheduler) the idle check does not read the clock per token, so an
 * idle timeout fires up to `idleMs / 20` (at most 1000 ms) late, never early; the first-token
 * and total limits stay exact. There the check runs at least every `idleMs / 20` ms while the call
 * is open, which lets a call shorter than that arm a single timer in all.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   middleware: [modelRetry(), modelTimeout({ firstTokenMs: 10_000, idleMs: 5_000, totalMs: 120_000 })],
 * });
 */
export function modelTimeout(options: ModelTimeoutOptions = {}): AgentMiddleware {
  const owner = 'modelTimeout';
  checkOptions(owner, options);
  const firstTokenMs = checkTimeoutMs(owner, 'firstTokenMs', options.firstTokenMs ?? 30000);
  const idleMs = checkTimeoutMs(owner, 'idleMs', options.idleMs ?? 30000);
  const totalMs = options.totalMs === undefined ? Infinity : checkTimeoutMs(owner, 'totalMs', options.totalMs);
  const ownScheduler = checkScheduler(owner, options.scheduler);

  return {
    name: 'modelTimeout',
    wrapModel: (ctx) => {
      const scheduler = ownScheduler ?? ctx.scheduler;
      return (source) =>
        new Observable<ModelUpdate>((subscriber) => {
          new TimeoutWatch(subscriber, scheduler, firstTokenMs, idleMs, totalMs).watch(source);
        });
    },
  };
}

/** The wall clock's `now` (shared by asyncScheduler, asapScheduler, queueScheduler): costly to read per delta. */
const wallClockNow = asyncScheduler.now;

/**
 * One call's timeouts: one scheduled check compares the deadlines when it fires and re-arms for
 * the time left. In virtual time, when a deadline is reached the check runs once more at the same
 * frame (after whatever else is due then), so an update arriving exactly at a limit is in time
 * whatever the order of the timers.
 *
 * The hot path (`next`) never allocates. With a virtual clock (TestScheduler, any scheduler whose
 * `now` is not the wall clock) it records `now()` per update, so every limit is exact to the
 * frame. On the wall clock, reading `Date.now()` per delta would cost more than the rest of the
 * pipeline, so it only counts updates: the check runs at least every `step` ms and takes
 * "now" as the last update's time when the count moved, so an idle timeout fires at most `step`
 * late, never early. The first-token and total limits are exact in both modes.
 */
class TimeoutWatch extends Subscriber<ModelUpdate> {
  private readonly precise: boolean;
  private readonly step: number;
  private start = 0;
  private last = 0;
  private count = 0;
  private counted = 0;
  private seen = false;
  private grace = false;
  private check: Subscription | undefined = undefined;
  /** When the armed check fires (scheduler time). */
  private armedFor = Infinity;

  constructor(
    downstream: Subscriber<ModelUpdate>,
    private readonly scheduler: SchedulerLike,
    private readonly firstTokenMs: number,
    private readonly idleMs: number,
    private readonly totalMs: number,
  ) {
    // A Subscriber subclass (rather than an observer object) spares a wrapper per delta; it is
    // added to `downstream`, so unsubscribing downstream unsubscribes it, and the source with it.
    super(downstream);
    this.precise = scheduler.now !== wallClockNow;
    this.step = idleMs === Infinity ? Infinity : Math.max(1, Math.min(1000, Math.ceil(idleMs / 20)));
  }

  watch(source: Observable<ModelUpdate>): void {
    this.start = this.scheduler.now();
    source.subscribe(this);
    this.arm();
  }

  /** Overrides `next` itself (not `_next`): one call per delta instead of two. */
  override next(update: ModelUpdate): void {
    if (this.isStopped) return;
    if (this.precise) this.last = this.scheduler.now();
    else this.count++;
    if (!this.seen) this.first();
    this.destination.next(update);
  }

  override unsubscribe(): void {
    this.disarm();
    super.unsubscribe();
  }

  /**
   * Once per call: from the first-token deadline to the idle one. The armed check is kept when it
   * comes soon enough (it re-arms itself for the idle deadline when it fires): on the wall clock it
   * is never more than `step` away, so a short call arms one timer in all.
   */
  private first(): void {
    this.seen = true;
    const now = this.scheduler.now();
    if (!this.precise) {
      this.last = now;
      this.counted = this.count;
    }
    const due = this.deadline();
    const wanted = this.precise || this.step > due - now ? due : now + this.step;
    if (!this.check || wanted < this.armedFor) this.arm();
  }

  private deadline(): number {
    const stall = this.seen ? this.last + this.idleMs : this.start + this.firstTokenMs;
    const total = this.start + this.totalMs;
    return stall < total ? stall : total;
  }

  /** (Re)schedules the one check for the current deadline. */
  private arm(): void {
    this.disarm();
    if (this.closed) return;
    this.grace = false;
    const now = this.scheduler.now();
    const wait = this.wait(this.deadline(), now);
    if (wait !== Infinity) {
      this.armedFor = now + wait;
      this.check = this.scheduler.schedule(fire, wait, this);
    }
  }

  /** Until the deadline; on the wall clock at most `step` (to see the updates that came meanwhile). */
  private wait(due: number, now: number): number {
    const left = due > now ? due - now : 0;
    return !this.precise && this.step < left ? this.step : left;
  }

  private disarm(): void {
    this.check?.unsubscribe();
    this.check = undefined;
    this.armedFor = Infinity;
  }

  /** The check fired: re-arm for the time left, or fail. */
  fired(action: SchedulerAction<TimeoutWatch>): void {
    if (this.closed) return;
    const now = this.scheduler.now();
    if (this.count !== this.counted) {
      // Wall clock: updates came since the last check (at most `step` ago), the last of them by now.
      this.counted = this.count;
      this.last = now;
    }
    const due = this.deadline();
    if (due > now) {
      this.grace = false;
      const wait = this.wait(due, now);
      this.armedFor = now + wait;
      this.check = wait === Infinity ? undefined : action.schedule(this, wait);
      return;
    }
    if (!this.grace && this.precise) {
      // Virtual time: let whatever else is due at this very frame run first.
      this.grace = true;
      this.armedFor = now;
      this.check = action.schedule(this, 0);
      return;
    }
    this.fail(now);
  }

  private fail(now: number): void {
    let error: ModelTimeoutError;
    if (!this.seen && this.start + this.firstTokenMs <= now) {
      error = new ModelTimeoutError(`No first token within ${this.firstTokenMs} ms`, 'first-token');
    } else if (this.seen && this.last + this.idleMs <= now) {
      error = new ModelTimeoutError(`No token for ${this.idleMs} ms`, 'idle');
    } else {
      error = new ModelTimeoutError(`Model call did not finish within ${this.totalMs} ms`, 'total');
    }
    const downstream = this.destination;
    this.unsubscribe(); // abort the request before anyone reacts to the error (a retry re-subscribes)
    downstream.error(error);
  }
}

function fire(this: SchedulerAction<TimeoutWatch>, watch?: TimeoutWatch): void {
  watch!.fired(this);
}
