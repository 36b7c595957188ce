import { show } from './show';

// The checks of a lease's arguments, run leases and session leases alike, in every store.

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
