import { show } from '../internal/show';

// The argument checks a remote store (Redis, PostgreSQL) makes before it sends anything: the same
// TypeErrors, word for word, whichever store a run is kept in.

/** @internal A run id: a non-empty string. */
export function checkRunId(method: string, runId: unknown): asserts runId is string {
  if (typeof runId !== 'string' || runId === '') throw new TypeError(`${method}: a run id must be a non-empty string, got ${show(runId)}`);
}

/** @internal A lease owner: a non-empty string. */
export function checkOwner(method: string, owner: unknown): asserts owner is string {
  if (typeof owner !== 'string' || owner === '') throw new TypeError(`${method}: a lease owner must be a non-empty string, got ${show(owner)}`);
}

/** @internal A lease's time to live, in whole ms above 0, at most what every store can count. */
export function checkTtl(method: string, ttlMs: unknown): number {
  if (typeof ttlMs !== 'number' || !Number.isFinite(ttlMs) || ttlMs <= 0) {
    throw new TypeError(`${method}: ttlMs must be a finite number of ms above 0, got ${show(ttlMs)}`);
  }
  // Redis takes an integer expiry, PostgreSQL a bounded interval: 1e20 ms fails in both.
  if (ttlMs > Number.MAX_SAFE_INTEGER) throw new TypeError(`${method}: ttlMs must be at most Number.MAX_SAFE_INTEGER ms, got ${show(ttlMs)}`);
  return Math.ceil(ttlMs);
}

/** @internal A journal position to read after: an integer >= 0. */
export function checkAfter(method: string, after: unknown): void {
  if (typeof after !== 'number' || !Number.isSafeInteger(after) || after < 0) {
    throw new TypeError(`${method}: 'after' must be a position (an integer >= 0), got ${show(after)}`);
  }
}

/** @internal A session id: a non-empty string. */
export function checkSessionId(method: string, id: unknown): asserts id is string {
  if (typeof id !== 'string' || id === '') throw new TypeError(`${method}: a session id must be a non-empty string, got ${show(id)}`);
}
