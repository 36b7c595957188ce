import type Redis from 'ioredis';
import { firstValueFrom, lastValueFrom, of, Subscription, take, tap, timeout, toArray, type Observable, type SchedulerAction, type SchedulerLike } from 'rxjs';
import {
  JournalConflictError,
  JournalFormatError,
  RunNotFoundError,
  SessionConflictError,
  type AgentResponse,
  type AgentStore,
  type JournalEntry,
  type JournalRecord,
} from 'rx-agent';
import { runKeys } from '../../src/redis/keys';
import { COMMAND_NAMES, SCRIPTS } from '../../src/redis/scripts';
import { redisStore } from 'rx-agent/redis';
import { connectRedis, deleteKeys, REDIS_URL, uniquePrefix } from '../support/redis';

const event = (seq: number, text = 'tok '): JournalRecord => ({ version: 1, kind: 'event', event: { type: 'text-delta', iteration: 0, text, seq } as never });
const end: JournalRecord = { version: 1, kind: 'end', reason: 'completed' };
const permission = (requestId: string, approved = true): AgentResponse => ({ type: 'permission-response', requestId, approved });

/** Collects what an Observable emits until `count` items came. */
const first = <T>(source: Observable<T>, count: number) => firstValueFrom(source.pipe(take(count), toArray()));
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Hostile ids: quotes, braces (a key's hash tag), `%`, NUL, newlines, a lone surrogate, an emoji, 1 MB. */
const HOSTILE_IDS: readonly [string, string][] = [
  ['quotes', `it's "quoted" \`too\``],
  ['braces', '}{run}{'],
  ['percent', '%7D%25'],
  ['NUL and newlines', 'a\u0000b\nc\r\nd'],
  ['a lone surrogate', 'x\uD800y'],
  ['another lone surrogate', 'x\uDFFFy'],
  ['an emoji', 'run-🦊'],
  ['1 MB', 'r'.repeat(1 << 20)],
];

let client: Redis;
let other: Redis;
let prefix: string;
let store: AgentStore;
/** The same keys through another connection: what another process sees. */
let otherStore: AgentStore;

/**
 * A client whose store's pub/sub connection subscribes only once `listen()` is called (a slow
 * connection): its followers' first read comes after that.
 */
async function slowListener(): Promise<{ client: Redis; listen: () => void }> {
  const late = await connectRedis();
  let listen: () => void = () => undefined;
  const listening = new Promise<void>((resolve) => (listen = resolve));
  const duplicate = late.duplicate.bind(late);
  late.duplicate = (...args: Parameters<Redis['duplicate']>) => {
    const connection = duplicate(...args);
    const subscribe = connection.subscribe.bind(connection);
    connection.subscribe = (async (...channels: string[]) => {
      await listening;
      return subscribe(...channels);
    }) as never;
    return connection;
  };
  return { client: late, listen };
}

/**
 * Watches one of the store's scripts on a client (after a store defined it there): `answered()`
 * resolves with the next call's answer; after `hold()`, the calls wait in this process (as on a
 * slow or busy client) until `release()`, their arguments taken already.
 */
function watchScript(on: Redis, name: 'mark' | 'read') {
  const command = COMMAND_NAMES[name];
  const target = on as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const original = target[command].bind(on);
  let gate: Promise<void> | undefined;
  let open: () => void = () => undefined;
  let waiting: ((answer: unknown) => void)[] = [];
  target[command] = (...args: unknown[]) => {
    const call = gate ? gate.then(() => original(...args)) : original(...args);
    const told = waiting;
    waiting = [];
    void call.then(
      (answer) => told.forEach((tell) => tell(answer)),
      () => undefined,
    );
    return call;
  };
  return {
    answered: () => new Promise<unknown>((resolve) => waiting.push(resolve)),
    hold: () => void (gate = new Promise<void>((resolve) => (open = resolve))),
    release: () => {
      gate = undefined;
      open();
    },
  };
}

/**
 * A client whose store's pub/sub connection hands the messages it gets to the store only once
 * `deliver()` is called, after `hold()` (a slow connection, or a busy process).
 */
async function slowMessages(): Promise<{ client: Redis; hold: () => void; deliver: () => void }> {
  const slow = await connectRedis();
  let holding = false;
  let queued: (() => void)[] = [];
  const duplicate = slow.duplicate.bind(slow);
  slow.duplicate = (...args: Parameters<Redis['duplicate']>) => {
    const connection = duplicate(...args);
    const emit = connection.emit.bind(connection);
    connection.emit = ((event: string | symbol, ...rest: unknown[]) => {
      if (event !== 'message' || !holding) return emit(event, ...rest);
      queued.push(() => emit(event, ...rest));
      return true;
    }) as never;
    return connection;
  };
  return {
    client: slow,
    hold: () => void (holding = true),
    deliver: () => {
      holding = false;
      const now = queued;
      queued = [];
      now.forEach((emitted) => emitted());
    },
  };
}

/** A scheduler whose timers run only when `flush()` is called (a follower's wait for its run's expiry, held by the spec). */
class HeldScheduler implements SchedulerLike {
  private pending: (() => void)[] = [];

  now(): number {
    return Date.now();
  }

  schedule<T>(work: (this: SchedulerAction<T>, state?: T) => void, _delay?: number, state?: T): Subscription {
    const action = new Subscription() as SchedulerAction<T>;
    this.pending.push(() => {
      if (!action.closed) work.call(action, state);
    });
    return action;
  }

  /** Resolves once `count` timers wait, or once `over()` says none will come. */
  async waitFor(count: number, over: () => boolean = () => false): Promise<void> {
    while (this.pending.length < count && !over()) await delay(1);
  }

  /** Runs the timers that wait. */
  flush(): void {
    const due = this.pending;
    this.pending = [];
    for (const run of due) run();
  }
}

/** Resolves once a run reads as gone (its retention passed): a few ms for a short one. */
async function dropped(runId: string): Promise<void> {
  while ((await store.read(runId)) !== undefined) await delay(1);
}

/**
 * Writes a run's first batch with ioredis as the store's `append` writes it, with `stamp` as its
 * start stamp (the state's `start`, the first entry's `s`), or with none, as the store did before
 * runs had one. The store goes on with the run from there (its later appends are written as they
 * were then).
 */
async function startRunDirectly(runId: string, records: readonly JournalRecord[], stamp?: number): Promise<void> {
  const keys = runKeys(prefix, runId);
  const stamped = (field: string) => (stamp === undefined ? [] : [field, String(stamp)]);
  const lines = records.map((record) => JSON.stringify(record)).join('\n');
  const replies = await client
    .multi()
    .xadd(keys.journal, '0-1', 'r', lines, ...stamped('s'))
    .hset(keys.state, 'pos', records.length, ...stamped('start'))
    .exec();
  if (!replies) throw new Error('the transaction was aborted');
  for (const [error] of replies) if (error) throw error;
}

/** The start stamp of a run held (its state's `start`) and of its journal's first entry (`s`). */
async function stampsOf(runId: string): Promise<{ state: string | null; journal: string | undefined }> {
  const keys = runKeys(prefix, runId);
  const fields = (await client.xrange(keys.journal, '0-1', '0-1'))[0]?.[1] ?? [];
  const at = fields.indexOf('s');
  return { state: await client.hget(keys.state, 'start'), journal: at === -1 ? undefined : fields[at + 1] };
}

/**
 * Follows a run: `entries` resolves with what it handed out once it completes; `stop()` unsubscribes
 * (in a spec's `finally`: a follower left subscribed keeps its pub/sub connection open).
 */
function collect(entries$: Observable<JournalEntry>): { entries: Promise<JournalEntry[]>; stop: () => void } {
  const got: JournalEntry[] = [];
  let subscription: Subscription | undefined;
  const entries = new Promise<JournalEntry[]>((resolve, reject) => {
    subscription = entries$.subscribe({ next: (entry) => got.push(entry), error: reject, complete: () => resolve(got) });
  });
  entries.catch(() => undefined); // reported where it is awaited
  return { entries, stop: () => subscription?.unsubscribe() };
}

/** The texts of the event records among entries. */
const textsOf = (entries: readonly JournalEntry[]) =>
  entries.flatMap((entry) => (entry.record.kind === 'event' ? [(entry.record.event as { text: string }).text] : []));

beforeAll(async () => {
  client = await connectRedis();
  other = await connectRedis();
  prefix = uniquePrefix('redisStore');
  store = redisStore({ client, prefix, retainMs: 60_000 });
  otherStore = redisStore({ client: other, prefix, retainMs: 60_000 });
});

afterAll(async () => {
  await deleteKeys(client, prefix);
  await client.quit();
  await other.quit();
});

describe('redisStore options', () => {
  it('refuses what is not an ioredis client, and bad options, naming them', () => {
    expect(() => redisStore(undefined as never)).toThrow("redisStore: options must be an object with 'client', got undefined");
    expect(() => redisStore([client] as never)).toThrow("redisStore: options must be an object with 'client', got");
    expect(() => redisStore({ client: {} as never })).toThrow("redisStore: 'client' must be an ioredis client (new Redis(…)), got {}");
    expect(() => redisStore({ client, prefix: 3 as never })).toThrow("redisStore: 'prefix' must be a string, got 3");
    expect(() => redisStore({ client, retainMs: -1 })).toThrow(
      "redisStore: 'retainMs' must be a number of ms from 0 to Number.MAX_SAFE_INTEGER, or Infinity, got -1",
    );
    expect(() => redisStore({ client, retainMs: NaN })).toThrow("'retainMs' must be a number of ms");
    expect(() => redisStore({ client, retainMs: 1e20 })).toThrow("'retainMs' must be a number of ms");
    expect(() => redisStore({ client, scheduler: {} as never })).toThrow("redisStore: 'scheduler' must be an rxjs SchedulerLike");
  });

  it('refuses an unknown option (a misspelt one is not left out in silence), naming it and the known ones', () => {
    expect(() => redisStore({ client, retentionMs: 5 } as never)).toThrow(
      new TypeError("redisStore: unknown option(s) 'retentionMs' (known: client, prefix, retainMs, scheduler)"),
    );
    expect(() => redisStore({ client, prefix, retainMs: 5, sweepEvery: 0, pool: undefined } as never)).toThrow(
      "redisStore: unknown option(s) 'sweepEvery', 'pool' (known: client, prefix, retainMs, scheduler)",
    );
    expect(() => redisStore({ client, prefix, retainMs: 5, scheduler: undefined })).not.toThrow();
  });
});

describe('the journal', () => {
  it('appends with the expected position, gap-free, and reads back from any position', async () => {
    expect(await store.append('j1', 0, [event(1), event(2)])).toBe(2);
    expect(await store.append('j1', 2, [event(3)])).toBe(3);
    expect(await store.append('j1', 3, [])).toBe(3); // checks the position, writes nothing
    const all = (await store.read('j1')) as JournalEntry[];
    expect(all.map((entry) => entry.position)).toEqual([1, 2, 3]);
    expect(all.map((entry) => (entry.record as { event: { seq: number } }).event.seq)).toEqual([1, 2, 3]);
    expect((await otherStore.read('j1', 1))?.map((entry) => entry.position)).toEqual([2, 3]);
    expect(await store.read('j1', 3)).toEqual([]);
    expect(await store.read('j1', 99)).toEqual([]);
    expect(await store.read('no-such-run')).toBeUndefined();
  });

  it('refuses an append at another position, writing nothing of it', async () => {
    await store.append('j2', 0, [event(1)]);
    await expect(store.append('j2', 0, [event(2)])).rejects.toThrow(new JournalConflictError('j2', 0, 1));
    await expect(store.append('j2', 2, [event(2), event(3)])).rejects.toBeInstanceOf(JournalConflictError);
    await expect(store.append('j2', 5, [])).rejects.toThrow("Run 'j2': journal append expected position 5 but the journal is at 1");
    await expect(store.append('j-none', 1, [event(1)])).rejects.toThrow(new JournalConflictError('j-none', 1, 0));
    expect((await store.read('j2'))?.length).toBe(1);
    expect(await store.read('j-none')).toBeUndefined();
  });

  it('lets one of two racing appends at the same position through', async () => {
    await store.append('race', 0, [event(1)]);
    const outcomes = await Promise.allSettled([store.append('race', 1, [event(2, 'a')]), otherStore.append('race', 1, [event(2, 'b'), event(3, 'b')])]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    expect(outcomes.filter((o) => o.status === 'rejected').map((o) => o.reason)).toEqual([expect.any(JournalConflictError)]);
    const entries = (await store.read('race')) as JournalEntry[];
    const texts = entries.slice(1).map((entry) => (entry.record as { event: { text: string } }).event.text);
    expect(texts.every((text) => text === texts[0])).toBe(true); // one writer's records, whole
  });

  it('writes nothing when a record cannot be serialised', async () => {
    const cyclic: Record<string, unknown> = { version: 1, kind: 'answer', requestId: 'q' };
    cyclic.response = cyclic;
    await expect(store.append('j3', 0, [event(1), cyclic as never])).rejects.toThrow(TypeError);
    expect(await store.read('j3')).toBeUndefined();
    await expect(store.append('j3', 0, [event(1), { version: 1, kind: 'answer', requestId: 'q', response: { n: BigInt(1) } } as never])).rejects.toThrow(
      /BigInt/,
    );
    expect(await store.read('j3')).toBeUndefined();
  });

  it('refuses bad arguments with errors that name them', async () => {
    await expect(store.append('', 0, [])).rejects.toThrow('append: a run id must be a non-empty string, got ""');
    await expect(store.append(7 as never, 0, [])).rejects.toThrow('append: a run id must be a non-empty string, got 7');
    await expect(store.append('x', -1, [])).rejects.toThrow('append: the expected position must be an integer >= 0, got -1');
    await expect(store.append('x', 0, 'no' as never)).rejects.toThrow('append: records must be an array, got "no"');
    await expect(store.append('x', 0, [null as never])).rejects.toThrow('append: record 0 is not a journal record: null');
    await expect(store.read('x', 1.5)).rejects.toThrow("read: 'after' must be a position (an integer >= 0), got 1.5");
    await expect(lastValueFrom(store.follow('x', -2))).rejects.toThrow("follow: 'after' must be a position (an integer >= 0), got -2");
    await expect(store.putAnswer('x', { requestId: 3 } as never)).rejects.toThrow(
      'putAnswer: a response must be an object with a string requestId, got {"requestId":3}',
    );
    await expect(store.acquireLease('x', '', 10)).rejects.toThrow('acquireLease: a lease owner must be a non-empty string, got ""');
    await expect(store.acquireLease('x', 'me', 0)).rejects.toThrow('acquireLease: ttlMs must be a finite number of ms above 0, got 0');
    await expect(store.renewLease('x', 'me', Infinity)).rejects.toThrow('renewLease: ttlMs must be a finite number of ms above 0, got Infinity');
    // Larger than Redis's integer expiry or PostgreSQL's interval can hold: refused before it is sent.
    await expect(store.acquireLease('x', 'me', 1e20)).rejects.toThrow(
      'acquireLease: ttlMs must be at most Number.MAX_SAFE_INTEGER ms, got 100000000000000000000',
    );
    await expect(store.acquireSession('s', 'o', 1e20)).rejects.toThrow(
      'acquireSession: ttlMs must be at most Number.MAX_SAFE_INTEGER ms, got 100000000000000000000',
    );
    await expect(store.appendTurn('', 0, { runId: 'r', messages: [], state: {} })).rejects.toThrow(
      'appendTurn: a session id must be a non-empty string, got ""',
    );
    await expect(store.appendTurn('s', 0.5, { runId: 'r', messages: [], state: {} })).rejects.toThrow(
      'appendTurn: the expected revision must be an integer >= 0, got 0.5',
    );
    await expect(store.acquireSession('s', 'o', -1)).rejects.toThrow('acquireSession: ttlMs must be a finite number of ms above 0, got -1');
  });

  it('refuses appends once the run has ended', async () => {
    await store.append('ended', 0, [event(1), end]);
    await expect(store.append('ended', 2, [event(3)])).rejects.toThrow(new JournalConflictError('ended', 2, 2));
    expect(await store.append('ended', 2, [])).toBe(2);
  });

  it('fails with Redis’s own error when a key of the run is not what the store wrote, writing nothing', async () => {
    await client.set(`${prefix}run:{wrong}:journal`, 'not a stream');
    await expect(store.append('wrong', 0, [event(1)])).rejects.toThrow(/WRONGTYPE/);
    await expect(store.read('wrong')).rejects.toThrow(/WRONGTYPE/);
    expect(await client.get(`${prefix}run:{wrong}:journal`)).toBe('not a stream');
  });

  it('fails, and writes nothing, when the connection is gone', async () => {
    const lost = await connectRedis();
    const lostStore = redisStore({ client: lost, prefix });
    lost.disconnect();
    await expect(lostStore.append('lost', 0, [event(1)])).rejects.toThrow(/Connection is closed|connection/i);
    expect(await store.read('lost')).toBeUndefined();
  });

  it('reads a record of a newer format, or one that is not a record, as a JournalFormatError naming the run and position', async () => {
    const newer = { version: 99, kind: 'event', event: { type: 'text-delta', seq: 1 } };
    await store.append('fmt', 0, [event(1), newer as never]);
    await expect(store.read('fmt')).rejects.toThrow(
      "Run 'fmt', journal entry 2: written by journal format version 99; this version of rx-agent reads up to 2 (upgrade it to resume this run)",
    );
    // An entry no store of this package writes (a corrupted one): not JSON.
    await client.xadd(`${prefix}run:{fmt2}:journal`, '0-1', 'r', '{"version":1,"kind":"ev');
    await expect(store.read('fmt2')).rejects.toThrow(new JournalFormatError('fmt2', 1, 'the record is not JSON'));
    await expect(lastValueFrom(store.follow('fmt2', 0))).rejects.toThrow("Run 'fmt2', journal entry 1: the record is not JSON");
  });
});

describe('follow', () => {
  it('replays what is written, then each append as it lands, across connections, none twice', async () => {
    await store.append('f1', 0, [event(1), event(2)]);
    const seen: JournalEntry[] = [];
    const done = lastValueFrom(otherStore.follow('f1', 1).pipe(take(5), toArray()));
    const live = otherStore.follow('f1', 0).subscribe((entry) => seen.push(entry));
    await delay(50);
    await store.append('f1', 2, [event(3)]);
    await store.append('f1', 3, [event(4), event(5)]);
    await store.append('f1', 5, [event(6)]);
    const entries = await done;
    expect(entries.map((entry) => entry.position)).toEqual([2, 3, 4, 5, 6]);
    expect(entries).toEqual((await store.read('f1', 1))?.slice(0, 5));
    await delay(20);
    live.unsubscribe();
    expect(seen.map((entry) => entry.position)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('misses nothing appended while it subscribes (appends racing the first read)', async () => {
    await store.append('f2', 0, [event(1)]);
    const following = lastValueFrom(otherStore.follow('f2', 0).pipe(take(40), toArray()));
    let position = 1;
    for (let i = 0; i < 39; i++) position = await store.append('f2', position, [event(position + 1)]);
    expect((await following).map((entry) => entry.position)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
  });

  it('hands a follower a batch too large to send inline (it reads it), and batches of 100,000 records', async () => {
    await store.append('big', 0, [event(1)]);
    const following = lastValueFrom(otherStore.follow('big', 0).pipe(take(100_003), toArray()));
    await delay(30);
    await store.append('big', 1, [event(2, 'x'.repeat(3 << 20))]); // 3 MB: announced, not sent
    const many = Array.from({ length: 100_000 }, (_, i) => event(i + 3));
    expect(await store.append('big', 2, many)).toBe(100_002);
    await store.append('big', 100_002, [event(100_003)]);
    const entries = await following;
    expect(entries.map((entry) => entry.position)).toEqual(Array.from({ length: 100_003 }, (_, i) => i + 1));
    expect((entries[1].record as { event: { text: string } }).event.text).toHaveLength(3 << 20);
  }, 60_000);

  it('errors with RunNotFoundError for a run the store does not hold', async () => {
    await expect(lastValueFrom(store.follow('no-such-run', 0))).rejects.toThrow(new RunNotFoundError('no-such-run'));
  });

  it('completes when a finished run is dropped (retainMs 0: at its end)', async () => {
    const dropping = redisStore({ client, prefix, retainMs: 0 });
    await dropping.append('f3', 0, [event(1)]);
    const following = lastValueFrom(otherStore.follow('f3', 0).pipe(toArray()));
    await delay(30);
    await dropping.append('f3', 1, [event(2), end]);
    expect((await following).map((entry) => entry.record.kind)).toEqual(['event', 'event', 'end']);
    expect(await store.read('f3')).toBeUndefined();
  });

  it('retainMs 0: hands a large last batch to its followers (the journal is dropped with it, nothing is left to read)', async () => {
    const dropping = redisStore({ client, prefix, retainMs: 0 });
    await dropping.append('f3big', 0, [event(1)]);
    const following = lastValueFrom(otherStore.follow('f3big', 0).pipe(toArray()));
    await delay(30);
    await dropping.append('f3big', 1, [event(2, 'x'.repeat(1_100_000)), end]);
    expect((await following).map((entry) => entry.position)).toEqual([1, 2, 3]);
    expect(await store.read('f3big')).toBeUndefined();
  });

  it('retainMs 0: a follower subscribed before the end gets the whole run, though it listens only after the end', async () => {
    const dropping = redisStore({ client, prefix, retainMs: 0 });
    await dropping.append('t1', 0, [event(1)]);
    const late = await slowListener();
    try {
      const entries = lastValueFrom(redisStore({ client: late.client, prefix }).follow('t1', 0).pipe(toArray()));
      await dropping.append('t1', 1, [event(2), end]);
      expect(await store.read('t1')).toBeUndefined(); // dropped at its end, for readers
      late.listen();
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
    } finally {
      await late.client.quit();
    }
  });

  it('a short retainMs: a follower subscribed before the end gets the whole run, though it listens only after the run is dropped', async () => {
    const brief = redisStore({ client, prefix, retainMs: 5 });
    await brief.append('t5', 0, [event(1)]);
    const late = await slowListener();
    try {
      const entries = lastValueFrom(redisStore({ client: late.client, prefix }).follow('t5', 0).pipe(toArray()));
      await brief.append('t5', 1, [event(2), end]);
      await dropped('t5'); // 5 ms after its end, for readers
      late.listen();
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
      // For a follower arriving after the drop, and for answers, it is gone, as for a reader.
      await delay(20);
      await expect(lastValueFrom(otherStore.follow('t5', 0))).rejects.toThrow(new RunNotFoundError('t5'));
      expect(await otherStore.putAnswer('t5', permission('q'))).toBe(false);
      await otherStore.requestCancel('t5');
      expect(await otherStore.received?.('t5')).toEqual({ answers: [], cancelled: false });
      // The id starts a new run at once, followed like any other.
      expect(await brief.append('t5', 0, [event(1, 'again')])).toBe(1);
      const following = lastValueFrom(otherStore.follow('t5', 0).pipe(toArray()));
      expect((await store.read('t5'))?.map((entry) => entry.position)).toEqual([1]);
      await brief.append('t5', 1, [end]);
      const again = await following;
      expect(again.map((entry) => entry.position)).toEqual([1, 2]);
      expect((again[0].record as { event: { text: string } }).event.text).toBe('again');
    } finally {
      await late.client.quit();
    }
  });

  it.each([0, 5])('retainMs %i: a follower subscribed before the drop gets its run, not a new run of the id started before it listens', async (retainMs) => {
    const runId = `t-reused-${retainMs}`;
    const writer = redisStore({ client, prefix, retainMs });
    await writer.append(runId, 0, [event(1, 'old')]);
    const late = await slowListener();
    try {
      const follower = redisStore({ client: late.client, prefix });
      // The mark in Redis's script cache, whatever ran before (else its first call is sent twice: EVALSHA, then EVAL).
      await client.script('LOAD', SCRIPTS.mark.lua);
      const marked = watchScript(late.client, 'mark').answered();
      const entries = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
      // The drop at once: its command leaves after the follower's mark, which Redis runs first.
      await writer.append(runId, 1, [event(2, 'old'), end]);
      expect(await marked).toEqual([1, expect.any(Number)]); // the run was held when it subscribed
      await dropped(runId);
      // A new run of the id, longer than the old one, started before the follower listens.
      expect(await writer.append(runId, 0, [event(1, 'new'), event(2, 'new'), event(3, 'new'), event(4, 'new')])).toBe(4);
      late.listen();
      const got = await entries;
      expect(got.map((entry) => entry.position)).toEqual([1, 2, 3]);
      expect(got.slice(0, 2).map((entry) => (entry.record as { event: { text: string } }).event.text)).toEqual(['old', 'old']);
    } finally {
      await late.client.quit();
    }
  });

  it.each([0, 5])('retainMs %i: a follower subscribed before the drop gets its run to its end, however late its first read reaches Redis', async (retainMs) => {
    const runId = `t-held-read-${retainMs}`;
    const writer = redisStore({ client, prefix, retainMs });
    await writer.append(runId, 0, [event(1, 'old')]);
    const late = await connectRedis();
    try {
      const follower = redisStore({ client: late, prefix });
      const mark = watchScript(late, 'mark');
      const read = watchScript(late, 'read');
      const marked = mark.answered();
      read.hold(); // its first read is sent, and held here: the drop and a new run come first
      const entries = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
      await marked;
      await writer.append(runId, 1, [event(2, 'old'), end]);
      await dropped(runId);
      expect(await writer.append(runId, 0, [event(1, 'new'), event(2, 'new'), event(3, 'new')])).toBe(3);
      await delay(50);
      read.release();
      const got = await entries;
      expect(got.map((entry) => entry.position)).toEqual([1, 2, 3]);
      expect(got.slice(0, 2).map((entry) => (entry.record as { event: { text: string } }).event.text)).toEqual(['old', 'old']);
    } finally {
      await late.quit();
    }
  });

  it.each([0, 5])(
    'retainMs %i: a follower subscribed after the drop gets the new run of the id, or RunNotFoundError, however late its first read reaches Redis',
    async (retainMs) => {
      const writer = redisStore({ client, prefix, retainMs });
      const late = await connectRedis();
      try {
        const follower = redisStore({ client: late, prefix });
        const mark = watchScript(late, 'mark');
        const read = watchScript(late, 'read');
        for (const startsAgain of [false, true]) {
          const runId = `t-after-drop-${retainMs}-${startsAgain}`;
          await writer.append(runId, 0, [event(1, 'old'), event(2, 'old'), event(3, 'old'), end]);
          await dropped(runId); // its journal is still kept, for the followers that were there before
          const marked = mark.answered();
          read.hold();
          const entries = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
          expect(await marked).toEqual([0, expect.any(Number)]); // no run held when it subscribed
          if (startsAgain) {
            // A new run starts and ends (and is dropped, with retainMs 0) before its first read lands.
            await writer.append(runId, 0, [event(1, 'new')]);
            await writer.append(runId, 1, [end]);
            if (retainMs > 0) await dropped(runId);
          }
          await delay(20);
          read.release();
          if (!startsAgain) {
            await expect(entries).rejects.toThrow(new RunNotFoundError(runId));
            continue;
          }
          const got = await entries;
          expect(got.map((entry) => entry.position)).toEqual([1, 2]);
          expect((got[0].record as { event: { text: string } }).event.text).toBe('new');
        }
      } finally {
        await late.quit();
      }
    },
  );

  it('a follower of a new run of the id never takes the messages of the run dropped just before it subscribed for its own', async () => {
    const runId = 't-stale-messages';
    const writer = redisStore({ client, prefix, retainMs: 0 });
    const slow = await slowMessages();
    try {
      const follower = redisStore({ client: slow.client, prefix });
      await writer.append(runId, 0, [event(1, 'old')]);
      // A follower of the old run: the channel is listened to in that process already.
      let following: () => void = () => undefined;
      const followed = new Promise<void>((resolve) => (following = resolve));
      const old = lastValueFrom(
        follower.follow(runId, 0).pipe(
          tap(() => following()),
          toArray(),
        ),
      );
      await followed;
      slow.hold(); // from here, the messages heard wait in the process until delivered
      await writer.append(runId, 1, [event(2, 'old'), end]); // dropped at its end
      await writer.append(runId, 0, [event(1, 'new')]);
      const read = watchScript(slow.client, 'read');
      const answered = read.answered();
      const entries = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
      await answered; // its first read has the new run's first entry; the old run's end is yet to be heard
      slow.deliver();
      await delay(20);
      await writer.append(runId, 1, [event(2, 'new'), event(3, 'new'), end]);
      const got = await entries;
      expect(got.map((entry) => entry.position)).toEqual([1, 2, 3, 4]);
      expect(got.slice(0, 3).map((entry) => (entry.record as { event: { text: string } }).event.text)).toEqual(['new', 'new', 'new']);
      expect((await old).map((entry) => entry.position)).toEqual([1, 2, 3]);
    } finally {
      await slow.client.quit();
    }
  });

  it('after its run’s end, completes at that run’s drop, though a new run of the id has ended by the time it looks', async () => {
    const runId = 't-expiry';
    const brief = redisStore({ client, prefix, retainMs: 50 });
    const timers = new HeldScheduler();
    await brief.append(runId, 0, [event(1), end]);
    const entries = lastValueFrom(redisStore({ client: other, prefix, scheduler: timers }).follow(runId, 0).pipe(toArray()));
    await timers.waitFor(1); // at its end: when does the run's state expire?
    timers.flush();
    await timers.waitFor(1); // at that expiry (50 ms): is the run gone?
    await dropped(runId);
    await store.append(runId, 0, [event(1, 'new'), end]); // a new run, ended, kept 60 s
    timers.flush();
    expect((await entries).map((entry) => entry.position)).toEqual([1, 2]);
  });

  it('a follower subscribed after the end but before the drop gets the whole run, though it listens only after the drop', async () => {
    const brief = redisStore({ client, prefix, retainMs: 10 });
    const late = await slowListener();
    const follower = redisStore({ client: late.client, prefix });
    try {
      let runId = '';
      let entries: Promise<JournalEntry[]> | undefined;
      for (let attempt = 1; !entries; attempt++) {
        runId = `t6-${attempt}`;
        await brief.append(runId, 0, [event(1), event(2), end]);
        const following = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
        // Subscribed while the run was still held? (Else this process was too slow: try again.)
        if ((await store.read(runId)) !== undefined) entries = following;
        else following.catch(() => undefined);
      }
      await dropped(runId);
      late.listen();
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
    } finally {
      await late.client.quit();
    }
  });

  it('retainMs 0: a follower arriving after the end gets RunNotFoundError, like a reader, and the id is free at once', async () => {
    const dropping = redisStore({ client, prefix, retainMs: 0 });
    await dropping.append('t2', 0, [event(1), end]);
    expect(await client.exists(`${prefix}run:{t2}:journal`, `${prefix}run:{t2}:answers`, `${prefix}run:{t2}:state`)).toBe(0);
    await delay(20);
    // Its journal is still kept for the followers that were there before the end, a few seconds.
    const tailMs = await client.pttl(`${prefix}run:{t2}:tail`);
    expect(tailMs).toBeGreaterThan(5_000);
    expect(tailMs).toBeLessThanOrEqual(10_000);
    expect(await otherStore.read('t2')).toBeUndefined();
    await expect(lastValueFrom(otherStore.follow('t2', 0))).rejects.toThrow(new RunNotFoundError('t2'));
    expect(await otherStore.putAnswer('t2', permission('q'))).toBe(false);
    // The id starts a new run, followed like any other.
    expect(await dropping.append('t2', 0, [event(1, 'again')])).toBe(1);
    const following = lastValueFrom(otherStore.follow('t2', 0).pipe(toArray()));
    await delay(30);
    await dropping.append('t2', 1, [end]);
    const entries = await following;
    expect(entries.map((entry) => entry.position)).toEqual([1, 2]);
    expect((entries[0].record as { event: { text: string } }).event.text).toBe('again');
  });

  it('reads and follows from a position past 10^14 (Lua would write it as 1e+14)', async () => {
    await store.append('far', 0, [event(1)]);
    expect(await store.read('far', 1e15)).toEqual([]);
    expect(await store.read('far', Number.MAX_SAFE_INTEGER - 1)).toEqual([]);
    const followed = firstValueFrom(store.follow('far', 1e15).pipe(toArray(), timeout({ first: 200, with: () => of('still following') })));
    expect(await followed).toBe('still following');
  });

  it('completes when a finished run’s retention passes (Redis expires its keys)', async () => {
    const brief = redisStore({ client, prefix, retainMs: 300 });
    await brief.append('f4', 0, [event(1), end]);
    expect(await client.pttl(`${prefix}run:{f4}:journal`)).toBeGreaterThan(0);
    const started = Date.now();
    const entries = await lastValueFrom(otherStore.follow('f4', 0).pipe(toArray()));
    expect(entries.map((entry) => entry.position)).toEqual([1, 2]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(200);
    expect(await store.read('f4')).toBeUndefined();
  });

  it('closes its pub/sub connection when nothing follows any more', async () => {
    // A client of its own, named: its duplicate has the name too (the server may be shared).
    const name = `rx-agent-spec-${process.pid}-${Date.now()}`;
    const named = await connectRedis({ connectionName: name });
    try {
      const namedStore = redisStore({ client: named, prefix });
      const subscribers = async () =>
        String(await client.client('LIST'))
          .split('\n')
          .filter((line: string) => line.includes(` name=${name} `) && !line.includes(' sub=0 ')).length;
      await namedStore.append('f5', 0, [event(1)]);
      expect(await subscribers()).toBe(0);
      const following = namedStore.follow('f5', 0).subscribe();
      const answering = namedStore.answers('f5').subscribe();
      const cancelling = namedStore.cancellations('f6').subscribe();
      await delay(50);
      expect(await subscribers()).toBe(1); // one connection for every channel
      following.unsubscribe();
      answering.unsubscribe();
      await delay(20);
      expect(await subscribers()).toBe(1);
      cancelling.unsubscribe();
      await delay(50);
      expect(await subscribers()).toBe(0);
    } finally {
      await named.quit();
    }
  });
});

describe('start stamps', () => {
  describe('a run an earlier version of the store started (no start stamp)', () => {
    it('is read, and followed to its drop at its retention, not taken for another run of the id at its end', async () => {
      const runId = 'unstamped-held';
      const brief = redisStore({ client, prefix, retainMs: 500 });
      await startRunDirectly(runId, [event(1, 'old'), event(2, 'old')]);
      expect(await stampsOf(runId)).toEqual({ state: null, journal: undefined });
      expect((await otherStore.read(runId))?.map((entry) => entry.position)).toEqual([1, 2]);
      expect((await otherStore.read(runId, 1))?.map((entry) => entry.position)).toEqual([2]);
      const late = await connectRedis();
      let following: ReturnType<typeof collect> | undefined;
      try {
        const timers = new HeldScheduler();
        const follower = redisStore({ client: late, prefix, scheduler: timers });
        const marked = watchScript(late, 'mark').answered();
        following = collect(follower.follow(runId, 0));
        let outcome = 'following' as 'following' | 'completed' | 'failed';
        void following.entries.then(
          () => (outcome = 'completed'),
          () => (outcome = 'failed'),
        );
        const over = () => outcome !== 'following';
        expect(await marked).toEqual([1, 0]); // held, with no stamp
        expect(await brief.append(runId, 2, [event(3, 'old'), end])).toBe(4);
        expect(await stampsOf(runId)).toEqual({ state: null, journal: undefined }); // its end adds none
        await timers.waitFor(1, over); // at its end: when does the run's state expire?
        timers.flush();
        await timers.waitFor(1, over); // a wait for that expiry: the state is still its run's
        if (outcome === 'failed') await following.entries; // its error
        expect(outcome).toBe('following');
        await dropped(runId);
        timers.flush();
        const got = await following.entries;
        expect(got.map((entry) => entry.position)).toEqual([1, 2, 3, 4]);
        expect(textsOf(got)).toEqual(['old', 'old', 'old']);
        expect(await otherStore.putAnswer(runId, permission('q'))).toBe(false);
      } finally {
        following?.stop();
        await late.quit();
      }
    });

    it.each([0, 5])(
      'retainMs %i: is read to its end by followers subscribed before its drop, whether it or a new run of the id holds the journal then',
      async (retainMs) => {
        const runId = `unstamped-dropped-${retainMs}`;
        const writer = redisStore({ client, prefix, retainMs });
        await startRunDirectly(runId, [event(1, 'old')]);
        const clients: Redis[] = [];
        const followers: { marked: Promise<unknown>; release: () => void; entries: Promise<JournalEntry[]>; stop: () => void }[] = [];
        try {
          // Two followers subscribed while it is held, whose reads wait until released.
          for (let i = 0; i < 2; i++) {
            const on = await connectRedis();
            clients.push(on);
            const follower = redisStore({ client: on, prefix });
            const marked = watchScript(on, 'mark').answered();
            const read = watchScript(on, 'read');
            read.hold();
            followers.push({ marked, release: read.release, ...collect(follower.follow(runId, 0)) });
          }
          const [first, second] = followers;
          for (const { marked } of followers) expect(await marked).toEqual([1, 0]); // held, with no stamp
          await writer.append(runId, 1, [event(2, 'old'), end]);
          await dropped(runId); // its journal is kept past the drop (retainMs 0: as the tail) for them
          first.release();
          const got = await first.entries;
          expect(got.map((entry) => entry.position)).toEqual([1, 2, 3]);
          expect(textsOf(got)).toEqual(['old', 'old']);
          // A new run of the id, stamped: the journal is its own, the old one is the tail.
          expect(await writer.append(runId, 0, [event(1, 'new'), event(2, 'new'), event(3, 'new')])).toBe(3);
          expect(Number((await stampsOf(runId)).state)).toBeGreaterThan(0);
          second.release();
          const again = await second.entries;
          expect(again.map((entry) => entry.position)).toEqual([1, 2, 3]);
          expect(textsOf(again)).toEqual(['old', 'old']);
        } finally {
          for (const { stop } of followers) stop();
          for (const on of clients) await on.quit();
        }
      },
    );

    it.each([0, 5])('retainMs %i: once dropped, reads as gone; a new run of the id is stamped and followed from a subscription before it', async (retainMs) => {
      const runId = `unstamped-then-new-${retainMs}`;
      const writer = redisStore({ client, prefix, retainMs });
      await startRunDirectly(runId, [event(1, 'old')]);
      await writer.append(runId, 1, [end]);
      await dropped(runId);
      await expect(lastValueFrom(otherStore.follow(runId, 0))).rejects.toThrow(new RunNotFoundError(runId));
      expect(await otherStore.putAnswer(runId, permission('q'))).toBe(false);
      const late = await connectRedis();
      let following: ReturnType<typeof collect> | undefined;
      try {
        const follower = redisStore({ client: late, prefix });
        const marked = watchScript(late, 'mark').answered();
        const read = watchScript(late, 'read');
        read.hold(); // its first read lands once the new run has started
        following = collect(follower.follow(runId, 0));
        expect(await marked).toEqual([0, 0]); // none held; the newest run kept has no stamp
        expect(await writer.append(runId, 0, [event(1, 'new')])).toBe(1);
        const stamps = await stampsOf(runId);
        expect(Number(stamps.state)).toBeGreaterThan(0);
        expect(stamps.journal).toBe(stamps.state);
        read.release();
        await writer.append(runId, 1, [end]);
        const got = await following.entries;
        expect(got.map((entry) => entry.position)).toEqual([1, 2]);
        expect(textsOf(got)).toEqual(['new']);
      } finally {
        following?.stop();
        await late.quit();
      }
    });
  });

  it.each([0, 5])(
    'retainMs %i: a new run is stamped after the run of the id before it though Redis’s clock is behind that stamp, and followed from a subscription before it',
    async (retainMs) => {
      const runId = `stamp-ahead-${retainMs}`;
      const writer = redisStore({ client, prefix, retainMs });
      // The run before was stamped by a Redis whose clock was an hour ahead of this one's (a failover, a clock set back).
      const [seconds, micros] = await client.time();
      const ahead = Number(seconds) * 1_000_000 + Number(micros) + 3_600_000_000;
      await startRunDirectly(runId, [event(1, 'old')], ahead);
      await writer.append(runId, 1, [end]);
      await dropped(runId);
      const late = await connectRedis();
      let following: ReturnType<typeof collect> | undefined;
      try {
        const follower = redisStore({ client: late, prefix });
        const marked = watchScript(late, 'mark').answered();
        const read = watchScript(late, 'read');
        read.hold(); // its first read lands once the new run has started
        following = collect(follower.follow(runId, 0));
        expect(await marked).toEqual([0, ahead]); // none held: it follows the first run started after that one
        expect(await writer.append(runId, 0, [event(1, 'new')])).toBe(1);
        expect(await stampsOf(runId)).toEqual({ state: String(ahead + 1), journal: String(ahead + 1) });
        read.release();
        await writer.append(runId, 1, [end]);
        const got = await following.entries;
        expect(got.map((entry) => entry.position)).toEqual([1, 2]);
        expect(textsOf(got)).toEqual(['new']);
      } finally {
        following?.stop();
        await late.quit();
      }
    },
  );
});

describe('a lost pub/sub connection', () => {
  /** Kills the store's pub/sub connection (found by its client's name) on the server. */
  async function killSubscriber(name: string): Promise<void> {
    const line = String(await client.client('LIST'))
      .split('\n')
      .find((l: string) => l.includes(` name=${name} `) && !l.includes(' sub=0 '));
    if (!line) throw new Error(`no pub/sub connection named ${name}`);
    await client.client('KILL', 'ID', /id=(\d+)/.exec(line)![1]);
  }

  it('once back, reads what was appended meanwhile: a follower misses nothing', async () => {
    const name = `rx-agent-spec-resync-${process.pid}-${Date.now()}`;
    const { default: IORedis } = await import('ioredis');
    const reconnecting = new IORedis(REDIS_URL, { connectionName: name, retryStrategy: () => 50 });
    try {
      const following = redisStore({ client: reconnecting, prefix });
      await store.append('lost1', 0, [event(1)]);
      const entries = lastValueFrom(following.follow('lost1', 0).pipe(take(3), toArray()));
      await delay(50);
      await killSubscriber(name);
      await store.append('lost1', 1, [event(2), event(3)]); // published while it is away, and nothing after
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
    } finally {
      reconnecting.disconnect();
    }
  });

  it('retainMs 0: once back, a follower gets the end of a run dropped while it was away', async () => {
    const name = `rx-agent-spec-resync0-${process.pid}-${Date.now()}`;
    const { default: IORedis } = await import('ioredis');
    const reconnecting = new IORedis(REDIS_URL, { connectionName: name, retryStrategy: () => 50 });
    try {
      const dropping = redisStore({ client, prefix, retainMs: 0 });
      await dropping.append('lost0', 0, [event(1)]);
      const entries = lastValueFrom(redisStore({ client: reconnecting, prefix }).follow('lost0', 0).pipe(toArray()));
      await delay(50);
      await killSubscriber(name);
      await dropping.append('lost0', 1, [event(2), end]); // published while it is away
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
    } finally {
      reconnecting.disconnect();
    }
  });

  it('a short retainMs: once back, a follower gets the end of a run dropped while it was away', async () => {
    const name = `rx-agent-spec-resync5-${process.pid}-${Date.now()}`;
    const { default: IORedis } = await import('ioredis');
    const reconnecting = new IORedis(REDIS_URL, { connectionName: name, retryStrategy: () => 50 });
    try {
      const brief = redisStore({ client, prefix, retainMs: 5 });
      await brief.append('lost5', 0, [event(1)]);
      let following: () => void = () => undefined;
      const followed = new Promise<void>((resolve) => (following = resolve));
      // Its first entry comes once its subscription is confirmed.
      const entries = lastValueFrom(
        redisStore({ client: reconnecting, prefix })
          .follow('lost5', 0)
          .pipe(
            tap(() => following()),
            toArray(),
          ),
      );
      await followed;
      await killSubscriber(name);
      await brief.append('lost5', 1, [event(2), end]); // published while it is away, and dropped 5 ms later
      await dropped('lost5'); // before it is back (50 ms)
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
    } finally {
      reconnecting.disconnect();
    }
  });

  it('fails the followers, saying so, when the client will not reconnect', async () => {
    const name = `rx-agent-spec-lost-${process.pid}-${Date.now()}`;
    const lost = await connectRedis({ connectionName: name }); // retryStrategy: no reconnection
    try {
      const following = redisStore({ client: lost, prefix });
      await store.append('lost2', 0, [event(1)]);
      const entries = lastValueFrom(following.follow('lost2', 0).pipe(toArray()));
      const answers = lastValueFrom(following.answers('lost2'));
      await delay(50);
      await killSubscriber(name);
      await expect(entries).rejects.toThrow('redisStore: the pub/sub connection closed and will not reconnect');
      await expect(answers).rejects.toThrow('redisStore: the pub/sub connection closed and will not reconnect');
    } finally {
      await lost.quit();
    }
  });
});

describe('answers and cancels', () => {
  it('keeps the first answer to a request; another process hears each one at once', async () => {
    await store.append('a1', 0, [event(1)]);
    const heard = first(otherStore.answers('a1'), 3);
    await delay(30);
    expect(await store.putAnswer('a1', permission('q1'))).toBe(true);
    expect(await otherStore.putAnswer('a1', permission('q1', false))).toBe(false);
    expect(await store.putAnswer('a1', permission('q2', false))).toBe(true);
    expect(await store.putAnswer('a1', permission('q3'))).toBe(true);
    expect(await heard).toEqual([permission('q1'), permission('q2', false), permission('q3')]);
    // A late reader gets those kept already, in order.
    expect(await first(store.answers('a1'), 3)).toEqual([permission('q1'), permission('q2', false), permission('q3')]);
  });

  it('reads the answers and the cancel flag another process wrote in one round trip (received), and none for an unknown run', async () => {
    await otherStore.append('v1', 0, [event(1)]);
    await otherStore.putAnswer('v1', permission('q1'));
    await otherStore.putAnswer('v1', permission('q2', false));
    const fresh = redisStore({ client, prefix });
    expect(await fresh.received?.('v1')).toEqual({ answers: [permission('q1'), permission('q2', false)], cancelled: false });
    await otherStore.requestCancel('v1');
    expect(await fresh.received?.('v1')).toEqual({ answers: [permission('q1'), permission('q2', false)], cancelled: true });
    expect(await fresh.received?.('no-such-run')).toEqual({ answers: [], cancelled: false });
  });

  it('a process that has not read the run gets its answers and cancel from Redis', async () => {
    await otherStore.append('v2', 0, [event(1)]);
    await otherStore.putAnswer('v2', permission('q1'));
    await otherStore.requestCancel('v2');
    const fresh = redisStore({ client, prefix });
    expect(await first(fresh.answers('v2'), 1)).toEqual([permission('q1')]);
    await expect(firstValueFrom(fresh.cancellations('v2'))).resolves.toBeUndefined();
  });

  it('keeps no answer for a run it does not hold', async () => {
    expect(await store.putAnswer('no-such-run', permission('q'))).toBe(false);
    expect(await client.exists(`${prefix}run:{no-such-run}:answers`, `${prefix}run:{no-such-run}:state`)).toBe(0);
  });

  it('cancels once; cancellations() emits at once when set before, or when it is set', async () => {
    await store.append('c1', 0, [event(1)]);
    const cancelled = firstValueFrom(otherStore.cancellations('c1'));
    await delay(30);
    await store.requestCancel('c1');
    await store.requestCancel('c1');
    await expect(cancelled).resolves.toBeUndefined();
    await expect(lastValueFrom(store.cancellations('c1').pipe(toArray()))).resolves.toEqual([undefined]);
    await store.requestCancel('no-such-run'); // nothing to cancel
    expect(await client.exists(`${prefix}run:{no-such-run}:state`)).toBe(0);
  });

  it('keeps a finished run without expiry when retainMs is Infinity, and for as long as asked', async () => {
    await redisStore({ client, prefix, retainMs: Infinity }).append('forever', 0, [event(1), end]);
    expect(await client.pttl(`${prefix}run:{forever}:journal`)).toBe(-1);
    await redisStore({ client, prefix, retainMs: Number.MAX_SAFE_INTEGER }).append('long', 0, [event(1), end]);
    expect(await client.pttl(`${prefix}run:{long}:journal`)).toBeGreaterThan(1e15);
  });

  it('drops the answers and the cancel flag with the run, at its retention (its journal 10 s later, for its followers)', async () => {
    const brief = redisStore({ client, prefix, retainMs: 5_000 });
    await brief.append('r1', 0, [event(1)]);
    await brief.putAnswer('r1', permission('q1'));
    await brief.append('r1', 1, [end]);
    await brief.putAnswer('r1', permission('q2')); // after the end: kept until the same expiry
    await brief.requestCancel('r1');
    for (const key of ['answers', 'state']) {
      const ttl = await client.pttl(`${prefix}run:{r1}:${key}`);
      expect(ttl).toBeGreaterThan(4_000);
      expect(ttl).toBeLessThanOrEqual(5_000);
    }
    const journalTtl = await client.pttl(`${prefix}run:{r1}:journal`);
    expect(journalTtl).toBeGreaterThan(14_000);
    expect(journalTtl).toBeLessThanOrEqual(15_000);
  });
});

describe('leases', () => {
  it('one owner at a time; renewed and released by its owner only; expires by itself', async () => {
    const claim = await store.acquireLease('l1', 'A', 400);
    expect(claim.acquired).toBe(true);
    expect(claim.lease.owner).toBe('A');
    expect(Math.abs(claim.lease.expiresAt - (Date.now() + 400))).toBeLessThan(1000);
    const refused = await otherStore.acquireLease('l1', 'B', 400);
    expect(refused).toEqual({ acquired: false, lease: { owner: 'A', expiresAt: expect.any(Number) } });
    expect(Math.abs(refused.lease.expiresAt - claim.lease.expiresAt)).toBeLessThan(50);
    expect((await store.acquireLease('l1', 'A', 400)).acquired).toBe(true); // its own: renewed
    expect(await otherStore.renewLease('l1', 'B', 400)).toBe(false);
    expect(await store.renewLease('l1', 'A', 400)).toBe(true);
    await otherStore.releaseLease('l1', 'B'); // not B's: nothing
    expect((await store.getLease('l1'))?.owner).toBe('A');
    await store.releaseLease('l1', 'A');
    expect(await store.getLease('l1')).toBeUndefined();
    expect((await otherStore.acquireLease('l1', 'B', 150)).acquired).toBe(true);
    await delay(250);
    expect(await store.getLease('l1')).toBeUndefined();
    expect(await otherStore.renewLease('l1', 'B', 150)).toBe(false); // lost
    expect((await store.acquireLease('l1', 'A', 150)).acquired).toBe(true);
  });
});

describe('sessions', () => {
  it('appends, loads and deletes a session by id, from any client', async () => {
    const message = { id: 'm1', role: 'user' as const, content: [{ type: 'text' as const, text: 'hi' }] };
    expect(await store.load('s1')).toBeUndefined();
    expect(await store.appendTurn('s1', 0, { runId: 'r1', messages: [message], state: { k: { version: 1, value: 1 } } })).toEqual({
      revision: 1,
      appended: true,
    });
    expect(await otherStore.load('s1')).toEqual({
      version: 1,
      id: 's1',
      messages: [message],
      state: { k: { version: 1, value: 1 } },
      revision: 1,
      lastRunId: 'r1',
    });
    await otherStore.delete('s1');
    expect(await store.load('s1')).toBeUndefined();
  });

  it('keeps a turn as one list entry: an append writes the turn, not the history', async () => {
    const big = 'x'.repeat(10_000);
    for (let i = 0; i < 5; i++) {
      await store.appendTurn('s2', i, {
        runId: `r${i}`,
        messages: [{ id: `m${i}`, role: 'user', content: [{ type: 'text', text: `${i}${big}` }] }],
        state: {},
      });
    }
    const lengths = await client.lrange(`${prefix}session:{s2}:turns`, 0, -1);
    expect(lengths.map((turn) => turn.length)).toEqual(lengths.map(() => lengths[0].length));
    expect((await store.load('s2'))?.messages).toHaveLength(5);
  });
});

describe('hostile ids and texts through every method', () => {
  it.each(HOSTILE_IDS)('an id with %s', async (_, id) => {
    const text = `${id} "q" \u0000 \n ${'x'.repeat(1 << 20)} \uD800 🦊`;
    expect(await store.append(id, 0, [event(1, text)])).toBe(1);
    const following = first(otherStore.follow(id, 0), 3);
    const answers = first(otherStore.answers(id), 1);
    const cancelled = firstValueFrom(otherStore.cancellations(id));
    await delay(30);
    expect(await store.append(id, 1, [event(2, text), end])).toBe(3);
    const entries = await following;
    expect(entries.map((entry) => entry.position)).toEqual([1, 2, 3]);
    expect((entries[1].record as { event: { text: string } }).event.text).toBe(text);
    expect(await store.read(id)).toEqual(entries);
    expect(await store.putAnswer(id, permission(id))).toBe(true);
    expect(await store.putAnswer(id, permission(id))).toBe(false);
    expect(await answers).toEqual([permission(id)]);
    await store.requestCancel(id);
    await expect(cancelled).resolves.toBeUndefined();
    expect((await store.acquireLease(id, id, 5_000)).lease.owner).toBe(id);
    expect((await otherStore.acquireLease(id, 'other', 5_000)).lease.owner).toBe(id);
    expect(await store.renewLease(id, id, 5_000)).toBe(true);
    expect((await store.getLease(id))?.owner).toBe(id);
    await store.releaseLease(id, id);
    expect(await store.getLease(id)).toBeUndefined();
    await store.appendTurn(id, 0, { runId: id, messages: [{ id: 'm', role: 'user', content: [{ type: 'text', text }] }], state: {} });
    expect((await otherStore.load(id))?.messages[0].content).toEqual([{ type: 'text', text }]);
    expect((await otherStore.acquireSession(id, id, 5_000)).lease.owner).toBe(id);
    await otherStore.releaseSession(id, id);
    const fork = `${id}-fork`;
    await store.fork(id, fork, 1);
    expect(await otherStore.forks(id)).toEqual([fork]);
    await store.delete(fork);
    await store.delete(id);
    expect(await store.load(id)).toBeUndefined();
  });

  it("a fork whose second script's answer is lost: made or not, its parent is never deleted from under it", async () => {
    const turn = { runId: 'p1', messages: [{ id: 'm', role: 'user' as const, content: [{ type: 'text' as const, text: 'hi' }] }], state: {} };
    for (const made of [false, true]) {
      const parent = `lost-${String(made)}`;
      const child = `${parent}-child`;
      const dropping = client.duplicate();
      try {
        const failing = redisStore({ client: dropping, prefix });
        await failing.appendTurn(parent, 0, turn);
        const commands = dropping as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
        const createFork = commands[COMMAND_NAMES.createFork].bind(dropping);
        // The round trip fails (a dropped connection), after the script ran or before.
        commands[COMMAND_NAMES.createFork] = async (...args: unknown[]) => {
          if (made) await createFork(...args);
          throw new Error('Connection is closed.');
        };
        await expect(failing.fork(parent, child, 1)).rejects.toThrow('Connection is closed.');
        expect(await store.forks(parent)).toEqual(made ? [child] : []);
        if (made) expect(await store.load(child)).toMatchObject({ id: child, parentId: parent, messages: turn.messages });
        else expect(await store.load(child)).toBeUndefined();
        await expect(store.delete(parent)).rejects.toThrow(SessionConflictError); // made or being made, as far as anyone knows
        if (made) await store.delete(child);
        else await client.hset(`${prefix}session:{${parent}}:meta`, `f:${JSON.stringify(child)}`, 0); // a minute on
        await store.delete(parent);
        expect(await store.load(parent)).toBeUndefined();
      } finally {
        await dropping.quit();
      }
    }
  });

  it('a listing without its time (written before listings had one) is given it, and taken back a minute on', async () => {
    const turn = { runId: 'p1', messages: [{ id: 'm', role: 'user' as const, content: [{ type: 'text' as const, text: 'hi' }] }], state: {} };
    await store.appendTurn('legacy', 0, turn);
    await client.rpush(`${prefix}session:{legacy}:forks`, JSON.stringify('gone'));
    await expect(store.delete('legacy')).rejects.toThrow(SessionConflictError);
    const listed = Number(await client.hget(`${prefix}session:{legacy}:meta`, `f:${JSON.stringify('gone')}`));
    expect(Date.now() - listed).toBeLessThan(5_000);
    await client.hset(`${prefix}session:{legacy}:meta`, `f:${JSON.stringify('gone')}`, listed - 61_000);
    await store.delete('legacy');
    expect(await store.load('legacy')).toBeUndefined();
  });

  it('keeps request ids and lease owners apart that only differ in a lone surrogate', async () => {
    await store.append('ids', 0, [event(1)]);
    expect(await store.putAnswer('ids', permission('q\uD800'))).toBe(true);
    expect(await store.putAnswer('ids', permission('q\uDBFF'))).toBe(true);
    expect(await store.putAnswer('ids', permission('q\uFFFD'))).toBe(true);
    expect(await first(store.answers('ids'), 3)).toEqual([permission('q\uD800'), permission('q\uDBFF'), permission('q\uFFFD')]);
    expect((await store.acquireLease('ids', 'o\uD800', 5_000)).acquired).toBe(true);
    expect((await store.acquireLease('ids', 'o\uDBFF', 5_000)).acquired).toBe(false);
    expect(await store.renewLease('ids', 'o\uFFFD', 5_000)).toBe(false);
    expect((await store.getLease('ids'))?.owner).toBe('o\uD800');
  });

  it('keeps ids apart that only differ where keys escape them', async () => {
    const ids = ['x\uD800', 'x\uDBFF', 'x\uFFFD', 'x%uD800', 'x}', 'x%7D', 'x{', 'x%7B'];
    for (const [i, id] of ids.entries()) await store.append(id, 0, [event(1, String(i))]);
    for (const [i, id] of ids.entries()) {
      const entries = (await store.read(id)) as JournalEntry[];
      expect(entries.map((entry) => (entry.record as { event: { text: string } }).event.text)).toEqual([String(i)]);
    }
  });
});

/**
 * A client (wrapping `client`) whose process dies after a given number of calls: a later call
 * never reaches Redis and either never settles (`'killed'`: the process is gone) or fails
 * (`'dropped'`: the connection is). `dies` settles once a call was refused and those sent before
 * it have settled, so what Redis holds then is what the dead process left.
 */
function mortal(client: Redis) {
  let left = Infinity;
  let how: 'killed' | 'dropped' = 'killed';
  let sent: Promise<unknown>[] = [];
  let died: () => void = () => undefined;
  let dead = false;
  const proxy = new Proxy(client, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (left <= 0) {
          dead = true;
          void Promise.allSettled(sent).then(died);
          return how === 'killed' ? new Promise(() => undefined) : Promise.reject(new Error('Connection is closed.'));
        }
        left--;
        const result: unknown = (value as (...a: unknown[]) => unknown).apply(target, args);
        if (result instanceof Promise) sent.push(result);
        return result;
      };
    },
  });
  return {
    client: proxy,
    /** From now on, `calls` more calls go through; answers `dies`. */
    dieAfter(calls: number, mode: 'killed' | 'dropped'): Promise<void> {
      left = calls;
      how = mode;
      sent = [];
      dead = false;
      return new Promise<void>((resolve) => (died = resolve));
    },
    /** Whether a call was refused since `dieAfter`. */
    get dead(): boolean {
      return dead;
    },
    revive(): void {
      left = Infinity;
    },
  };
}

describe('a process dying in the middle of a fork or a delete', () => {
  const turn = { runId: 'r', messages: [{ id: 'm', role: 'user' as const, content: [{ type: 'text' as const, text: 'hi' }] }], state: {} };
  let dying: Redis;
  let victim: ReturnType<typeof mortal>;
  let mortalStore: AgentStore;

  beforeAll(async () => {
    dying = await connectRedis();
    victim = mortal(dying);
    mortalStore = redisStore({ client: victim.client, prefix });
  });

  afterAll(async () => {
    await dying.quit();
  });

  /** Runs `operation` on the mortal store, its process dying after `calls` calls; answers how it ended. */
  async function dyingAt(calls: number, mode: 'killed' | 'dropped', operation: (s: AgentStore) => unknown): Promise<'done' | 'died'> {
    const dies = victim.dieAfter(calls, mode);
    const outcome = await Promise.race([
      Promise.resolve(operation(mortalStore)).then(
        () => 'done' as const,
        (error: unknown) => {
          if (!victim.dead) throw error; // a failure of its own, not its death
          return 'died' as const;
        },
      ),
      dies.then(() => 'died' as const),
    ]);
    if (outcome === 'died') await dies;
    victim.revive();
    return outcome;
  }

  /** Ages the parent's listing of `fork` by `ms` (as if that long had passed since it was made). */
  async function ageListing(parent: string, fork: string, ms: number): Promise<void> {
    const meta = `${prefix}session:{${parent}}:meta`;
    const field = `f:${JSON.stringify(fork)}`;
    const listed = Number(await client.hget(meta, field));
    if (listed > 0) await client.hset(meta, field, listed - ms);
  }

  it.each(['killed', 'dropped'] as const)('a fork left half-made wherever its process is %s: not shown, and its parent deletable a minute on', async (mode) => {
    let made = false;
    for (let calls = 0; calls < 10 && !made; calls++) {
      const parent = `fork-${mode}-${calls}`;
      const child = `${parent}-child`;
      await store.appendTurn(parent, 0, turn);
      made = (await dyingAt(calls, mode, (s) => s.fork(parent, child, 1))) === 'done';
      const fork = await otherStore.load(child);
      // Listed exactly when it exists: a listing its process left without the fork is not shown.
      expect({ calls, listed: await otherStore.forks(parent) }).toEqual({ calls, listed: fork ? [child] : [] });
      if (made) expect(fork).toMatchObject({ id: child, parentId: parent, forkedAt: 1, messages: turn.messages });
      if (fork) await otherStore.delete(child);
      await ageListing(parent, child, 61_000);
      await otherStore.delete(parent);
      expect(await otherStore.load(parent)).toBeUndefined();
    }
    expect(made).toBe(true);
  });

  it.each(['killed', 'dropped'] as const)(
    'a fork left half-deleted wherever its process is %s: not shown, and its parent deletable a minute on',
    async (mode) => {
      let deleted = false;
      for (let calls = 0; calls < 10 && !deleted; calls++) {
        const parent = `delete-${mode}-${calls}`;
        const child = `${parent}-child`;
        await store.appendTurn(parent, 0, turn);
        await store.fork(parent, child, 1);
        deleted = (await dyingAt(calls, mode, (s) => s.delete(child))) === 'done';
        const fork = await otherStore.load(child);
        expect({ calls, listed: await otherStore.forks(parent) }).toEqual({ calls, listed: fork ? [child] : [] });
        if (deleted) expect(fork).toBeUndefined();
        if (fork) await otherStore.delete(child);
        await ageListing(parent, child, 61_000);
        await otherStore.delete(parent);
        expect(await otherStore.load(parent)).toBeUndefined();
      }
      expect(deleted).toBe(true);
    },
  );

  it('a listing younger than a minute whose fork does not exist yet (a fork being made) keeps its parent', async () => {
    await store.appendTurn('making', 0, turn);
    // What a fork's first script leaves until its second runs: its process dies there.
    let calls = 0;
    while ((await client.llen(`${prefix}session:{making}:forks`)) === 0) await dyingAt(calls++, 'killed', (s) => s.fork('making', 'making-child', 1));
    expect(await otherStore.load('making-child')).toBeUndefined();
    expect(await otherStore.forks('making')).toEqual([]);
    await expect(otherStore.delete('making')).rejects.toThrow(SessionConflictError);
    await ageListing('making', 'making-child', 59_000);
    await expect(otherStore.delete('making')).rejects.toThrow(SessionConflictError);
    await ageListing('making', 'making-child', 2_000);
    await otherStore.delete('making');
    expect(await otherStore.load('making')).toBeUndefined();
    expect(await client.exists(`${prefix}session:{making}:forks`, `${prefix}session:{making}:meta`)).toBe(0);
  });
});
