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
