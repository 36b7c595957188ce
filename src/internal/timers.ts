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
