/**
 * A run is live in another process (it holds the run's lease), so it cannot be resumed here.
 *
 * @example
 * agent.resume(runId).pipe(ofType('error')).subscribe(e => {
 *   if (e.error.name === 'RunBusyError') console.log('running elsewhere; watch it with agent.events(runId)');
 * });
 */
export class RunBusyError extends Error {
  override readonly name = 'RunBusyError';
  constructor(
    readonly runId: string,
    /** Who holds the lease, and until when (ms since the epoch, the store's clock). */
    readonly owner: string,
    readonly expiresAt: number,
  ) {
    super(`Run '${runId}' is running in another process (lease held by '${owner}' until ${new Date(expiresAt).toISOString()})`);
  }
}

/**
 * No journal for this run id in the store: never started there, or dropped after its retention.
 *
 * @example
 * agent.resume('run-nope') // emits an `error` event whose error.name is 'RunNotFoundError'
 */
export class RunNotFoundError extends Error {
  override readonly name = 'RunNotFoundError';
  constructor(readonly runId: string) {
    super(`No run '${runId}' in the store (never started, or its journal was dropped after its retention)`);
  }
}

/**
 * The run has ended (its journal holds `run-end` with a reason other than `suspended`): there is
 * nothing to resume, answer or cancel.
 *
 * @example
 * agent.resume(finishedRunId) // `error` event: RunFinishedError
 */
export class RunFinishedError extends Error {
  override readonly name = 'RunFinishedError';
  constructor(
    readonly runId: string,
    readonly reason: string,
  ) {
    super(`Run '${runId}' has finished (reason '${reason}'); it cannot be resumed`);
  }
}

/**
 * A journal cannot be read: a record written by a newer format version, or one that is not a
 * journal record at all (a corrupted or half-written entry).
 *
 * @example
 * // a record { version: 2, ... } read by this version of the package:
 * // JournalFormatError: Run 'run-1', journal entry 7: written by journal format version 2; this version reads up to 1
 */
export class JournalFormatError extends Error {
  override readonly name = 'JournalFormatError';
  constructor(
    readonly runId: string,
    readonly position: number,
    detail: string,
  ) {
    super(`Run '${runId}', journal entry ${position}: ${detail}`);
  }
}

/**
 * An append found the journal at another position than expected: another process wrote to the
 * run (it lost its lease, or two processes raced). Nothing of the refused append was written.
 * A resume is refused with it too when the run went on in another process between the resume's
 * read of the journal and its lease (and stopped there again): resuming again goes on from there.
 *
 * @example
 * store.append('run-1', 3, records) // throws JournalConflictError when the journal is at 4
 */
export class JournalConflictError extends Error {
  override readonly name = 'JournalConflictError';
  constructor(
    readonly runId: string,
    readonly expected: number,
    readonly actual: number,
  ) {
    super(`Run '${runId}': journal append expected position ${expected} but the journal is at ${actual}`);
  }
}

/**
 * `resume`, `respond`, `cancel`, `events` and `runs` by id need the agent to have a store.
 *
 * @example
 * createAgent({ model }).resume('run-1') // error event: StoreRequiredError
 */
export class StoreRequiredError extends Error {
  override readonly name = 'StoreRequiredError';
  constructor(method: string) {
    super(`agent.${method}() needs a store: createAgent({ store: memoryStore() }) or another AgentStore`);
  }
}
