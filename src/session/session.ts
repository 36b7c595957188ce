import { Observable, asyncScheduler, interval, lastValueFrom, type SchedulerLike, type Subscription } from 'rxjs';
import { withIds, type Message } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import { StateBag, type StoredState } from '../state/stateBag';
import { isPromiseLike } from '../internal/isPromiseLike';
import { isScheduler } from '../internal/isScheduler';
import { settle } from '../internal/settle';
import { show } from '../internal/show';
import { uniqueId } from '../internal/uniqueId';
import { errorMessage } from '../internal/errorMessage';
import { checkOptions, optionNames } from '../internal/optionNames';
import { jsonProblem } from '../internal/unsent';
import { adaptSessionStore, isLegacySessionStore } from './adaptSessionStore';
import { checkSessionWait, claimSession, type SessionLeases } from './claimSession';
import { isStoreOutage, SessionDataError } from './errors';
import { LocalLeases } from './localLeases';
import { SESSION_STORE_METHODS, type LegacySessionStore, type SessionStore, type SessionTurn, type StoredSession } from './sessionStore';
import { parseSnapshot, plainMessages, type SessionSnapshot } from './snapshot';

export { InMemorySessionStore, type InMemorySessionStoreOptions } from './inMemorySessionStore';
export { SessionSnapshotSchema, type SessionSnapshot } from './snapshot';
export type { SessionStore } from './sessionStore';

/** What {@link createSession} takes. */
export interface SessionOptions {
  id?: string;
  /**
   * Where turns are appended, and loaded from at the start of every run (so that several `Session`
   * objects for one id, one per request say, and processes sharing the store, each start from the
   * last turn). A store of the earlier contract (`load`, `save(snapshot)`) is adapted. Without one,
   * the session is kept in this object only (in memory).
   */
  store?: SessionStore | LegacySessionStore;
  /** Restores a session from `session.snapshot()`: a {@link SessionSnapshot}, which createSession checks. */
  snapshot?: unknown;
}

/**
 * What {@link Session.fork} takes.
 *
 * @example
 * await session.fork({ at: 2 });               // the first two messages
 * await session.fork({ at: question.id });     // up to that message, included
 * await session.fork({ sessionWaitMs: 0 });    // not stored yet and held by a run: SessionBusyError at once
 */
export interface ForkOptions {
  /** A message count (the first `at` messages), or a message id (up to that message, included). Default: all. */
  at?: number | string;
  /** The fork's id (default: generated). */
  id?: string;
  /**
   * With a store, for a session it does not hold yet (or made from a snapshot) that a run holds:
   * how long the fork waits for the run to free it, in ms (default 30 000, as a run's; 0: refused at
   * once; `Infinity`), then rejects with `SessionBusyError` naming the session and the run.
   */
  sessionWaitMs?: number;
  /** The clock of that wait (default `asyncScheduler`; a `TestScheduler` in marble tests). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link ForkOptions}: any other is refused. */
const FORK_OPTIONS = optionNames<ForkOptions>({ at: true, id: true, sessionWaitMs: true, scheduler: true });
/** The keys of {@link SessionOptions}: any other is refused. */
const SESSION_OPTIONS = optionNames<SessionOptions>({ id: true, store: true, snapshot: true });

/** @internal How a run holds its session: the lease's time to live and the wait for it. */
export interface SessionClaim {
  readonly runId: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly scheduler: SchedulerLike;
  /**
   * Told, just before the claim errors with it, of an outage of the store ({@link isStoreOutage}):
   * a method that threw or rejected, or `sessionReleases` erroring; not a wait that ran out nor a
   * stored session that does not parse.
   */
  readonly onStoreFailure?: (error: unknown) => void;
}

/**
 * A conversation that outlives one run: history and session-scoped state. With a store, each turn
 * is appended to the store with the revision its run read; without one, it lives in this object.
 */
export class Session {
  private log: MessageLog;
  private bag: StateBag;
  /** The store's revision this object's copy matches (undefined: not read). */
  private revision: number | undefined;
  /** @internal The run whose turn the store appended last, as last read. */
  lastRunId: string | undefined;
  /** The next append writes the whole session (made from a snapshot; or an append failed). */
  private rewrite: boolean;
  /** Each state key's JSON as the store holds it: a turn appends only what changed. */
  private stored = new Map<string, string>();
  /** The runs claiming or holding the session through this object, each with its lease's renewal. */
  private readonly holders = new Map<string, Subscription | undefined>();
  /** An append in flight: the lease is let go once it settles. */
  private appending: Promise<unknown> | undefined;
  /** Without a store: this object's own leases, and the state after each turn (what a fork copies). */
  private readonly own: LocalLeases | undefined;
  private readonly turnStates: { length: number; state: StateBag }[] | undefined;
  private readonly ownForks: string[] | undefined;
  private parent: { readonly id: string; readonly at: number } | undefined;

