import { backoffDelay, DEFAULT_BACKOFF, resolveBackoff } from '../../../operators/internal/backoffDelay';

describe('backoffDelay', () => {
  const backoff = resolveBackoff('test', { jitter: 0 });
  it('doubles from 1000 ms by default and caps at 60000 ms', () => {
    expect([1, 2, 3, 4, 7, 8].map((n) => backoffDelay(backoff, n, new Error('x')))).toEqual([1000, 2000, 4000, 8000, 60000, 60000]);
  });
  it('spreads by ±jitter: random 0 is -25 %, random →1 is +25 %', () => {
    expect(backoffDelay(resolveBackoff('t', { random: () => 0 }), 2, undefined)).toBe(1500);
    expect(backoffDelay(resolveBackoff('t', { random: () => 0.5 }), 2, undefined)).toBe(2000);
    expect(backoffDelay(resolveBackoff('t', { random: () => 0.9999999 }), 2, undefined)).toBe(2500);
  });
  it('uses a usable retryAfterMs as is, capped', () => {
    expect(backoffDelay(backoff, 3, { retryAfterMs: 0 })).toBe(0);
    expect(backoffDelay(backoff, 3, { retryAfterMs: 70000 })).toBe(60000);
    expect(backoffDelay(backoff, 1, { retryAfterMs: -1 })).toBe(1000);
    expect(backoffDelay(backoff, 1, { retryAfterMs: Number.NaN })).toBe(1000);
  });
  it('never exceeds the longest timer delay (2147483647 ms), even with maxDelayMs Infinity', () => {
    const unbounded = resolveBackoff('t', { jitter: 0, maxDelayMs: Infinity });
    expect(backoffDelay(unbounded, 40, new Error('x'))).toBe(2147483647);
    expect(backoffDelay(unbounded, 1, { retryAfterMs: 1e12 })).toBe(2147483647);
  });
});

describe('resolveBackoff', () => {
  it('fills the defaults: 1000 ms, factor 2, at most 60000 ms, ±25 %', () => {
    expect(resolveBackoff('t', {})).toEqual({ ...DEFAULT_BACKOFF, random: Math.random });
    expect(DEFAULT_BACKOFF).toEqual({ initialDelayMs: 1000, backoffFactor: 2, maxDelayMs: 60000, jitter: 0.25 });
  });

  it('refuses a bad option with a TypeError naming the operator and the option', () => {
    expect(() => resolveBackoff('op', { initialDelayMs: -1 })).toThrow(new TypeError('op: initialDelayMs must be a finite number >= 0, got -1'));
    expect(() => resolveBackoff('op', { backoffFactor: Infinity })).toThrow(new TypeError('op: backoffFactor must be a finite number > 0, got Infinity'));
    expect(() => resolveBackoff('op', { maxDelayMs: Number.NaN })).toThrow(new TypeError('op: maxDelayMs must be a number >= 0, got NaN'));
    expect(() => resolveBackoff('op', { jitter: -0.1 })).toThrow(new TypeError('op: jitter must be a number between 0 and 1, got -0.1'));
    expect(() => resolveBackoff('op', { random: 0.5 as never })).toThrow(/^op: random must be a function/);
    expect(resolveBackoff('op', { maxDelayMs: Infinity }).maxDelayMs).toBe(Infinity);
  });
});
