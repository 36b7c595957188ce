import type { Observable } from 'rxjs';
import type { AgentResponse } from '../events/types';
import { SESSION_STORE_METHODS, type Awaitable, type LegacySessionStore, type SessionStore } from '../session/sessionStore';
import type { JournalEntry, JournalRecord } from './records';

export type { Awaitable } from '../session/sessionStore';

/**
 * The lease a process holds on a run while it runs it: `owner` (an id the process made) until
 * `expiresAt` (ms since the epoch, on the store's clock).
 *
 * @example
 * const lease = await store.getLease(runId); // { owner: 'agent_…', expiresAt: 1767225600000 }
 */
export interface RunLease {
  readonly owner: string;
  readonly expiresAt: number;
}

/**
 * What {@link AgentStore.acquireLease} answers: the lease now held, by the caller or by another owner.
 *
 * @example
 * const { acquired, lease } = await store.acquireLease(runId, 'me', 30_000);
 */
export interface LeaseClaim {
  readonly acquired: boolean;
  readonly lease: RunLease;
}

/**
 * What {@link AgentStore.received} answers: the answers kept for a run (in the order they were
 * kept) and whether its cancel flag is set.
 *
 * @example
 * const { answers, cancelled } = await store.received(runId);
 */
export interface RunReceived {
  readonly answers: readonly AgentResponse[];
  readonly cancelled: boolean;
}

/**
 * Where durable runs are kept: each run's journal, the answers and cancels sent to it from any
 * process, its lease, and sessions by id (the {@link SessionStore} methods: turns appended with
 * a revision, forks, one run at a time per session). `memoryStore()` implements it for one process; a store for Redis or a database
 * implements the same semantics across processes, and `describeStoreConformance` from
 * `rx-agent/testing` checks them.
 *
 * Every method may answer at once or with a Promise (an Observable for the notifications). A
 * failure is a thrown error or a rejected Promise (an errored Observable); the runtime reports it
 * as the run's `error` event. The semantics each method must keep:
 *
 * Journal
 * - `append(runId, expected, records)`: atomically appends `records` (in order, all or none) to
 *   the run's journal if and only if its last position is `expected` (0: the journal does not
 *   exist yet, and the append creates it), and resolves with the new last position
 *   (`expected + records.length`). Positions are 1, 2, 3… with no gap. Otherwise it writes nothing
 *   and fails with `JournalConflictError` (also when `expected` is 0 and the run exists). An empty
 *   `records` writes nothing and checks the position. A record is plain JSON; the store keeps it
 *   as is (serialising it is fine) and must never hand back a record of an append that failed or
 *   a part of one. When the records include one of kind `end`, the run is over: after it is
 *   written, followers get it, and the store keeps the journal for its retention (then drops the
 *   journal, the answers and the cancel flag of the run; leases and sessions are not affected).
 * - `read(runId, after = 0)`: the entries with a position above `after`, in order, or undefined
 *   when the store holds no journal for the run (never created, or dropped).
 * - `follow(runId, after)`: an Observable of the entries above `after`: those written already,
 *   then each one as it is appended, in order, none twice, none skipped (a live reader and a late
 *   one see the same sequence). It completes when the journal is dropped and errors with
 *   `RunNotFoundError` when, on subscription, the store holds no journal for the run. A follower
 *   subscribed while the store holds the journal gets every entry to the end, also when its first
 *   read, or its read after a lost connection, comes after the journal was dropped, at the end of
 *   its retention however short (a few ms), or at the run's end with none (a store over the
 *   network keeps a dropped journal a short while for such followers, out of `read`'s sight).
 *   Unsubscribing releases whatever it holds (a blocking read, a subscription to a channel).
 *
 * Answers and cancels (sent from any process, read by the process running the run)
 * - `putAnswer(runId, response)`: keeps `response` for the run unless an answer with the same
 *   `requestId` is kept already; resolves true when this one was kept (the first wins).
 * - `answers(runId)`: an Observable of the run's kept answers: those kept already, then each new
 *   one as it is kept. It does not complete by itself.
 * - `requestCancel(runId)`: sets the run's cancel flag (idempotent).
 * - `cancellations(runId)`: an Observable that emits once (then completes) when the flag is set,
 *   at once if it was set before the subscription.
 * - `received(runId)` (optional): the answers kept and the cancel flag, read at once (no journal:
 *   no answers, not cancelled). A resume reads it once it holds the run's lease, so that it goes on
 *   with every answer given and a cancel sent while the run was not running, whenever `answers()`
 *   and `cancellations()` deliver them. A store without it must have `answers()` emit the answers
 *   kept already, and `cancellations()` a flag set already, synchronously on subscription (as
 *   `memoryStore` does); a store whose notifications arrive later (a network round trip) needs it.
 *
 * Leases (one process runs a run)
 * - `acquireLease(runId, owner, ttlMs)`: atomically takes the run's lease for `owner` until now +
 *   `ttlMs` when nobody holds it, it has expired, or `owner` holds it already; resolves
 *   `{ acquired: true, lease }` then, else `{ acquired: false, lease }` with the holder's lease.
 * - `renewLease(runId, owner, ttlMs)`: extends the lease to now + `ttlMs` if `owner` still holds
 *   it (not expired); resolves false when it does not (the lease was lost).
 * - `releaseLease(runId, owner)`: drops the lease if `owner` holds it; does nothing otherwise.
 * - `getLease(runId)`: the current, unexpired lease, or undefined.
 *
 * Sessions: `load`, `appendTurn`, `fork`, `forks`, `delete` and the session leases as a
 * {@link SessionStore} (its JSDoc states their semantics); the sessions of a store are independent
 * of its runs' retention. An AgentStore of the earlier contract (sessions saved whole with
 * `save(snapshot)`) is adapted by `createAgent`.
 *
 * @example
 * const store: AgentStore = memoryStore();
 * const agent = createAgent({ model, store });
 */
