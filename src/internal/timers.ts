/**
 * The longest delay a timer takes: Node and browsers run a longer one at once (Node with a
 * TimeoutOverflowWarning), so every delay option is checked or capped against it.
 *
 * @example
 * if (ms > MAX_TIMER_MS) throw new TypeError(`ms must be at most ${MAX_TIMER_MS}`);
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;
