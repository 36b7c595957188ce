import { Observable, from, map, noop, of } from 'rxjs';
import { z } from 'zod';
import { MessageSchema, type ContentPart, type Message, type ToolCallPart } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import { UnparsedArguments } from '../messages/unparsedArguments';
import { StateBag, type StoredState } from '../state/stateBag';
import { isPromiseLike } from '../internal/isPromiseLike';
import { uniqueId } from '../internal/uniqueId';
import { zodIssues } from '../internal/zodIssues';

/**
 * The messages with a tool call's arguments that were not JSON (an {@link UnparsedArguments}) as
 * the model's text, what a JSON round trip makes of them: a snapshot is plain data, also for a
 * store that keeps objects without serialising them (structured clone drops the class).
 */
function plainMessages(messages: Message[]): Message[] {
  for (let i = 0; i < messages.length; i++) {
    const { content } = messages[i];
    if (content.some(isUnparsedCall)) {
      messages[i] = { ...messages[i], content: content.map((part) => (isUnparsedCall(part) ? { ...part, args: part.args.text } : part)) };
    }
  }
  return messages;
}

function isUnparsedCall(part: ContentPart): part is ToolCallPart & { args: UnparsedArguments } {
  return part.type === 'tool-call' && part.args instanceof UnparsedArguments;
}

/** A session as plain JSON: history and session-scoped middleware state. */
export interface SessionSnapshot {
  /** The snapshot format's version. */
  readonly version: 1;
  readonly id: string;
  readonly messages: readonly Message[];
  readonly state: Readonly<Record<string, StoredState>>;
}

// `value` may be missing: JSON drops a state whose value is `undefined`.
const StoredStateSchema = z.object({ version: z.number().int().positive(), value: z.unknown().optional() });

/** zod schema of a {@link SessionSnapshot}. */
export const SessionSnapshotSchema = z.object({
  version: z.literal(1),
  id: z.string().min(1),
  messages: z.array(MessageSchema),
  state: z.record(z.string(), StoredStateSchema),
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
 * A session store in memory, for the Session objects of one process to share. Snapshots are copied
 * in and out as JSON text, so what it keeps is exactly what a remote store would. (Without any
 * store, a session lives in its own object, in memory too, and no other object sees it.)
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
   * objects for one id, one per request say, each start from what the last run saved). Without
   * one, the session is kept in this object only (in memory): another object with the same id
   * starts empty and does not share the one-run-at-a-time lock.
   */
  store?: SessionStore;
  /** Restores a session from `session.snapshot()`: a {@link SessionSnapshot}, which createSession checks. */
  snapshot?: unknown;
}

/**
 * What the Session objects of one store share about an id: the run using it (runs on one id must
 * not overlap, whichever object they use), how many saves it has had, and a save in flight. Each
 * object holds its record; the registry only points at it weakly, so the record of an id whose
 * objects are all gone is collected with them (a server sees ids come and go without end).
 */
interface IdRecord {
  run: string | undefined;
  saves: number;
  /** A save in flight, and the object making it. */
  saving: { readonly done: Promise<unknown>; readonly by: Session } | undefined;
}

type IdRecords = Map<string, WeakRef<IdRecord>>;

/**
 * The records of every store, in one registry on the global object under a global symbol rather
 * than in a module variable, so that the ESM and CJS copies of this package, loaded side by side,
 * share it too.
 */
function registry(): WeakMap<SessionStore, IdRecords> {
  const global = globalThis as { [key: symbol]: WeakMap<SessionStore, IdRecords> | undefined };
  return (global[Symbol.for('rx-agent.session.records')] ??= new WeakMap());
}

/** Drops the registry entry of a collected record (unless a newer record took the id since). */
const collected = new FinalizationRegistry<{ readonly ids: IdRecords; readonly id: string }>(({ ids, id }) => {
  if (ids.get(id)?.deref() === undefined) ids.delete(id);
});

function recordOf(store: SessionStore | undefined, id: string): IdRecord | undefined {
  if (!store) return undefined;
  const stores = registry();
  let ids = stores.get(store);
  if (!ids) stores.set(store, (ids = new Map<string, WeakRef<IdRecord>>()));
  let record = ids.get(id)?.deref();
  if (!record) {
    record = { run: undefined, saves: 0, saving: undefined };
    ids.set(id, new WeakRef(record));
    collected.register(record, { ids, id });
  }
  return record;
}

/**
 * A conversation that outlives one run: history and session-scoped state.
 */