  /** @internal */
  constructor(
    readonly id: string,
    readonly store: SessionStore | undefined,
    snapshot: SessionSnapshot | undefined,
    parentId?: string,
    forkedAt?: number,
  ) {
    this.parent = parentId === undefined ? undefined : { id: parentId, at: forkedAt ?? 0 };
    this.log = MessageLog.of(snapshot?.messages ?? []);
    this.bag = StateBag.fromStored(snapshot?.state);
    this.rewrite = store !== undefined && snapshot !== undefined;
    if (!store) {
      this.own = new LocalLeases(() => 0);
      this.turnStates = [{ length: this.log.length, state: this.bag }];
      this.ownForks = [];
    }
  }

  /** The session it was forked from (as last read from the store, or made by `fork()`). */
  get parentId(): string | undefined {
    return this.parent?.id;
  }

  /** How many of its parent's messages a fork shares. */
  get forkedAt(): number | undefined {
    return this.parent?.at;
  }

  /** The history so far. */
  get messages(): readonly Message[] {
    return this.log.toArray();
  }

  /** The session as plain JSON, synchronously. */
  snapshot(): SessionSnapshot {
    return { version: 1, id: this.id, messages: plainMessages(this.log.since(0)), state: this.bag.toStored('session') };
  }

  /**
   * A new session whose history is the first `at` messages of this one (default: all) and whose
   * session-scoped state is copied as it stood there (after the last turn that left at most `at`
   * messages). With a store, the store records the fork (`parentId`, `forkedAt`) and shares the
   * prefix rather than copying it; the fork is read from the store. A session the store does not
   * hold yet (before its first turn), or one made from a snapshot whose first turn has not run, is
   * first written to the store as that turn would write it, holding the session's lease: a run
   * holding the session is waited for up to `sessionWaitMs` (default 30 s), then the fork rejects
   * with `SessionBusyError` naming the session and the run (nothing written). Editing a message is a
   * fork before it plus a run with the new text; regenerating an answer is a fork up to its
   * question plus a run with no new input.
   *
   * @example
   * const retry = await session.fork({ at: question.id });
   * await agent.invoke([], { session: retry }); // another answer to the same question
   */
  async fork(options: ForkOptions = {}): Promise<Session> {
    checkOptions('fork', options, FORK_OPTIONS);
    const forkId = options.id ?? uniqueId('session');
    if (typeof forkId !== 'string' || forkId === '') throw new TypeError(`fork: 'id' must be a non-empty string, got ${show(forkId)}`);
    const { sessionWaitMs = FORK_WAIT_MS, scheduler = asyncScheduler } = options;
    checkSessionWait('fork', sessionWaitMs);
    if (!isScheduler(scheduler)) throw new TypeError("fork: 'scheduler' must be an rxjs SchedulerLike");
    const { store } = this;
    if (!store) {
      const at = forkPoint(options.at, this.log.toArray());
      const states = this.turnStates as NonNullable<typeof this.turnStates>;
      // Before the first known step (inside a snapshot's history) no state is known: none, as a store gives.
      let state = StateBag.empty;
      for (const step of states) if (step.length <= at) state = step.state;
      (this.ownForks as string[]).push(forkId);
      const fork = new Session(
        forkId,
        undefined,
        { version: 1, id: forkId, messages: this.log.since(0).slice(0, at), state: state.toStored('session') },
        this.id,
        at,
      );
      // The steps within the history the fork shares come before its start: a fork of it there copies the state they left.
      const steps = fork.turnStates as NonNullable<typeof fork.turnStates>;
      const start = steps.pop() as (typeof steps)[number];
      for (const step of states) if (step.length <= at) steps.push(step);
      steps.push(start);
      return fork;
    }
    let parent = await store.load(this.id);
    if (!parent || this.rewrite) {
      // The store shares the parent's history with the fork: it must hold the session as this object has it.
      await this.writeCopy(store, sessionWaitMs, scheduler);
      parent = await store.load(this.id);
      if (!parent) throw new Error(`fork: the store did not keep session '${this.id}'`);
    }
    const at = forkPoint(options.at, parent.messages);
    await store.fork(this.id, forkId, at);
    const fork = await store.load(forkId);
    if (!fork) throw new Error(`fork: the store did not keep fork '${forkId}'`);
    const session = new Session(forkId, store, undefined, this.id, at);
    session.loaded(fork);
    return session;
  }

