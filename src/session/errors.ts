import { errorMessage } from '../internal/errorMessage';
/**
 * A session's turn was appended with a revision that is no longer the session's: another turn was
 * appended since this one's run read it (or the session was deleted).
 *
 * @example
 * try { await store.appendTurn(id, 3, turn); } catch (e) { if (e instanceof SessionConflictError) reload(); }
 */
export class SessionConflictError extends Error {
  override readonly name = 'SessionConflictError';
  constructor(
    readonly sessionId: string,
    /** The revision the append expected. */
    readonly expected: number,
    /** The session's revision in the store. */
    readonly actual: number,
    detail?: string,
  ) {
    super(detail ?? `Session '${sessionId}' is at revision ${actual}, not ${expected}: another turn was saved since this one read it`);
  }
}

/**
 * A run waited `sessionWaitMs` for another run to free its session, in vain: the run ends with an
 * `error` event naming it and `run-end` reason `error`.
 *
 * @example
 * agent.run('hi', { sessionId: 'user-42', sessionWaitMs: 5_000 }).pipe(ofType('error')).subscribe((e) => {
 *   if (e.error.name === 'SessionBusyError') showBusy();
 * });
 */
export class SessionBusyError extends Error {
  override readonly name = 'SessionBusyError';
  constructor(
    readonly sessionId: string,
    /** The run holding the session when the wait ended. */
    readonly holder: string | undefined,
    readonly waitedMs: number,
  ) {
    super(`Session '${sessionId}' is in use by run '${holder ?? 'unknown'}' (waited ${waitedMs} ms for it)`);
  }
}

/**
 * What a session holds, or a turn would add to it, is not data a store keeps: a stored turn or
 * snapshot that does not parse, or a turn JSON cannot hold (a `BigInt`, a cycle in a message or a
 * session-scoped state value). Trying again changes nothing, so a journaled run that meets it ends
 * for good, where a store that fails (an outage) leaves it to be resumed.
 *
 * @example
 * agent.run('hi', { sessionId: 's' }).pipe(ofType('error')).subscribe((e) => {
 *   if (e.error.name === 'SessionDataError') repairSession('s');
 * });
 */
export class SessionDataError extends Error {
  override readonly name = 'SessionDataError';
  constructor(
    readonly sessionId: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * @internal Whether a session store's failure is an outage that a later try may get past (a connection
 * lost, a timeout, a server down), rather than a conflict, data it cannot keep or read (a
 * `SessionDataError`, a `SyntaxError` of a store that parses JSON itself), a wait that ran out or
 * a state value that does not fit: what leaves a journaled run to be resumed.
 *
 * @example
 * isStoreOutage(new Error('connect ECONNREFUSED')); // true
 * isStoreOutage(new SessionConflictError('s', 1, 2)); // false
 */
export function isStoreOutage(error: unknown): boolean {
  // By name: an error of another build of this package (ESM beside CommonJS) is not an instance.
  const name = (error as { name?: unknown } | null)?.name;
  return !(
    name === 'SessionConflictError' ||
    name === 'SessionDataError' ||
    name === 'SessionBusyError' ||
    name === 'StateError' ||
    error instanceof SyntaxError
  );
}

/**
 * @internal What `fold` makes of a session's stored turns; a turn of the wrong shape (JSON, but
 * not a turn) is a {@link SessionDataError} naming the session.
 */
export function storedTurns<T>(sessionId: string, fold: () => T): T {
  try {
    return fold();
  } catch (error) {
    throw new SessionDataError(sessionId, `Session '${sessionId}' in the store: a turn is not a session turn (${errorMessage(error)})`, { cause: error });
  }
}
