import { show } from './show';

/**
 * The longest delay a timer takes: Node and browsers run a longer one at once (Node with a
 * TimeoutOverflowWarning), so every delay option is checked or capped against it.
 *
 * @example
 * if (ms > MAX_TIMER_MS) throw new TypeError(`ms must be at most ${MAX_TIMER_MS}`);
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Validates a timeout in ms: a number > 0, at most {@link MAX_TIMER_MS} (`Infinity` turns the timeout off). */
export function checkTimeoutMs(owner: string, name: string, value: unknown): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value <= 0 || (value > MAX_TIMER_MS && value !== Infinity)) {
    throw new TypeError(`${owner}: ${name} must be a number of milliseconds > 0 and at most ${MAX_TIMER_MS} (Infinity: off), got ${show(value)}`);
  }
  return value;
}
