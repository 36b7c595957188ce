import { asyncScheduler, Observable, Subject, type SchedulerLike } from 'rxjs';
import type { AgentResponse } from '../events/types';
import { InMemorySessionStore } from '../session/inMemorySessionStore';
import type { SessionAppend, SessionLeaseClaim, SessionTurn, StoredSession } from '../session/sessionStore';
import { isArray } from '../internal/isArray';
import { isScheduler } from '../internal/isScheduler';
import { checkOptions, optionNames } from '../internal/optionNames';
import { JournalConflictError, RunNotFoundError } from './errors';
import { recordText, type JournalEntry, type JournalRecord } from './records';
import type { AgentStore, LeaseClaim, RunLease, RunReceived } from './store';

/**
 * What {@link memoryStore} takes.
 *
 * @example
 * memoryStore({ retainMs: 60_000, scheduler: testScheduler });
 */
export interface MemoryStoreOptions {
  /** How long a finished run's journal is kept, in ms (default 0: dropped when the run ends). */
  retainMs?: number;
  /** The clock of leases and retention (default `asyncScheduler`; a `TestScheduler` in marble tests). */
  scheduler?: SchedulerLike;
}

const MEMORY_STORE_OPTIONS = optionNames<MemoryStoreOptions>({ retainMs: true, scheduler: true });

/** One run's data: records kept as JSON text, as a remote store would hold them. */
interface RunData {
  readonly entries: string[];
  readonly appended: Subject<JournalEntry>;
  readonly answers: Map<string, string>;
  readonly answered: Subject<AgentResponse>;
  cancelled: boolean;
  readonly cancel: Subject<void>;
  /** When the `end` record was written (the store's clock). */
  endedAt: number | undefined;
}

/**
 * An {@link AgentStore} in memory: the durable-run semantics inside one process (several agents
 * and runs sharing it), with every answer given at once, so runs on it stay in virtual time in
 * marble tests. Records, answers and sessions are copied in and out as JSON text, so what it
 * keeps is exactly what a remote store would. A finished run's journal is dropped when the run
 * ends (or `retainMs` later, checked whenever the store is used: no timer); `agent.runs.get()`
 * then answers undefined, and `resume` reports `RunNotFoundError`.
 *
 * @example
 * const store = memoryStore();
 * const agent = createAgent({ model, tools, store });
 * agent.run('Pay the invoice', { runId: 'run-1', onRequest: 'suspend' }).subscribe(render);
 * // later, from anywhere holding `agent` (or another agent on the same store):
 * await agent.respond('run-1', { type: 'permission-response', requestId, approved: true });
 * agent.resume('run-1').subscribe(render);
 */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  checkOptions('memoryStore', options, MEMORY_STORE_OPTIONS);
  const { retainMs = 0, scheduler = asyncScheduler } = options;
  if (typeof retainMs !== 'number' || !(retainMs >= 0)) throw new TypeError(`memoryStore: 'retainMs' must be a number >= 0, got ${String(retainMs)}`);
  if (!isScheduler(scheduler)) throw new TypeError("memoryStore: 'scheduler' must be an rxjs SchedulerLike");
  return new MemoryStore(retainMs, scheduler);
}

/**
 * The store {@link memoryStore} makes: an {@link AgentStore} whose every method answers at once.
 *
 * @example
 * const store: MemoryStore = memoryStore();
 * store.read('run-1')?.length; // no await needed
 */
export class MemoryStore implements AgentStore {
  private readonly runs = new Map<string, RunData>();
  private readonly leases = new Map<string, RunLease>();
  private readonly sessions: InMemorySessionStore;

  /** @internal Made by {@link memoryStore}. */
  constructor(
    private readonly retainMs: number,
    private readonly scheduler: SchedulerLike,
  ) {
    this.sessions = new InMemorySessionStore({ scheduler });
  }

  /** The run's data, unless it is missing or past its retention (then dropped). */
  private run(runId: string): RunData | undefined {
    const run = this.runs.get(runId);
    if (run && run.endedAt !== undefined && this.scheduler.now() - run.endedAt >= this.retainMs) {
      this.drop(runId, run);
      return undefined;
    }
    return run;
  }

  private drop(runId: string, run: RunData): void {
    this.runs.delete(runId);
    run.appended.complete();
    run.answered.complete();
    run.cancel.complete();
  }

  append(runId: string, expected: number, records: readonly JournalRecord[]): number {
    if (typeof runId !== 'string' || runId === '') throw new TypeError('append: a run id must be a non-empty string');
    if (!isArray(records)) throw new TypeError('append: records must be an array');
    let run = this.run(runId);
    const actual = run ? run.entries.length : 0;
    if (actual !== expected) throw new JournalConflictError(runId, expected, actual);
    if (run?.endedAt !== undefined && records.length > 0) throw new JournalConflictError(runId, expected, actual);
    // Serialised first, all of them: a record that cannot be written leaves the journal untouched.
    const texts = records.map((record) => recordText(runId, record));
    if (records.length === 0) return actual;
    if (!run) {
      run = { entries: [], appended: new Subject(), answers: new Map(), answered: new Subject(), cancelled: false, cancel: new Subject(), endedAt: undefined };
      this.runs.set(runId, run);
    }
    const start = run.entries.length;
    for (const text of texts) run.entries.push(text);
    if (records.some((record) => record.kind === 'end')) run.endedAt = this.scheduler.now();
    // Followers get copies, as from a remote store (none made when nobody follows).
    if (run.appended.observed) {
      for (let i = 0; i < texts.length; i++) run.appended.next({ position: start + i + 1, record: JSON.parse(texts[i]) as JournalRecord });
    }
    if (run.endedAt !== undefined && this.retainMs === 0) this.drop(runId, run);
    return start + texts.length;
  }