  /**
   * Writes this object's copy to the store as a turn, as its next run would, for a fork to share:
   * a session the store does not hold yet (nothing is written if a run wrote it meanwhile), or one
   * whose copy is to be written over the store's (made from a snapshot; an append failed). Holds
   * the session's lease meanwhile, waiting up to `waitMs` for a run holding it as a run would.
   */
  private async writeCopy(store: SessionStore, waitMs: number, scheduler: SchedulerLike): Promise<void> {
    const runId = uniqueId('fork');
    try {
      await lastValueFrom(this.open({ runId, ttlMs: FORK_LEASE_MS, waitMs, scheduler }));
      if (!this.rewrite && (await store.revision(this.id)) !== undefined) return;
      await this.commit(runId, this.log, this.log.length, this.bag);
    } finally {
      this.release(runId);
    }
  }

  /**
   * The ids of the sessions forked from this one (not their forks), oldest first: from the store,
   * or, without one, those this object made.
   *
   * @example
   * const ids = await session.forks(); // ['session_…']
   */
  async forks(): Promise<readonly string[]> {
    return this.store ? await this.store.forks(this.id) : (this.ownForks as string[]).slice();
  }

  /** Takes what the store holds as this object's copy. */
  private loaded(stored: StoredSession | undefined): void {
    const snapshot = stored === undefined ? undefined : parseSnapshot(stored, `session '${this.id}' in the store`);
    this.revision = stored?.revision ?? 0;
    this.lastRunId = stored?.lastRunId;
    if (stored?.parentId !== undefined) this.parent = { id: stored.parentId, at: stored.forkedAt ?? 0 };
    if (this.rewrite) return; // this object's copy is written over the store's by its next turn
    this.log = MessageLog.of(snapshot?.messages ?? []);
    this.bag = StateBag.fromStored(snapshot?.state);
    this.stored = storedJson(snapshot?.state);
  }

  /**
   * @internal Claims the session for a run (waiting for another run to free it), then reads it from
   * the store. Emits the history and state the run starts from. Left before it emits, it takes
   * nothing (a lease taken meanwhile is let go). A failure of the store is told to
   * `claim.onStoreFailure` before the error.
   */
  open(claim: SessionClaim): Observable<{ log: MessageLog; state: StateBag }> {
    return new Observable((subscriber) => {
      const { store } = this;
      const storeFailed = (error: unknown) => {
        if (subscriber.closed) return;
        if (isStoreOutage(error)) claim.onStoreFailure?.(error);
        subscriber.error(error);
      };
      this.holders.set(claim.runId, undefined);
      const leases: SessionLeases = store ?? ownLeases(this.own as LocalLeases);
      const ttl = store ? claim.ttlMs : Infinity;
      const claimed = claimSession(leases, this.id, claim.runId, ttl, claim.waitMs, claim.scheduler).subscribe({
        complete: () => {
          if (subscriber.closed) return;
          if (!store) {
            subscriber.next({ log: this.log, state: this.bag });
            return subscriber.complete();
          }
          const every = Math.max(1, Math.floor(claim.ttlMs / 3));
          const renewal = interval(every, claim.scheduler).subscribe(() => settle(() => store.renewSession(this.id, claim.runId, claim.ttlMs), noop, noop));
          if (this.holders.has(claim.runId)) this.holders.set(claim.runId, renewal);
          else renewal.unsubscribe();
          const ready = () => {
            subscriber.next({ log: this.log, state: this.bag });
            subscriber.complete();
          };
          const load = () =>
            settle(
              () => store.load(this.id),
              (stored) => {
                if (subscriber.closed) return;
                try {
                  this.loaded(stored);
                } catch (error) {
                  return subscriber.error(new SessionDataError(this.id, errorMessage(error), { cause: error }));
                }
                ready();
              },
              storeFailed,
            );
          // This object's copy is kept while the store has nothing newer (values it parsed stay parsed).
          const known = this.revision;
          if (known === undefined || this.rewrite) return load();
          settle(
            () => store.revision(this.id),
            (revision) => {
              if (subscriber.closed) return;
              if (revision === known) ready();
              else load();
            },
            storeFailed,
          );
        },
        error: storeFailed,
      });
      return () => claimed.unsubscribe();
    });
  }

