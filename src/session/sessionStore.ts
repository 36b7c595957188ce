import type { Observable } from 'rxjs';
import type { Message } from '../messages/message';
import type { StoredState } from '../state/stateBag';
import type { SessionSnapshot } from './snapshot';

/**
 * A value now, or a promise of it: an in-memory store answers at once (no Promise in a marble test).
 *
 * @example
 * const position: Awaitable<number> = store.append(runId, 0, records);
 */
export type Awaitable<T> = T | PromiseLike<T>;

/**
 * One turn as a store appends it to a session: what the turn added, never the whole history
 * (unless it rewrote it: `replace`).
 *
 * @example
 * store.appendTurn('user-42', 3, { runId: 'run-9', messages: [question, answer], state: { 'my.counter': { version: 1, value: { n: 4 } } } });
 */
export interface SessionTurn {
  /** The run that made the turn: a store keeps one turn per run id (a second append of it is ignored). */
  readonly runId: string;
  /** The messages the turn added after the history (with `replace`: the whole history from now on). */
  readonly messages: readonly Message[];
  /** The session-scoped state entries the turn changed (with `replace`: the whole state from now on). */
  readonly state: Readonly<Record<string, StoredState>>;
  /** The turn rewrote the session (a middleware changed earlier messages; a session restored from a snapshot). */
  readonly replace?: boolean;
}

/**
 * A session as a store loads it: the snapshot (history and state, a fork's shared prefix
 * included), its revision, and where it was forked from.
 *
 * @example
 * const stored = await store.load('user-42'); // { version: 1, id, messages, state, revision: 7 }
 */
export interface StoredSession extends SessionSnapshot {
  /** How many turns the session has had appended (0: made by a fork, nothing appended yet). */
  readonly revision: number;
  /** The session it was forked from. */
  readonly parentId?: string;
  /** How many of the parent's messages it shares. */
  readonly forkedAt?: number;
  /** The run whose turn was appended last (none before the first turn). */
  readonly lastRunId?: string;
}

/**
 * What {@link SessionStore.appendTurn} answers: the session's revision after it, and whether this
 * call wrote the turn (false: that run's turn was appended before, and nothing was written).
 *
 * @example
 * const { revision, appended } = await store.appendTurn(id, 7, turn); // { revision: 8, appended: true }
 */
export interface SessionAppend {
  readonly revision: number;
  readonly appended: boolean;
}

/**
 * The lease a run holds on a session while it uses it: `owner` (the run's id) until `expiresAt`
 * (ms since the epoch, on the store's clock).
 *
 * @example
 * const { acquired, lease } = await store.acquireSession('user-42', runId, 30_000);
 */
export interface SessionLeaseClaim {
  readonly acquired: boolean;
  readonly lease: { readonly owner: string; readonly expiresAt: number };
}

