/**
 * The exponential backoff of the retry operators (`modelRetry`, `toolRetry`): its options, their
 * validation and the delay before each retry. Pure functions, no rxjs, no module state.
 *
 * Delay before retry n (n = 1, 2, …): min(initialDelayMs · backoffFactor^(n-1), maxDelayMs), spread
 * by ±jitter (a fraction of it, drawn with `random`) and rounded to whole milliseconds. A
 * `retryAfterMs` carried by the error (a server's own advice, e.g. `retry-after-ms`) replaces
 * it, capped by maxDelayMs, with no jitter.
 */
import { show } from '../../src/internal/show';
import { MAX_TIMER_MS } from '../../src/internal/timers';

/** The backoff options common to the retry operators. */
export interface BackoffOptions {
  /** Delay before the first retry, in ms (default 1000). */
  initialDelayMs?: number;
  /** Each further retry waits this many times longer (default 2). */
  backoffFactor?: number;
  /** Upper bound of a delay, also of a server's `retryAfterMs` (default 60000). */
  maxDelayMs?: number;
  /** Spread of a delay, as a fraction in [0, 1]: 0.25 means ±25 % (default 0.25). */
  jitter?: number;
  /** The randomness of the jitter, a number in [0, 1) (default `Math.random`). */
  random?: () => number;
}

/** The keys of {@link BackoffOptions}, for the option lists of the operators that take them. */
export const BACKOFF_OPTION_NAMES: { readonly [K in keyof BackoffOptions]-?: true } = {
  initialDelayMs: true,
  backoffFactor: true,
  maxDelayMs: true,
  jitter: true,
  random: true,
};

/** Validated backoff settings. */
export interface Backoff {
  readonly initialDelayMs: number;
  readonly backoffFactor: number;
  readonly maxDelayMs: number;
  readonly jitter: number;
  readonly random: () => number;
}

/** The documented defaults of the retry operators. */
export const DEFAULT_BACKOFF = {
  initialDelayMs: 1000,
  backoffFactor: 2,
  maxDelayMs: 60000,
  jitter: 0.25,
} as const;

/** Validates the backoff options of operator `owner`, throwing a TypeError naming the bad option. */
export function resolveBackoff(owner: string, options: BackoffOptions): Backoff {
  const initialDelayMs = options.initialDelayMs ?? DEFAULT_BACKOFF.initialDelayMs;
  const backoffFactor = options.backoffFactor ?? DEFAULT_BACKOFF.backoffFactor;
  const maxDelayMs = options.maxDelayMs ?? DEFAULT_BACKOFF.maxDelayMs;
  const jitter = options.jitter ?? DEFAULT_BACKOFF.jitter;
  const random = options.random ?? Math.random;
  if (!isFiniteNumber(initialDelayMs) || initialDelayMs < 0) {
    throw new TypeError(`${owner}: initialDelayMs must be a finite number >= 0, got ${show(initialDelayMs)}`);
  }
  if (!isFiniteNumber(backoffFactor) || backoffFactor <= 0) {
    throw new TypeError(`${owner}: backoffFactor must be a finite number > 0, got ${show(backoffFactor)}`);
  }
  if (typeof maxDelayMs !== 'number' || Number.isNaN(maxDelayMs) || maxDelayMs < 0) {
    throw new TypeError(`${owner}: maxDelayMs must be a number >= 0, got ${show(maxDelayMs)}`);
  }
  if (!isFiniteNumber(jitter) || jitter < 0 || jitter > 1) {
    throw new TypeError(`${owner}: jitter must be a number between 0 and 1, got ${show(jitter)}`);
  }
  if (typeof random !== 'function') {
    throw new TypeError(`${owner}: random must be a function returning a number in [0, 1), got ${show(random)}`);
  }
  return { initialDelayMs, backoffFactor, maxDelayMs, jitter, random };
}

/**
 * The delay before retry `retry` (1-based) after `error`: the error's `retryAfterMs` when it has
 * one (capped by maxDelayMs, no jitter), else the exponential backoff with jitter.
 */
export function backoffDelay(backoff: Backoff, retry: number, error: unknown): number {
  return Math.min(uncappedDelay(backoff, retry, error), MAX_TIMER_MS); // a longer timer would fire at once
}

function uncappedDelay(backoff: Backoff, retry: number, error: unknown): number {
  const advised = retryAfterOf(error);
  if (advised !== undefined) return Math.min(advised, backoff.maxDelayMs);
  const base = Math.min(backoff.initialDelayMs * Math.pow(backoff.backoffFactor, retry - 1), backoff.maxDelayMs);
  if (backoff.jitter === 0) return Math.round(base);
  const spread = base * backoff.jitter * (2 * backoff.random() - 1);
  return Math.max(0, Math.round(base + spread));
}

/** A server's advice carried by the error (`ModelError.retryAfterMs`), when it is usable. */
function retryAfterOf(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const value = (error as { retryAfterMs?: unknown }).retryAfterMs;
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

function isFiniteNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}
