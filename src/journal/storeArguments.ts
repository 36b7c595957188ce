import { show } from '../internal/show';

export { checkOwner, checkTtl } from '../internal/leaseArguments';

// The argument checks a remote store (Redis, PostgreSQL) makes before it sends anything: the same
// TypeErrors, word for word, whichever store a run is kept in.

/** @internal A run id: a non-empty string. */
export function checkRunId(method: string, runId: unknown): asserts runId is string {
  if (typeof runId !== 'string' || runId === '') throw new TypeError(`${method}: a run id must be a non-empty string, got ${show(runId)}`);
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
