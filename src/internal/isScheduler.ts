import type { SchedulerLike } from 'rxjs';

/**
 * Whether `value` is an rxjs scheduler: an object with `schedule` and `now` (what every option
 * named `scheduler` is checked with).
 *
 * @example
 * if (!isScheduler(options.scheduler)) throw new TypeError("'scheduler' must be an rxjs SchedulerLike");
 */
export function isScheduler(value: unknown): value is SchedulerLike {
  return (
    typeof value === 'object' && value !== null && typeof (value as SchedulerLike).schedule === 'function' && typeof (value as SchedulerLike).now === 'function'
  );
}
