import { MAX_TIMER_MS, checkTimeoutMs } from '../../src/internal/timers';

describe('checkTimeoutMs', () => {
  it.each([1, 1.5, MAX_TIMER_MS, Infinity])('takes %p in either mode', (ms) => {
    expect(checkTimeoutMs('op', 'ms', ms)).toBe(ms);
    expect(checkTimeoutMs('op', 'ms', ms, true)).toBe(ms);
  });

  it.each([0, -1, -Infinity])('refuses %p, unless a past deadline means "at once"', (ms) => {
    expect(() => checkTimeoutMs('op', 'ms', ms)).toThrow(
      new TypeError(`op: ms must be a number of milliseconds > 0 and at most ${MAX_TIMER_MS} (Infinity: off), got ${ms}`),
    );
    expect(checkTimeoutMs('op', 'ms', ms, true)).toBe(ms);
  });

  it.each([MAX_TIMER_MS + 1, NaN, '10', undefined, null])('refuses %p in either mode: a timer cannot hold it, or it is not a number', (ms) => {
    expect(() => checkTimeoutMs('op', 'ms', ms)).toThrow(/^op: ms must be a number of milliseconds > 0 /);
    expect(() => checkTimeoutMs('op', 'ms', ms, true)).toThrow(
      /^op: ms must be a number of milliseconds at most 2147483647 \(0 or less: at once, Infinity: off\), got /,
    );
  });
});
