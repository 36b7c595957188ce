import { asyncScheduler, type Observable, type SchedulerLike } from 'rxjs';
import { withIds } from '../messages/message';
import { isArray } from '../internal/isArray';
import { isScheduler } from '../internal/isScheduler';
import { checkOptions, optionNames } from '../internal/optionNames';
import { show } from '../internal/show';
import { checkOwner, checkTtl } from '../internal/leaseArguments';
import { SessionConflictError } from './errors';
import { LocalLeases } from './localLeases';
import type { SessionAppend, SessionLeaseClaim, SessionStore, SessionTurn, StoredSession } from './sessionStore';
import { SessionContent, foldTurns } from './sessionTurns';
import type { StoredState } from '../state/stateBag';

/** One session: its turns as JSON text (as a remote store keeps them), the runs that made them, its forks. */
interface Entry {
  readonly turns: string[];
  readonly runs: Set<string>;
  readonly forks: string[];
  /** The run of the last turn. */
  lastRun: string | undefined;
  /** A fork: the parent, its revision and the count of its messages shared, and the state copied. */
  readonly parent: { readonly id: string; readonly revision: number; readonly at: number; readonly state: string } | undefined;
}

/**
 * What {@link InMemorySessionStore} takes.
 *
 * @example
 * new InMemorySessionStore({ scheduler: testScheduler });
 */
export interface InMemorySessionStoreOptions {
  /** The clock of session leases (default `asyncScheduler`; a `TestScheduler` in marble tests). */
  scheduler?: SchedulerLike;
}

const OPTIONS = optionNames<InMemorySessionStoreOptions>({ scheduler: true });

/**
 * A session store in memory, for the Session objects of one process to share. Turns are copied in
 * and out as JSON text, so what it keeps is exactly what a remote store would; every method answers
 * at once. (Without any store, a session lives in its own object, in memory too, and no other object
 * sees it.)
 *
 * @example
 * const store = new InMemorySessionStore();
 * const session = createSession({ id: 'user-42', store });
 */
export class InMemorySessionStore implements SessionStore {
  private readonly sessions = new Map<string, Entry>();
  private readonly leases: LocalLeases;

  constructor(options: InMemorySessionStoreOptions = {}) {
    checkOptions('InMemorySessionStore', options, OPTIONS);
    const { scheduler = asyncScheduler } = options;
    if (!isScheduler(scheduler)) throw new TypeError("InMemorySessionStore: 'scheduler' must be an rxjs SchedulerLike");
    this.leases = new LocalLeases(() => scheduler.now());
  }

  load(id: string): StoredSession | undefined {
    checkId('load', id);
    const entry = this.sessions.get(id);
    if (!entry) return undefined;
    const { content } = this.fold(entry, entry.turns.length);
    const base: StoredSession = { version: 1 as const, id, messages: withIds(content.messages), state: content.state, revision: entry.turns.length };
    const withRun = entry.lastRun === undefined ? base : { ...base, lastRunId: entry.lastRun };
    return entry.parent ? { ...withRun, parentId: entry.parent.id, forkedAt: entry.parent.at } : withRun;
  }

  revision(id: string): number | undefined {
    checkId('revision', id);
    return this.sessions.get(id)?.turns.length;
  }

  /** The content of `entry` after its first `revision` turns (the state as of `at` messages too). */
  private fold(entry: Entry, revision: number, at?: number): ReturnType<typeof foldTurns> {
    const parent = entry.parent;
    if (!parent) return foldTurns(new SessionContent([], {}), turnsOf(entry, revision), at);
    const from = this.sessions.get(parent.id) as Entry; // a parent is kept while it has forks
    // The parent's fold answers the state as of `at` within the history the fork shares with it.
    const shared = this.fold(from, parent.revision, at);
    const prefix = shared.content.messages;
    prefix.length = parent.at;
    const start = new SessionContent(prefix, JSON.parse(parent.state) as Record<string, StoredState>);
    return foldTurns(start, turnsOf(entry, revision), at, shared.stateAt);
  }

  appendTurn(id: string, expected: number, turn: SessionTurn): SessionAppend {
    checkId('appendTurn', id);
    checkTurn(expected, turn);
    const entry = this.sessions.get(id);
    if (entry?.runs.has(turn.runId)) return { revision: entry.turns.length, appended: false };
    const actual = entry ? entry.turns.length : 0;
    if (actual !== expected) throw new SessionConflictError(id, expected, actual);
    const text = JSON.stringify(turn); // first: a turn that cannot be written leaves the session as it was
    const target = entry ?? this.create(id, undefined);
    target.turns.push(text);
    target.runs.add(turn.runId);
    target.lastRun = turn.runId;
    return { revision: target.turns.length, appended: true };
  }