export interface AgentStore extends SessionStore {
  append(runId: string, expected: number, records: readonly JournalRecord[]): Awaitable<number>;
  read(runId: string, after?: number): Awaitable<readonly JournalEntry[] | undefined>;
  follow(runId: string, after: number): Observable<JournalEntry>;

  putAnswer(runId: string, response: AgentResponse): Awaitable<boolean>;
  answers(runId: string): Observable<AgentResponse>;
  requestCancel(runId: string): Awaitable<void>;
  cancellations(runId: string): Observable<void>;
  received?(runId: string): Awaitable<RunReceived>;

  acquireLease(runId: string, owner: string, ttlMs: number): Awaitable<LeaseClaim>;
  renewLease(runId: string, owner: string, ttlMs: number): Awaitable<boolean>;
  releaseLease(runId: string, owner: string): Awaitable<void>;
  getLease(runId: string): Awaitable<RunLease | undefined>;
}

/**
 * An {@link AgentStore} written for the earlier session contract (`load` answering a snapshot,
 * `save(snapshot)`): `createAgent` adapts its sessions (see docs/upgrading.md).
 *
 * @example
 * createAgent({ model, store: { ...myJournalMethods, load: (id) => db.get(id), save: (s) => db.put(s) } });
 */
export type LegacyAgentStore = Omit<AgentStore, keyof SessionStore> & LegacySessionStore;

/** The methods every {@link AgentStore} has (checked by `createAgent`, so a wrong object fails early with their names). */
export const AGENT_STORE_METHODS = [
  'append',
  'read',
  'follow',
  'putAnswer',
  'answers',
  'requestCancel',
  'cancellations',
  'acquireLease',
  'renewLease',
  'releaseLease',
  'getLease',
  ...SESSION_STORE_METHODS,
] as const;

/** The journal half of {@link AGENT_STORE_METHODS}. */
export const JOURNAL_METHODS = AGENT_STORE_METHODS.slice(0, 11) as readonly (typeof AGENT_STORE_METHODS)[number][];
