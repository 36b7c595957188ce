import { show } from './show';

/**
 * The longest delay a timer takes: Node and browsers run a longer one at once (Node with a
 * TimeoutOverflowWarning), so every delay option is checked or capped against it.
 *
 * @example
 * if (ms > MAX_TIMER_MS) throw new TypeError(`ms must be at most ${MAX_TIMER_MS}`);
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Validates a timeout in ms: a number > 0, at most {@link MAX_TIMER_MS} (`Infinity` turns the
 * timeout off). With `pastIsNow`, 0 or less is allowed too: a deadline already past, which
 * expires at once.
 */
export function checkTimeoutMs(owner: string, name: string, value: unknown, pastIsNow = false): number {
  if (typeof value !== 'number' || Number.isNaN(value) || (value <= 0 && !pastIsNow) || (value > MAX_TIMER_MS && value !== Infinity)) {
    const range = pastIsNow ? `at most ${MAX_TIMER_MS} (0 or less: at once, ` : `> 0 and at most ${MAX_TIMER_MS} (`;
    throw new TypeError(`${owner}: ${name} must be a number of milliseconds ${range}Infinity: off), got ${show(value)}`);
  }
  return value;
}

/**
 * Validates a period or duration in ms that runs a timer and has no "off" of Infinity (a lease
 * renewed every third of it, a sweep interval): a finite number from `min` to {@link MAX_TIMER_MS}.
 * `note` says what a special value means (e.g. `' (0: never)'`).
 *
 * @example
 * checkDelayMs('createAgent', "'leaseMs'", leaseMs, 1); // 1e10 throws: a timer cannot hold it
 */
export function checkDelayMs(owner: string, name: string, value: unknown, min: number, note = ''): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > MAX_TIMER_MS) {
    throw new TypeError(`${owner}: ${name} must be a number of ms from ${min} to ${MAX_TIMER_MS}${note}, got ${show(value)}`);
  }
  return value;
}