  fork(parentId: string, forkId: string, at: number): void {
    checkId('fork', parentId);
    checkId('fork', forkId);
    const parent = this.sessions.get(parentId);
    if (!parent) throw new TypeError(`fork: no session '${parentId}' in the store`);
    if (this.sessions.has(forkId))
      throw new SessionConflictError(forkId, 0, this.sessions.get(forkId)?.turns.length ?? 0, `Session '${forkId}' exists already`);
    const { content, stateAt } = this.fold(parent, parent.turns.length, at);
    checkAt(at, content.messages.length);
    this.create(forkId, { id: parentId, revision: parent.turns.length, at, state: stateAt });
    parent.forks.push(forkId);
  }

  forks(id: string): readonly string[] {
    checkId('forks', id);
    return this.sessions.get(id)?.forks.slice() ?? [];
  }

  delete(id: string): void {
    checkId('delete', id);
    const entry = this.sessions.get(id);
    if (!entry) return;
    if (entry.forks.length > 0) throw new SessionConflictError(id, entry.turns.length, entry.turns.length, forkedError(id, entry.forks));
    this.sessions.delete(id);
    if (entry.parent) {
      const forks = this.sessions.get(entry.parent.id)?.forks;
      const i = forks ? forks.indexOf(id) : -1;
      if (forks && i >= 0) forks.splice(i, 1);
    }
  }

  acquireSession(id: string, owner: string, ttlMs: number): SessionLeaseClaim {
    checkLease('acquireSession', id, owner, ttlMs);
    return this.leases.acquire(id, owner, ttlMs);
  }

  renewSession(id: string, owner: string, ttlMs: number): boolean {
    checkLease('renewSession', id, owner, ttlMs);
    return this.leases.renew(id, owner, ttlMs);
  }

  releaseSession(id: string, owner: string): void {
    checkId('releaseSession', id);
    this.leases.release(id, owner);
  }

  sessionReleases(id: string): Observable<void> {
    checkId('sessionReleases', id);
    return this.leases.releases(id);
  }

  private create(id: string, parent: Entry['parent']): Entry {
    const entry: Entry = { turns: [], runs: new Set(), forks: [], lastRun: undefined, parent };
    this.sessions.set(id, entry);
    return entry;
  }
}

function* turnsOf(entry: Entry, revision: number): Iterable<SessionTurn> {
  for (let i = 0; i < revision; i++) yield JSON.parse(entry.turns[i]) as SessionTurn;
}

/** @internal Checks a session id. */
export function checkId(method: string, id: unknown): asserts id is string {
  if (typeof id !== 'string' || id === '') throw new TypeError(`${method}: a session id must be a non-empty string, got ${show(id)}`);
}

/** @internal Checks an append's expected revision and turn. */
export function checkTurn(expected: unknown, turn: SessionTurn): void {
  if (typeof expected !== 'number' || !Number.isInteger(expected) || expected < 0) {
    throw new TypeError(`appendTurn: the expected revision must be an integer >= 0, got ${show(expected)}`);
  }
  if (turn === null || typeof turn !== 'object') throw new TypeError(`appendTurn: expected a turn object, got ${show(turn)}`);
  if (typeof turn.runId !== 'string' || turn.runId === '')
    throw new TypeError(`appendTurn: a turn's 'runId' must be a non-empty string, got ${show(turn.runId)}`);
  if (!isArray(turn.messages)) throw new TypeError(`appendTurn: a turn's 'messages' must be an array, got ${show(turn.messages)}`);
  if (turn.state === null || typeof turn.state !== 'object') throw new TypeError(`appendTurn: a turn's 'state' must be an object, got ${show(turn.state)}`);
}

/** @internal Checks a fork point against the parent's length. */
export function checkAt(at: unknown, length: number): void {
  if (typeof at !== 'number' || !Number.isInteger(at) || at < 0 || at > length) {
    throw new TypeError(`fork: 'at' must be an integer from 0 to ${length} (the parent's message count), got ${show(at)}`);
  }
}

/** @internal Checks a session lease's arguments. */
export function checkLease(method: string, id: unknown, owner: unknown, ttlMs: unknown): void {
  checkId(method, id);
  checkOwner(method, owner);
  checkTtl(method, ttlMs);
}

/** @internal The message of a refused delete. */
export function forkedError(id: string, forks: readonly string[]): string {
  return `Session '${id}' has forks (${forks.map((f) => `'${f}'`).join(', ')}) that read its history: delete them first`;
}