export class Session {
  private log: MessageLog;
  private bag: StateBag;
  private loaded: boolean;
  private activeRun: string | undefined;
  /** What the objects of this store and id share (none without a store). */
  private readonly record: IdRecord | undefined;
  /** The store's save count this object's copy matches: another object's save since means reading again. */
  private saves: number;

  /** @internal */
  constructor(
    readonly id: string,
    readonly store: SessionStore | undefined,
    snapshot: SessionSnapshot | undefined,
  ) {
    this.log = MessageLog.of(snapshot?.messages ?? []);
    this.bag = StateBag.fromStored(snapshot?.state);
    this.loaded = snapshot !== undefined || store === undefined;
    this.record = recordOf(store, id);
    this.saves = this.record?.saves ?? 0;
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
   * @internal Claims the session for a run; a second concurrent run is refused, also through
   * another Session object for the same id and store.
   */
  acquire(runId: string): void {
    const record = this.record;
    const active = this.activeRun ?? record?.run;
    if (active !== undefined) {
      throw new Error(`Session '${this.id}' is in use by run '${active}'`);
    }
    this.activeRun = runId;
    if (record) {
      record.run = runId;
      // Another object saved a turn since this one's copy, or is saving one: read the store again
      // (load waits for a save in flight).
      if (record.saves !== this.saves || (record.saving && record.saving.by !== this)) this.loaded = false;
    }
  }

  /** @internal */
  release(runId: string): void {
    if (this.activeRun !== runId) return;
    this.activeRun = undefined;
    const record = this.record;
    if (record?.run === runId) record.run = undefined;
  }

  /**
   * @internal Loads the session from its store for a run (at once for the in-memory store). A
   * load the run gave up on (unsubscribed before the store answered) changes nothing.
   */
  load(): Observable<{ log: MessageLog; state: StateBag }> {
    const { store, record } = this;
    // `loaded` is false only with a store (and so a record).
    if (this.loaded || !store || !record) return of({ log: this.log, state: this.bag });
    const apply = (snapshot: SessionSnapshot | undefined) => {
      if (snapshot !== undefined) {
        const parsed = parseSnapshot(snapshot);
        this.log = MessageLog.of(parsed.messages);
        this.bag = StateBag.fromStored(parsed.state);
      } else {
        // Nothing stored (deleted or expired since this copy was read): start over as a new object
        // would, rather than save the old copy back.
        this.log = MessageLog.empty;
        this.bag = StateBag.empty;
      }
      this.loaded = true;
      // No save can land while the store answers: this run holds the id, and every other save
      // (one started by a run left by unsubscribing) is started before its run lets the id go and
      // is waited for below. So the answer holds every save counted.
      this.saves = record.saves;
      return { log: this.log, state: this.bag };
    };
    const read = () => store.load(this.id);
    // A save still in flight (a run left by unsubscribing) is waited for, so the store has it.
    const saving = record.saving;
    if (saving) return from(saving.done.then(read)).pipe(map(apply));
    const stored = read();
    return isPromiseLike(stored) ? from(Promise.resolve(stored)).pipe(map(apply)) : of(apply(stored));
  }

  /**
   * @internal Keeps a turn's outcome and saves it to the store, after any save of this id still in
   * flight: saves land in the order of their turns.
   */
  commit(log: MessageLog, state: StateBag): void | Promise<void> {
    this.log = log;
    this.bag = state.ofScope('session');
    const { store, record } = this;
    if (!store || !record) return;
    const snapshot = this.snapshot();
    const done = () => {
      record.saves++;
      this.saves = record.saves; // this object's copy is what the store now holds
    };
    const before = record.saving?.done;
    const saved = before ? before.then(() => store.save(snapshot)) : store.save(snapshot);
    if (!isPromiseLike(saved)) return done();
    const saving = Promise.resolve(saved).then(done);
    const settled = saving.then(noop, noop);
    const inFlight = { done: settled, by: this };
    record.saving = inFlight;
    void settled.then(() => {
      if (record.saving === inFlight) record.saving = undefined;
    });
    return saving;
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
  // zod's record leaves out an own key named `__proto__` (JSON.parse makes one): put it back, checked.
  const state = (value as { state: object }).state;
  const own = Object.getOwnPropertyDescriptor(state, '__proto__');
  if (own) {
    const entry = StoredStateSchema.safeParse(own.value);
    if (!entry.success) throw new TypeError(`Invalid session snapshot: ${zodIssues(entry.error)} (state '__proto__')`);
    Object.defineProperty(parsed.data.state, '__proto__', { value: entry.data, enumerable: true, writable: true, configurable: true });
  }
  return parsed.data as SessionSnapshot;
}
