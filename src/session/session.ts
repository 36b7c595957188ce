import { Observable, from, of } from 'rxjs';
import { z } from 'zod';
import { MessageSchema, type Message } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import { StateBag, type StoredState } from '../state/stateBag';
import { isPromiseLike } from '../internal/isPromiseLike';
import { uniqueId } from '../internal/uniqueId';
import { zodIssues } from '../internal/zodIssues';

/** A session as plain JSON: history and session-scoped middleware state. */
export interface SessionSnapshot {
  /** The snapshot format's version. */
  readonly version: 1;
  readonly id: string;
  readonly messages: readonly Message[];
  readonly state: Readonly<Record<string, StoredState>>;
}

/** zod schema of a {@link SessionSnapshot}. */
export const SessionSnapshotSchema = z.object({
  version: z.literal(1),
  id: z.string().min(1),
  messages: z.array(MessageSchema),
  state: z.record(z.string(), z.object({ version: z.number().int().positive(), value: z.unknown() })),
});

/**
 * Where sessions are kept. Each method may answer at once or with a Promise, so a file, Redis
 * or Postgres store fits; the in-memory store answers at once (no Promise in the marble path).
 */
export interface SessionStore {
  load(id: string): SessionSnapshot | undefined | Promise<SessionSnapshot | undefined>;
  save(snapshot: SessionSnapshot): void | Promise<void>;
  delete?(id: string): void | Promise<void>;
}

/**
 * A session store in memory (the default). Snapshots are copied in and out as JSON text, so
 * what it keeps is exactly what a remote store would.
 *
 * @example
 * const store = new InMemorySessionStore();
 * const session = createSession({ id: 'user-42', store });
 */
export class InMemorySessionStore implements SessionStore {
  private readonly data = new Map<string, string>();

  load(id: string): SessionSnapshot | undefined {
    const text = this.data.get(id);
    return text === undefined ? undefined : (JSON.parse(text) as SessionSnapshot);
  }

  save(snapshot: SessionSnapshot): void {
    this.data.set(snapshot.id, JSON.stringify(snapshot));
  }

  delete(id: string): void {
    this.data.delete(id);
  }
}

/** What {@link createSession} takes. */
export interface SessionOptions {
  id?: string;
  /**
   * Where turns are saved, and loaded from at the start of every run (so that several `Session`
   * objects for one id, one per request say, each start from what the last run saved).
   */
  store?: SessionStore;
  /** Restores a session from `session.snapshot()`. */
  snapshot?: SessionSnapshot | unknown;
}

/** The ids in use by a run, per store: runs on one id must not overlap, whichever object they use. */
const inUse = new WeakMap<SessionStore, Map<string, string>>();

/**
 * A conversation that outlives one run: history and session-scoped state.
 */
export class Session {
  private log: MessageLog;
  private bag: StateBag;
  private loaded: boolean;
  private activeRun: string | undefined;
  /** A run has used this object (its first run reads the store, or starts from the snapshot given). */
  private ran = false;

  /** @internal */
  constructor(
    readonly id: string,
    readonly store: SessionStore | undefined,
    snapshot: SessionSnapshot | undefined,
  ) {
    this.log = MessageLog.of(snapshot?.messages ?? []);
    this.bag = StateBag.fromStored(snapshot?.state);
    this.loaded = snapshot !== undefined || store === undefined;
  }

  /** The history so far. */
  get messages(): readonly Message[] {
    return this.log.toArray();
  }

  /** The session as plain JSON, synchronously. */
  snapshot(): SessionSnapshot {
    return { version: 1, id: this.id, messages: this.log.since(0), state: this.bag.toStored('session') };
  }

  /**
   * @internal Claims the session for a run; a second concurrent run is refused, also through
   * another Session object for the same id and store.
   */
  acquire(runId: string): void {
    const byId = this.store ? inUse.get(this.store) : undefined;
    const active = this.activeRun ?? byId?.get(this.id);
    if (active !== undefined) {
      throw new Error(`Session '${this.id}' is in use by run '${active}'`);
    }
    this.activeRun = runId;
    if (this.store) {
      if (byId) byId.set(this.id, runId);
      else inUse.set(this.store, new Map([[this.id, runId]]));
      // Another object may have saved a turn since the last run: read the store again.
      if (this.ran) this.loaded = false;
    }
    this.ran = true;
  }

  /** @internal */
  release(runId: string): void {
    if (this.activeRun !== runId) return;
    this.activeRun = undefined;
    const byId = this.store ? inUse.get(this.store) : undefined;
    if (byId?.get(this.id) === runId) byId.delete(this.id);
  }

  /** @internal Loads the session from its store for a run (at once for the in-memory store). */
  load(): Observable<{ log: MessageLog; state: StateBag }> {
    if (this.loaded || !this.store) return of({ log: this.log, state: this.bag });
    const stored = this.store.load(this.id);
    const apply = (snapshot: SessionSnapshot | undefined) => {
      if (snapshot !== undefined && !this.loaded) {
        const parsed = parseSnapshot(snapshot);
        this.log = MessageLog.of(parsed.messages);
        this.bag = StateBag.fromStored(parsed.state);
      }
      this.loaded = true;
      return { log: this.log, state: this.bag };
    };
    return isPromiseLike(stored) ? from(Promise.resolve(stored).then(apply)) : of(apply(stored));
  }

  /** @internal Keeps a turn's outcome and saves it to the store. */
  commit(log: MessageLog, state: StateBag): void | Promise<void> {
    this.log = log;
    this.bag = state.ofScope('session');
    return this.store?.save(this.snapshot());
  }
}

/**
 * Makes a session. With `snapshot`, restores one (checked with zod); a state that no longer fits
 * its definition is reported as a `StateError` when a middleware first reads it.
 *
 * @example
 * const session = createSession();
 * await agent.invoke('My name is Ada.', { session });
 * await agent.invoke('What is my name?', { session });
 * const saved = JSON.stringify(session.snapshot());
 * const again = createSession({ snapshot: JSON.parse(saved) });
 */
export function createSession(options: SessionOptions = {}): Session {
  if (options === null || typeof options !== 'object') throw new TypeError('createSession: expected an options object');
  const { store } = options;
  if (store !== undefined && (store === null || typeof store.load !== 'function' || typeof store.save !== 'function')) {
    throw new TypeError("createSession: 'store' must have load(id) and save(snapshot) methods");
  }
  const snapshot = options.snapshot === undefined ? undefined : parseSnapshot(options.snapshot);
  const id = options.id !== undefined ? options.id : (snapshot?.id ?? uniqueId('session'));
  if (typeof id !== 'string' || id === '') throw new TypeError('createSession: id must be a non-empty string');
  return new Session(id, store, snapshot);
}

function parseSnapshot(value: unknown): SessionSnapshot {
  const parsed = SessionSnapshotSchema.safeParse(value);
  if (!parsed.success) {
    throw new TypeError(`Invalid session snapshot: ${zodIssues(parsed.error)}`);
  }
  return parsed.data as SessionSnapshot;
}