  read(runId: string, after = 0): readonly JournalEntry[] | undefined {
    const run = this.run(runId);
    if (!run) return undefined;
    const out: JournalEntry[] = [];
    for (let i = after; i < run.entries.length; i++) out.push({ position: i + 1, record: JSON.parse(run.entries[i]) as JournalRecord });
    return out;
  }

  follow(runId: string, after: number): Observable<JournalEntry> {
    return new Observable<JournalEntry>((subscriber) => {
      const run = this.run(runId);
      if (!run) return subscriber.error(new RunNotFoundError(runId));
      let next = after + 1;
      // What is there first (an append made while a reader reacts is picked up by this loop)…
      while (next <= run.entries.length && !subscriber.closed) {
        const position = next++;
        subscriber.next({ position, record: JSON.parse(run.entries[position - 1]) as JournalRecord });
      }
      if (subscriber.closed) return;
      if (run.appended.closed || this.runs.get(runId) !== run) return subscriber.complete();
      // …then each append, none twice.
      return run.appended.subscribe({
        next: (entry) => {
          if (entry.position !== next) return;
          next++;
          subscriber.next(entry);
        },
        complete: () => subscriber.complete(),
      });
    });
  }

  putAnswer(runId: string, response: AgentResponse): boolean {
    const run = this.run(runId);
    if (!run || !response || typeof response.requestId !== 'string') return false;
    if (run.answers.has(response.requestId)) return false;
    const text = JSON.stringify(response);
    run.answers.set(response.requestId, text);
    run.answered.next(JSON.parse(text) as AgentResponse);
    return true;
  }

  answers(runId: string): Observable<AgentResponse> {
    return new Observable<AgentResponse>((subscriber) => {
      const run = this.run(runId);
      if (!run) return; // nothing kept and nothing to come
      const seen = new Set<string>();
      for (const [requestId, text] of run.answers) {
        if (subscriber.closed) return;
        seen.add(requestId);
        subscriber.next(JSON.parse(text) as AgentResponse);
      }
      return run.answered.subscribe({
        next: (response) => {
          if (!seen.has(response.requestId)) subscriber.next(response);
        },
      });
    });
  }

  received(runId: string): RunReceived {
    const run = this.run(runId);
    if (!run) return { answers: [], cancelled: false };
    return { answers: [...run.answers.values()].map((text) => JSON.parse(text) as AgentResponse), cancelled: run.cancelled };
  }

  requestCancel(runId: string): void {
    const run = this.run(runId);
    if (!run || run.cancelled) return;
    run.cancelled = true;
    run.cancel.next();
  }

  cancellations(runId: string): Observable<void> {
    return new Observable<void>((subscriber) => {
      const run = this.run(runId);
      if (!run) return;
      if (run.cancelled) {
        subscriber.next();
        return subscriber.complete();
      }
      return run.cancel.subscribe({
        next: () => {
          subscriber.next();
          subscriber.complete();
        },
      });
    });
  }

  acquireLease(runId: string, owner: string, ttlMs: number): LeaseClaim {
    const now = this.scheduler.now();
    const held = this.leases.get(runId);
    if (held && held.owner !== owner && held.expiresAt > now) return { acquired: false, lease: held };
    const lease = { owner, expiresAt: now + ttlMs };
    this.leases.set(runId, lease);
    return { acquired: true, lease };
  }

  renewLease(runId: string, owner: string, ttlMs: number): boolean {
    const now = this.scheduler.now();
    const held = this.leases.get(runId);
    if (!held || held.owner !== owner || held.expiresAt <= now) return false;
    this.leases.set(runId, { owner, expiresAt: now + ttlMs });
    return true;
  }

  releaseLease(runId: string, owner: string): void {
    if (this.leases.get(runId)?.owner === owner) this.leases.delete(runId);
  }

  getLease(runId: string): RunLease | undefined {
    const held = this.leases.get(runId);
    if (!held) return undefined;
    if (held.expiresAt <= this.scheduler.now()) {
      this.leases.delete(runId);
      return undefined;
    }
    return held;
  }

  load(id: string): StoredSession | undefined {
    return this.sessions.load(id);
  }

  revision(id: string): number | undefined {
    return this.sessions.revision(id);
  }

  appendTurn(id: string, expected: number, turn: SessionTurn): SessionAppend {
    return this.sessions.appendTurn(id, expected, turn);
  }

  fork(parentId: string, forkId: string, at: number): void {
    this.sessions.fork(parentId, forkId, at);
  }

  forks(id: string): readonly string[] {
    return this.sessions.forks(id);
  }

  delete(id: string): void {
    this.sessions.delete(id);
  }

  acquireSession(id: string, owner: string, ttlMs: number): SessionLeaseClaim {
    return this.sessions.acquireSession(id, owner, ttlMs);
  }

  renewSession(id: string, owner: string, ttlMs: number): boolean {
    return this.sessions.renewSession(id, owner, ttlMs);
  }

  releaseSession(id: string, owner: string): void {
    this.sessions.releaseSession(id, owner);
  }

  sessionReleases(id: string): Observable<void> {
    return this.sessions.sessionReleases(id);
  }
}