  /**
   * @internal Keeps a turn's outcome and appends it to the store with the revision its run read:
   * the messages after the history the run started from, and the state entries that changed (the
   * whole session when a middleware rewrote earlier messages). Answers at once for a store that
   * does. A turn JSON cannot hold is a {@link SessionDataError}, before the store is asked (this
   * object does not take it either). When the store fails and `handOver` takes the failure (a
   * journaled run whose resume saves the turn; not asked when this object's copy was to be written
   * over the store's), this object forgets the turn and reads the store again at its next run;
   * otherwise it keeps the turn and its next turn writes the whole session.
   */
  commit(runId: string, log: MessageLog, turnStart: number, state: StateBag, handOver?: (error: unknown) => boolean): void | Promise<void> {
    const before = this.log;
    const beforeBag = this.bag;
    const rewriting = this.rewrite;
    const bag = state.ofScope('session');
    const kept =
      !this.rewrite &&
      turnStart === before.length &&
      log.length >= before.length &&
      (before.length === 0 || log.at(before.length - 1) === before.at(before.length - 1));
    const from = kept ? before.length : 0;
    const added = log.since(from);
    const named = withIds(added);
    const next = named === added ? log : (kept ? before : MessageLog.empty).appendAll(named);
    const { store } = this;
    if (!store) {
      this.log = next;
      this.bag = bag;
      this.turnStates?.push({ length: next.length, state: bag });
      return;
    }
    // Checked before this object takes the turn: a turn no store can keep is kept nowhere.
    const current = bag.toStored('session');
    let json: Map<string, string>;
    try {
      json = storedJson(current);
    } catch (error) {
      throw new SessionDataError(this.id, `Session '${this.id}': the state of run '${runId}' cannot be stored: ${errorMessage(error)}`, { cause: error });
    }
    let changes: Record<string, StoredState> = current;
    if (kept) {
      changes = {};
      for (const [key, text] of json)
        if (this.stored.get(key) !== text) Object.defineProperty(changes, key, { value: current[key], enumerable: true, writable: true, configurable: true });
    }
    const messages = plainMessages(named.slice());
    const problem = jsonProblem(messages);
    if (problem !== undefined) {
      throw new SessionDataError(this.id, `Session '${this.id}': the messages of run '${runId}' cannot be stored: ${errorMessage(problem)}`, {
        cause: problem,
      });
    }
    const turn: SessionTurn = kept ? { runId, messages, state: changes } : { runId, messages, state: changes, replace: true };
    this.log = next;
    this.bag = bag;
    const expected = this.revision ?? 0;
    const done = (result: { revision: number; appended: boolean }) => {
      this.rewrite = false;
      this.stored = json;
      // Appended before (a resumed run): the next run reads the store again.
      this.revision = result.appended ? result.revision : undefined;
    };
    const failed = (error: unknown): never => {
      // An object whose copy was to be written over the store's holds more than the turn: it keeps it all.
      if (!rewriting && handOver?.(error)) {
        this.log = before;
        this.bag = beforeBag;
        this.revision = undefined; // the resume saves the turn: the next run reads the store
      } else {
        this.rewrite = true; // the next turn carries this one: it writes the whole session
      }
      throw error;
    };
    let answer;
    try {
      answer = store.appendTurn(this.id, expected, turn);
    } catch (error) {
      return failed(error);
    }
    if (!isPromiseLike(answer)) return done(answer);
    const appending = Promise.resolve(answer).then(done, failed);
    this.appending = appending;
    return appending;
  }

