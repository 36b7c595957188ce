import { Observable, timer, type SchedulerLike, type Subscription } from 'rxjs';
import { settle } from '../internal/settle';
import { show } from '../internal/show';
import { MAX_TIMER_MS } from '../internal/timers';
import { SessionBusyError } from './errors';
import type { SessionStore } from './sessionStore';

/** The lease half of a {@link SessionStore}. */
export type SessionLeases = Pick<SessionStore, 'acquireSession' | 'releaseSession' | 'sessionReleases'>;

/**
 * Takes the session's lease for `owner`, waiting up to `waitMs` for the run holding it: tries again
 * when the store announces a release (no polling) and when the holder's lease would expire. Emits
 * once and completes when the lease is held; errors with {@link SessionBusyError} when the wait is
 * over, or with the store's error. Every timer runs on `scheduler` (marble-testable with a store
 * that answers at once). A lease taken after the caller left is released at once.
 *
 * @example
 * claimSession(store, 'user-42', runId, 30_000, 30_000, asyncScheduler).subscribe(() => load());
 */
export function claimSession(store: SessionLeases, id: string, owner: string, ttlMs: number, waitMs: number, scheduler: SchedulerLike): Observable<void> {
  return new Observable<void>((subscriber) => {
    let done = false;
    let trying = false;
    let again = false;
    let holder: string | undefined;
    let retry: Subscription | undefined;
    let deadline: Subscription | undefined;
    const started = scheduler.now();
    const busy = () => {
      if (done) return;
      done = true;
      subscriber.error(new SessionBusyError(id, holder, waitMs));
    };
    const giveBack = () => settle(() => store.releaseSession(id, owner), noop, noop);
    const attempt = (): void => {
      if (done) return;
      if (trying) {
        again = true;
        return;
      }
      trying = true;
      settle(
        () => store.acquireSession(id, owner, ttlMs),
        (claim) => {
          trying = false;
          if (done) {
            if (claim.acquired) giveBack(); // taken after the caller left
            return;
          }
          if (claim.acquired) {
            done = true;
            subscriber.next();
            return subscriber.complete();
          }
          holder = claim.lease.owner;
          const waited = scheduler.now() - started;
          if (waited >= waitMs) return busy(); // no time left to wait (sessionWaitMs 0: at once)
          // The deadline is set by the first refusal: a session taken at once costs no timer.
          if (!deadline && waitMs !== Infinity) deadline = timer(waitMs - waited, scheduler).subscribe(busy);
          if (again) {
            again = false;
            return attempt();
          }
          // Unless a release is announced first, try again when the holder's lease would expire.
          retry?.unsubscribe();
          retry = undefined;
          const delay = claim.lease.expiresAt - scheduler.now();
          if (delay < MAX_DELAY_MS) retry = timer(Math.max(1, delay), scheduler).subscribe(attempt);
        },
        (error) => {
          trying = false;
          if (done) return;
          done = true;
          subscriber.error(error);
        },
      );
    };
    const releases = store.sessionReleases(id).subscribe({
      next: attempt,
      error: (error: unknown) => {
        if (done) return;
        done = true;
        subscriber.error(error);
      },
    });
    return () => {
      done = true;
      deadline?.unsubscribe();
      releases.unsubscribe();
      retry?.unsubscribe();
    };
  });
}

function noop(): void {}

/** setTimeout's longest delay (a lease that never expires, or expires later, is not waited for with a timer). */
const MAX_DELAY_MS = 2_147_483_647;

/** @internal Checks a `sessionWaitMs` option: ms from 0 to setTimeout's longest delay, or Infinity. */
export function checkSessionWait(where: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0 || (value > MAX_TIMER_MS && value !== Infinity)) {
    throw new TypeError(`${where}: 'sessionWaitMs' must be a number of ms from 0 to ${MAX_TIMER_MS}, or Infinity, got ${show(value)}`);
  }
}