/**
 * Where sessions are kept, by id, as an append-only list of turns. Every method may answer at
 * once or with a Promise (an Observable for `sessionReleases`); a failure is a thrown error or a
 * rejected Promise, which the runtime reports as the run's `error` event. Data that does not parse
 * is a `SessionDataError` (a `SyntaxError` counts too): it ends a journaled run for good, where any
 * other failure is taken for an outage and leaves the run to be resumed. The semantics every store
 * keeps (`describeStoreConformance` from `rx-agent/testing` checks them):
 *
 * Turns
 * - `load(id)`: the session as its turns make it, or undefined when the store holds no session of
 *   that id. `messages` is the shared prefix of the parent (a fork) followed by each turn's
 *   messages in order, a `replace` turn starting the history over; `state` is the fork's copied
 *   state (or nothing) with each turn's entries set over it, a `replace` turn starting it over;
 *   `revision` is the number of turns appended; `lastRunId` the `runId` of the last turn. A message kept without an `id` gets one when loaded.
 * - `revision(id)`: the session's revision as `load` would give it, or undefined when there is no
 *   such session; cheap (a run whose copy is current skips the load).
 * - `appendTurn(id, expected, turn)`: atomically appends `turn` if and only if the session's
 *   revision is `expected` (0 for a session that does not exist yet: the append creates it), and
 *   answers `{ revision: expected + 1, appended: true }`. A turn whose `runId` the session holds
 *   already is not written again, whatever `expected` says: the answer is
 *   `{ revision: <current>, appended: false }` (a run resumed after its process died between saving
 *   its turn and journaling its end saves it once). Otherwise it writes nothing and fails with
 *   `SessionConflictError`. Storage per turn is O(the turn): never a rewrite of the history.
 * - `fork(parentId, forkId, at)`: makes session `forkId` (revision 0, `parentId`, `forkedAt: at`)
 *   whose history is the parent's first `at` messages as they are now, and whose state is the
 *   parent's state as it stood after the last turn that left at most `at` messages (none: its
 *   starting state when that left at most `at`, a fork's copied state say; for a fork forked
 *   inside the history it shares, its own parent's state there, and so on up; else no state);
 *   later turns of the parent do not change it. The prefix is
 *   shared, not copied. Fails with `SessionConflictError` when `forkId` exists, and with a
 *   `TypeError` when the parent does not or `at` is not an integer from 0 to its length.
 * - `forks(id)`: the ids of the sessions forked from `id` (not their forks), in creation order.
 * - `delete(id)`: removes the session (a fork also leaves its parent's list); fails with
 *   `SessionConflictError` while it has forks (they read its prefix), and does nothing for an
 *   unknown id.
 *
 * Leases (one run at a time per session)
 * - `acquireSession(id, owner, ttlMs)`: atomically takes the session's lease for `owner` until now +
 *   `ttlMs` when nobody holds it, it has expired, or `owner` holds it already; answers
 *   `{ acquired: true, lease }`, else `{ acquired: false, lease }` with the holder's lease.
 * - `renewSession(id, owner, ttlMs)`: extends it if `owner` still holds it; false otherwise.
 * - `releaseSession(id, owner)`: drops it if `owner` holds it, and then tells `sessionReleases`.
 * - `sessionReleases(id)`: an Observable that emits once as soon as it listens (from then on no
 *   release is missed), then once per release of the session's lease. A waiting run tries again on
 *   each; a lease that expires is not announced (the waiter tries again at its `expiresAt`).
 *
 * A store written for the earlier contract (`load(id)` answering a snapshot, `save(snapshot)`)
 * still works: the runtime adapts it (see docs/upgrading.md).
 *
 * @example
 * const store: SessionStore = new InMemorySessionStore();
 * const session = createSession({ id: 'user-42', store });
 */
export interface SessionStore {
  load(id: string): Awaitable<StoredSession | undefined>;
  revision(id: string): Awaitable<number | undefined>;
  appendTurn(id: string, expected: number, turn: SessionTurn): Awaitable<SessionAppend>;
  fork(parentId: string, forkId: string, at: number): Awaitable<void>;
  forks(id: string): Awaitable<readonly string[]>;
  delete(id: string): Awaitable<void>;
  acquireSession(id: string, owner: string, ttlMs: number): Awaitable<SessionLeaseClaim>;
  renewSession(id: string, owner: string, ttlMs: number): Awaitable<boolean>;
  releaseSession(id: string, owner: string): Awaitable<void>;
  sessionReleases(id: string): Observable<void>;
}

/** The methods every {@link SessionStore} has. */
export const SESSION_STORE_METHODS = [
  'load',
  'revision',
  'appendTurn',
  'fork',
  'forks',
  'delete',
  'acquireSession',
  'renewSession',
  'releaseSession',
  'sessionReleases',
] as const;

/**
 * A store written for the earlier contract: whole snapshots saved over each other. The runtime
 * adapts it (appends become load, apply, save; leases are kept in the process).
 *
 * @example
 * const legacy: LegacySessionStore = { load: (id) => files.read(id), save: (s) => files.write(s.id, s) };
 */
export interface LegacySessionStore {
  load(id: string): Awaitable<SessionSnapshot | undefined>;
  save(snapshot: SessionSnapshot): Awaitable<void>;
  delete?(id: string): Awaitable<void>;
}