  /**
   * @internal Lets the session go: stops renewing the lease and releases it once an append in
   * flight has settled, so the next run reads what it wrote.
   */
  release(runId: string): void {
    if (!this.holders.has(runId)) return;
    this.holders.get(runId)?.unsubscribe();
    this.holders.delete(runId);
    const leases: SessionLeases = this.store ?? ownLeases(this.own as LocalLeases);
    const free = () => settle(() => leases.releaseSession(this.id, runId), noop, noop);
    const appending = this.appending;
    this.appending = undefined;
    if (appending) void appending.then(free, free);
    else free();
  }
}

function noop(): void {}

/** The lease `fork()` holds while it writes a session to its store, and its default wait for a run holding it (an agent's defaults). */
const FORK_LEASE_MS = 30_000;
const FORK_WAIT_MS = 30_000;

function ownLeases(leases: LocalLeases): SessionLeases {
  return {
    acquireSession: (id, owner) => leases.acquire(id, owner, Infinity),
    releaseSession: (id, owner) => leases.release(id, owner),
    sessionReleases: (id) => leases.releases(id),
  };
}

function storedJson(state: Readonly<Record<string, StoredState>> | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (state) for (const key of Object.keys(state)) out.set(key, JSON.stringify(state[key]));
  return out;
}

/** A fork's message count from `at` (a count, or the id of a message to keep, included). */
function forkPoint(at: unknown, messages: readonly Message[]): number {
  if (at === undefined) return messages.length;
  if (typeof at === 'string') {
    const index = messages.findIndex((m) => m.id === at);
    if (index < 0) throw new TypeError(`fork: no message with id '${at}' in the session`);
    return index + 1;
  }
  if (typeof at !== 'number' || !Number.isInteger(at) || at < 0 || at > messages.length) {
    throw new TypeError(`fork: 'at' must be a message id or an integer from 0 to ${messages.length} (the message count), got ${show(at)}`);
  }
  return at;
}

/** The store as a {@link SessionStore}: one of the earlier contract adapted, anything else checked. */
export function toSessionStore(store: unknown, where: string): SessionStore {
  if (isLegacySessionStore(store)) return adaptSessionStore(store);
  const missing =
    store === null || typeof store !== 'object'
      ? [...SESSION_STORE_METHODS]
      : SESSION_STORE_METHODS.filter((m) => typeof (store as Record<string, unknown>)[m] !== 'function');
  if (missing.length > 0) throw new TypeError(`${where}: 'store' must be a session store; missing ${missing.join(', ')}`);
  return store as SessionStore;
}

/**
 * Makes a session. With `snapshot`, restores one (checked with zod; messages without ids get
 * them); a state that no longer fits its definition is reported as a `StateError` when a middleware
 * first reads it.
 *
 * @example
 * const session = createSession();
 * await agent.invoke('My name is Ada.', { session });
 * await agent.invoke('What is my name?', { session });
 * const saved = JSON.stringify(session.snapshot());
 * const again = createSession({ snapshot: JSON.parse(saved) });
 */
export function createSession(options: SessionOptions = {}): Session {
  checkOptions('createSession', options, SESSION_OPTIONS);
  const store = options.store === undefined ? undefined : toSessionStore(options.store, 'createSession');
  const snapshot = options.snapshot === undefined ? undefined : parseSnapshot(options.snapshot);
  const id = options.id !== undefined ? options.id : (snapshot?.id ?? uniqueId('session'));
  if (typeof id !== 'string' || id === '') throw new TypeError('createSession: id must be a non-empty string');
  return new Session(id, store, snapshot);
}
