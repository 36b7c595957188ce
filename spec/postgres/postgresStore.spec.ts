import type pg from 'pg';
import { firstValueFrom, lastValueFrom, take, toArray, type Observable } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { JournalConflictError, JournalFormatError, RunNotFoundError, type AgentResponse, type JournalEntry, type JournalRecord } from 'rx-agent';
import { postgresStore, type PgPool, type PgPoolClient, type PostgresStore } from 'rx-agent/postgres';
import { describeStoreConformance } from 'rx-agent/testing';
import { schemaSql } from '../../src/postgres/schema';
import { connectPool, dropSchema, uniqueSchema } from '../support/postgres';

const event = (seq: number, text = 'tok '): JournalRecord => ({ version: 1, kind: 'event', event: { type: 'text-delta', iteration: 0, text, seq } as never });
const end: JournalRecord = { version: 1, kind: 'end', reason: 'completed' };
const permission = (requestId: string, approved = true): AgentResponse => ({ type: 'permission-response', requestId, approved });
const user = (text: string) => ({ role: 'user' as const, content: [{ type: 'text' as const, text }] });

/** Collects what an Observable emits until `count` items came. */
const first = <T>(source: Observable<T>, count: number) => firstValueFrom(source.pipe(take(count), toArray()));
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A gate: `opened` settles once `open()` is called. */
function gate() {
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/**
 * `target` as a store's pool, slowed on demand: while a hold is set, the store's statements
 * (`query`), its taking of a listening connection (`connect`) or its LISTEN (`listen`) wait for it,
 * as on a slow network or a busy pool.
 */
function slowed(target: pg.Pool) {
  const holds: { query?: Promise<void>; connect?: Promise<void>; listen?: Promise<void> } = {};
  const listening = (client: pg.PoolClient): PgPoolClient => ({
    query: async (text: string, values?: unknown[]) => {
      if (text.startsWith('LISTEN')) await holds.listen;
      return client.query(text, values);
    },
    on: (name, listener) => client.on(name as 'notification', listener),
    removeListener: (name, listener) => client.removeListener(name, listener),
    release: (error) => client.release(error),
  });
  const pool: PgPool = {
    query: async (config) => {
      await holds.query;
      return target.query(config);
    },
    connect: async () => {
      await holds.connect;
      return listening(await target.connect());
    },
  };
  return { pool, holds };
}

/** Hostile ids: SQL-looking text, quotes, placeholders, NUL, newlines, lone surrogates, an emoji, 1 MB. */
const HOSTILE_IDS: readonly [string, string][] = [
  ['quotes', `it's "quoted" \`too\``],
  ['SQL', "x'; DROP TABLE runs; --"],
  ['placeholders', '$1 $2::text %s ?'],
  ['backslashes and braces', '\\x00 {a,b} \\"'],
  ['NUL and newlines', 'a\u0000b\nc\r\nd'],
  ['a lone surrogate', 'x\uD800y'],
  ['another lone surrogate', 'x\uDFFFy'],
  ['an emoji', 'run-🦊'],
  ['1 MB', 'r'.repeat(1 << 20)],
];

const schema = uniqueSchema('postgresStore');
let pool: pg.Pool;
let otherPool: pg.Pool;
let store: PostgresStore;
/** The same tables through another pool: what another process sees. */
let otherStore: PostgresStore;
const stores: PostgresStore[] = [];

/** A store on the spec's schema, closed after the file. */
function makeStore(options: Partial<Parameters<typeof postgresStore>[0]> = {}): PostgresStore {
  const made = postgresStore({ pool, schema, retainMs: 60_000, ...options });
  stores.push(made);
  return made;
}

beforeAll(async () => {
  pool = await connectPool();
  otherPool = await connectPool();
  store = makeStore();
  otherStore = postgresStore({ pool: otherPool, schema, retainMs: 60_000 });
  stores.push(otherStore);
  await store.migrate();
});

afterAll(async () => {
  for (const made of stores) await made.close();
  await dropSchema(pool, schema);
  await pool.end();
  await otherPool.end();
});

describeStoreConformance(
  'postgresStore',
  () => {
    const made = postgresStore({ pool, schema });
    stores.push(made);
    return made;
  },
  { teardown: (made) => (made as PostgresStore).close() },
);

// A run kept for no time after its end: the contract holds too (a follower subscribed before the
// end gets it, however late its LISTEN is confirmed).
describeStoreConformance(
  'postgresStore, retainMs 0',
  () => {
    const made = postgresStore({ pool, schema, retainMs: 0 });
    stores.push(made);
    return made;
  },
  { teardown: (made) => (made as PostgresStore).close() },
);

describe('postgresStore options', () => {
  it('refuses what is not a pg Pool, and bad options, naming them', () => {
    expect(() => postgresStore(undefined as never)).toThrow('postgresStore: options must be an object, got undefined');
    expect(() => postgresStore({ pool: {} as never })).toThrow("postgresStore: 'pool' must be a pg Pool (new pg.Pool(…)), got {}");
    expect(() => postgresStore({ pool, schema: 'a"; DROP SCHEMA public; --' })).toThrow(
      `postgresStore: 'schema' must be letters, digits and _ (not first), up to 63, got "a\\"; DROP SCHEMA public; --"`,
    );
    expect(() => postgresStore({ pool, schema: 'x'.repeat(64) })).toThrow("'schema' must be letters");
    expect(() => postgresStore({ pool, retainMs: -1 })).toThrow(
      "postgresStore: 'retainMs' must be a number of ms from 0 to Number.MAX_SAFE_INTEGER, or Infinity, got -1",
    );
    expect(() => postgresStore({ pool, retainMs: NaN })).toThrow("'retainMs' must be a number of ms");
    expect(() => postgresStore({ pool, sweepEvery: -5 })).toThrow("postgresStore: 'sweepEvery' must be a number of ms from 0 to 2147483647 (0: never), got -5");
    // setInterval runs a longer period every ms (TimeoutOverflowWarning): refused, naming the maximum.
    expect(() => postgresStore({ pool, sweepEvery: 1e10 })).toThrow(
      new TypeError("postgresStore: 'sweepEvery' must be a number of ms from 0 to 2147483647 (0: never), got 10000000000"),
    );
    expect(() => postgresStore({ pool, sweepEvery: 2 ** 31 })).toThrow("'sweepEvery' must be a number of ms from 0 to 2147483647");
    expect(() => postgresStore({ pool, sweepEvery: Infinity })).toThrow("'sweepEvery' must be a number of ms from 0 to 2147483647");
    expect(() => postgresStore({ pool, sweepEvery: 2 ** 31 - 1 })).not.toThrow();
    expect(() => postgresStore({ pool, scheduler: {} as never })).toThrow("postgresStore: 'scheduler' must be an rxjs SchedulerLike");
  });

  it('refuses an unknown option (a misspelt one is not left out in silence), naming it and the known ones', () => {
    expect(() => postgresStore({ pool, retentionMs: 5 } as never)).toThrow(
      new TypeError("postgresStore: unknown option(s) 'retentionMs' (known: pool, schema, retainMs, sweepEvery, scheduler)"),
    );
    expect(() => postgresStore({ pool, sweepInterval: 1000, client: undefined } as never)).toThrow(
      "postgresStore: unknown option(s) 'sweepInterval', 'client' (known: pool, schema, retainMs, sweepEvery, scheduler)",
    );
    expect(() => postgresStore({ pool, schema, retainMs: 5, sweepEvery: 0, scheduler: undefined })).not.toThrow();
  });

  it('says to call migrate() when its tables are missing', async () => {
    const bare = postgresStore({ pool, schema: uniqueSchema('bare') });
    await expect(bare.append('x', 0, [event(1)])).rejects.toThrow(
      /^postgresStore: schema "spec_bare_\w+" does not hold this store's tables; call store.migrate\(\) first/,
    );
    await expect(bare.load('x')).rejects.toThrow('call store.migrate() first');
    await bare.close();
  });
});

describe('migrate', () => {
  it('creates the tables once, from several stores at once, and says which version it found and left', async () => {
    const fresh = uniqueSchema('migrate');
    const pools = await Promise.all([connectPool(), connectPool(), connectPool()]);
    try {
      const results = await Promise.all(pools.map((p) => postgresStore({ pool: p, schema: fresh }).migrate()));
      expect(results.filter((r) => r.from === 0)).toEqual([{ from: 0, to: 2 }]);
      expect(results.filter((r) => r.from === 2)).toHaveLength(2);
      expect(await postgresStore({ pool, schema: fresh }).migrate()).toEqual({ from: 2, to: 2 });
      const { rows } = await pool.query<{ table_name: string }>('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1', [fresh]);
      expect(rows.map((r) => r.table_name)).toEqual(['answers', 'journal', 'leases', 'runs', 'schema_version', 'session_leases', 'session_turns', 'sessions']);
    } finally {
      await dropSchema(pool, fresh);
      await Promise.all(pools.map((p) => p.end()));
    }
  });

  it('refuses tables made by a newer version', async () => {
    const newer = uniqueSchema('newer');
    try {
      const made = postgresStore({ pool, schema: newer });
      await made.migrate();
      await pool.query(`INSERT INTO "${newer}".schema_version (version) VALUES (3)`);
      await expect(made.migrate()).rejects.toThrow(
        `postgresStore: schema "${newer}" is at version 3, made by a newer rx-agent; this one knows up to 2 (upgrade it)`,
      );
    } finally {
      await dropSchema(pool, newer);
    }
  });

  it('upgrades tables of version 1, keeping their runs; a run past its retention then keeps its rows, keyless, when its id starts anew', async () => {
    const older = uniqueSchema('v1');
    const s = `"${older}"`;
    try {
      // The tables as version 1 made them.
      await pool.query(`CREATE SCHEMA ${s}`);
      await pool.query(`CREATE TABLE ${s}.schema_version (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now())`);
      await pool.query(schemaSql(s, older));
      await pool.query(`INSERT INTO ${s}.schema_version (version) VALUES (1)`);
      const dropping = postgresStore({ pool, schema: older, retainMs: 0, sweepEvery: 0 });
      await dropping.append('u1', 0, [event(1)]);
      expect(await dropping.migrate()).toEqual({ from: 1, to: 2 });
      expect(await dropping.migrate()).toEqual({ from: 2, to: 2 });
      expect((await dropping.read('u1'))?.map((e) => e.record)).toEqual([event(1)]);
      await dropping.append('u1', 1, [end]);
      expect(await dropping.append('u1', 0, [event(1, 'again')])).toBe(1);
      const { rows } = await pool.query<{ keyed: boolean; position: string }>(
        `SELECT key IS NOT NULL AS keyed, position FROM ${s}.runs WHERE run_id = 'u1' ORDER BY id`,
      );
      expect(rows).toEqual([
        { keyed: false, position: '2' },
        { keyed: true, position: '1' },
      ]);
      expect((await dropping.read('u1'))?.map((e) => e.record)).toEqual([event(1, 'again')]);
    } finally {
      await dropSchema(pool, older);
    }
  });

  it('keeps two stores in two schemas of one database apart', async () => {
    const second = uniqueSchema('second');
    const apart = postgresStore({ pool, schema: second });
    try {
      await apart.migrate();
      await store.append('shared-id', 0, [event(1)]);
      expect(await apart.read('shared-id')).toBeUndefined();
      await apart.append('shared-id', 0, [event(1, 'second')]);
      const heard = first(apart.follow('shared-id', 0), 2);
      await apart.append('shared-id', 1, [event(2, 'second')]);
      expect((await heard).map((e) => e.record)).toEqual([event(1, 'second'), event(2, 'second')]);
      expect((await store.read('shared-id'))?.map((e) => e.record)).toEqual([event(1)]);
    } finally {
      await apart.close();
      await dropSchema(pool, second);
    }
  });
});

describe('the journal', () => {
  it('appends with the expected position, one row per record, and reads back from any position', async () => {
    expect(await store.append('j1', 0, [event(1), event(2)])).toBe(2);
    expect(await store.append('j1', 2, [event(3)])).toBe(3);
    expect(await store.append('j1', 3, [])).toBe(3);
    expect((await otherStore.read('j1', 1))?.map((entry) => entry.position)).toEqual([2, 3]);
    expect(await store.read('j1', 3)).toEqual([]);
    expect(await store.read('j1', 99)).toEqual([]);
    const { rows } = await pool.query(
      `SELECT j.seq::int, j.record FROM "${schema}".journal j JOIN "${schema}".runs r ON r.id = j.run WHERE r.run_id = 'j1' ORDER BY 1`,
    );
    expect(rows).toEqual([1, 2, 3].map((seq) => ({ seq, record: JSON.stringify(event(seq)) })));
  });

  it('refuses an append at another position, writing nothing of it', async () => {
    await store.append('j2', 0, [event(1)]);
    await expect(store.append('j2', 0, [event(2)])).rejects.toThrow(new JournalConflictError('j2', 0, 1));
    await expect(store.append('j2', 2, [event(2), event(3)])).rejects.toBeInstanceOf(JournalConflictError);
    await expect(store.append('j-none', 1, [event(1)])).rejects.toThrow(new JournalConflictError('j-none', 1, 0));
    expect((await store.read('j2'))?.length).toBe(1);
    expect(await store.read('j-none')).toBeUndefined();
  });

  it('lets one of many racing appends at the same position through, a whole batch, also when they create the run', async () => {
    for (const [runId, at] of [
      ['race-new', 0],
      ['race-old', 1],
    ] as const) {
      if (at === 1) await store.append(runId, 0, [event(1)]);
      const writers = ['a', 'b', 'c', 'd'].map((w, i) =>
        (i % 2 ? otherStore : store).append(runId, at, [event(at + 1, w), event(at + 2, w), event(at + 3, w)]),
      );
      const outcomes = await Promise.allSettled(writers);
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toEqual([{ status: 'fulfilled', value: at + 3 }]);
      for (const o of outcomes.filter((o) => o.status === 'rejected')) expect(o.reason).toEqual(new JournalConflictError(runId, at, at + 3));
      const texts = ((await store.read(runId, at)) as JournalEntry[]).map((entry) => (entry.record as { event: { text: string } }).event.text);
      expect(texts).toHaveLength(3);
      expect(new Set(texts).size).toBe(1);
    }
  });

  it('a reader never sees part of an append: 200 records land together', async () => {
    await store.append('whole', 0, [event(1)]);
    const batch = Array.from({ length: 200 }, (_, i) => event(i + 2, 'x'.repeat(1000)));
    const sizes = new Set<number>();
    const writing = store.append('whole', 1, batch);
    for (let i = 0; i < 20; i++) sizes.add(((await otherStore.read('whole')) as JournalEntry[]).length);
    await writing;
    sizes.add(((await otherStore.read('whole')) as JournalEntry[]).length);
    expect([...sizes].every((n) => n === 1 || n === 201)).toBe(true);
  });

  it('writes nothing when a record cannot be serialised', async () => {
    const cyclic: Record<string, unknown> = { version: 1, kind: 'answer', requestId: 'q' };
    cyclic.response = cyclic;
    await expect(store.append('j3', 0, [event(1), cyclic as never])).rejects.toThrow(TypeError);
    expect(await store.read('j3')).toBeUndefined();
  });

  it('refuses bad arguments with errors that name them', async () => {
    await expect(store.append('', 0, [])).rejects.toThrow('append: a run id must be a non-empty string, got ""');
    await expect(store.append('x', -1, [])).rejects.toThrow('append: the expected position must be an integer >= 0, got -1');
    await expect(store.append('x', 0, 'no' as never)).rejects.toThrow('append: records must be an array, got "no"');
    await expect(store.append('x', 0, [null as never])).rejects.toThrow('append: record 0 is not a journal record: null');
    await expect(store.read('x', 1.5)).rejects.toThrow("read: 'after' must be a position (an integer >= 0), got 1.5");
    await expect(lastValueFrom(store.follow('x', -2))).rejects.toThrow("follow: 'after' must be a position (an integer >= 0), got -2");
    await expect(store.putAnswer('x', { requestId: 3 } as never)).rejects.toThrow(
      'putAnswer: a response must be an object with a string requestId, got {"requestId":3}',
    );
    await expect(store.acquireLease('x', '', 10)).rejects.toThrow('acquireLease: a lease owner must be a non-empty string, got ""');
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
    await expect(store.appendTurn('s', 2 ** 31, { runId: 'r', messages: [], state: {} })).rejects.toThrow(
      'appendTurn: the expected revision must be at most 2147483646, got 2147483648',
    );
    await expect(store.fork('nobody', 'f', 0)).rejects.toThrow("fork: no session 'nobody' in the store");
    await expect(store.acquireSession('s', 'o', -1)).rejects.toThrow('acquireSession: ttlMs must be a finite number of ms above 0, got -1');
    await expect(store.sweep({ batch: 0 })).rejects.toThrow("sweep: 'batch' must be an integer from 1 to 2^31 - 1, got 0");
    await expect(store.sweep(null as never)).rejects.toThrow(new TypeError('sweep: options must be an object, got null'));
    await expect(store.sweep({ batchSize: 10 } as never)).rejects.toThrow(new TypeError("sweep: unknown option(s) 'batchSize' (known: batch)"));
  });

  it('refuses appends once the run has ended', async () => {
    await store.append('ended', 0, [event(1), end]);
    await expect(store.append('ended', 2, [event(3)])).rejects.toThrow(new JournalConflictError('ended', 2, 2));
    expect(await store.append('ended', 2, [])).toBe(2);
  });

  it('reads a record of a newer format, or one that is not JSON, as a JournalFormatError naming the run and position', async () => {
    await store.append('fmt', 0, [event(1), { version: 99, kind: 'event', event: { type: 'text-delta', seq: 1 } } as never]);
    await expect(store.read('fmt')).rejects.toThrow("Run 'fmt', journal entry 2: written by journal format version 99");
    await pool.query(
      `UPDATE "${schema}".journal SET record = '{"version":1,"kind":"ev' WHERE run = (SELECT id FROM "${schema}".runs WHERE run_id = 'fmt') AND seq = 1`,
    );
    await expect(store.read('fmt')).rejects.toThrow(new JournalFormatError('fmt', 1, 'the record is not JSON'));
    await expect(lastValueFrom(store.follow('fmt', 0))).rejects.toThrow("Run 'fmt', journal entry 1: the record is not JSON");
  });
});

describe('follow', () => {
  it('replays what is written, then each append as it lands, across pools, none twice', async () => {
    await store.append('f1', 0, [event(1), event(2)]);
    const done = lastValueFrom(otherStore.follow('f1', 1).pipe(take(5), toArray()));
    await delay(50);
    await store.append('f1', 2, [event(3)]);
    await store.append('f1', 3, [event(4), event(5)]);
    await store.append('f1', 5, [event(6)]);
    const entries = await done;
    expect(entries.map((entry) => entry.position)).toEqual([2, 3, 4, 5, 6]);
    expect(entries).toEqual((await store.read('f1', 1))?.slice(0, 5));
  });

  it('misses nothing appended while it subscribes, and follows 100,000 records and a 3 MB one', async () => {
    await store.append('f2', 0, [event(1)]);
    const following = lastValueFrom(otherStore.follow('f2', 0).pipe(take(100_041), toArray()));
    let position = 1;
    for (let i = 0; i < 39; i++) position = await store.append('f2', position, [event(position + 1)]);
    await store.append('f2', 40, [event(41, 'x'.repeat(3 << 20))]);
    expect(
      await store.append(
        'f2',
        41,
        Array.from({ length: 100_000 }, (_, i) => event(i + 42)),
      ),
    ).toBe(100_041);
    const entries = await following;
    expect(entries.map((entry) => entry.position)).toEqual(Array.from({ length: 100_041 }, (_, i) => i + 1));
    expect((entries[40].record as { event: { text: string } }).event.text).toHaveLength(3 << 20);
  }, 60_000);

  it('errors with RunNotFoundError for a run the store does not hold', async () => {
    await expect(lastValueFrom(store.follow('no-such-run', 0))).rejects.toThrow(new RunNotFoundError('no-such-run'));
  });

  it('completes when a finished run is dropped (retainMs 0: at its end), after the end record', async () => {
    const dropping = makeStore({ retainMs: 0 });
    await dropping.append('f3', 0, [event(1)]);
    const following = lastValueFrom(otherStore.follow('f3', 0).pipe(toArray()));
    await delay(50);
    await dropping.append('f3', 1, [event(2), end]);
    expect((await following).map((entry) => entry.record.kind)).toEqual(['event', 'event', 'end']);
    expect(await store.read('f3')).toBeUndefined();
  });

  it.each(['LISTEN is confirmed', 'first read lands'] as const)(
    'retainMs 0: a follower subscribed before the end gets the whole run, though its %s only after the end',
    async (late) => {
      const runId = `t1-${late}`;
      const dropping = makeStore({ retainMs: 0 });
      await dropping.append(runId, 0, [event(1)]);
      const own = await connectPool();
      const { pool: slow, holds } = slowed(own);
      const held = gate();
      if (late === 'LISTEN is confirmed') holds.listen = held.opened;
      else holds.query = held.opened;
      const follower = postgresStore({ pool: slow, schema });
      try {
        const entries = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
        await delay(50);
        await dropping.append(runId, 1, [event(2), end]);
        expect(await store.read(runId)).toBeUndefined(); // dropped at its end, for readers
        held.open();
        expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
      } finally {
        held.open();
        await follower.close();
        await own.end();
      }
    },
  );

  it('retainMs 0: a follower subscribed while the end is written (a slow transaction) gets the whole run, though its first read lands after', async () => {
    const dropping = makeStore({ retainMs: 0 });
    await dropping.append('t4', 0, [event(1)]);
    const own = await connectPool();
    const { pool: slow, holds } = slowed(own);
    const held = gate();
    holds.query = held.opened;
    const follower = postgresStore({ pool: slow, schema });
    // The end's transaction starts, then waits for the run's row, held here a while.
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM "${schema}".runs WHERE run_id = 't4' FOR UPDATE`);
      const ending = dropping.append('t4', 1, [event(2), end]);
      await delay(50);
      const entries = lastValueFrom(follower.follow('t4', 0).pipe(toArray()));
      await delay(50);
      await locker.query('COMMIT');
      expect(await ending).toBe(3);
      held.open();
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3]);
    } finally {
      held.open();
      locker.release();
      await follower.close();
      await own.end();
    }
  });

  it('a short retainMs: a follower subscribed before the run expired gets it to its end, though its first read lands after', async () => {
    const brief = makeStore({ retainMs: 100 });
    await brief.append('t3', 0, [event(1), end]);
    const own = await connectPool();
    const { pool: slow, holds } = slowed(own);
    const held = gate();
    holds.query = held.opened;
    const follower = postgresStore({ pool: slow, schema });
    try {
      const entries = lastValueFrom(follower.follow('t3', 0).pipe(toArray()));
      await delay(250);
      expect(await store.read('t3')).toBeUndefined(); // past its retention, for readers
      held.open();
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2]);
    } finally {
      held.open();
      await follower.close();
      await own.end();
    }
  });

  it.each([0, 100])(
    'retainMs %i: a follower subscribed before the run was dropped gets its run to its end, not a new run of the id started before its first read lands',
    async (retainMs) => {
      const runId = `t-reused-${retainMs}`;
      const writer = makeStore({ retainMs });
      await writer.append(runId, 0, [event(1, 'old')]);
      const own = await connectPool();
      const { pool: slow, holds } = slowed(own);
      const held = gate();
      holds.query = held.opened;
      const follower = postgresStore({ pool: slow, schema });
      try {
        const entries = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
        await delay(50);
        await writer.append(runId, 1, [event(2, 'old'), end]);
        await delay(retainMs + 50);
        expect(await store.read(runId)).toBeUndefined(); // dropped
        // A new run of the id, longer than the old one, ended before the follower's first read lands.
        expect(await writer.append(runId, 0, [event(1, 'new'), event(2, 'new'), event(3, 'new'), event(4, 'new'), end])).toBe(5);
        held.open();
        const got = await entries;
        expect(got.map((entry) => entry.position)).toEqual([1, 2, 3]);
        expect(got.slice(0, 2).map((entry) => (entry.record as { event: { text: string } }).event.text)).toEqual(['old', 'old']);
      } finally {
        held.open();
        await follower.close();
        await own.end();
      }
    },
  );

  it('retainMs 0: a follower arriving after the end gets RunNotFoundError, like a reader, and the id is free at once', async () => {
    const dropping = makeStore({ retainMs: 0 });
    await dropping.append('t2', 0, [event(1), end]);
    await delay(200); // a follower subscribed within a round trip of the end may get the run still
    expect(await otherStore.read('t2')).toBeUndefined();
    await expect(lastValueFrom(otherStore.follow('t2', 0))).rejects.toThrow(new RunNotFoundError('t2'));
    expect(await otherStore.putAnswer('t2', permission('q'))).toBe(false);
    expect(await otherStore.received('t2')).toEqual({ answers: [], cancelled: false });
    // The id starts a new run, followed like any other.
    expect(await dropping.append('t2', 0, [event(1, 'again')])).toBe(1);
    const following = lastValueFrom(otherStore.follow('t2', 0).pipe(toArray()));
    await delay(50);
    await dropping.append('t2', 1, [end]);
    const entries = await following;
    expect(entries.map((entry) => entry.position)).toEqual([1, 2]);
    expect((entries[0].record as { event: { text: string } }).event.text).toBe('again');
    expect(await otherStore.read('t2')).toBeUndefined();
  });

  it('completes when a finished run’s retention passes, on the scheduler’s clock', async () => {
    const brief = makeStore({ retainMs: 300 });
    await brief.append('f4', 0, [event(1), end]);
    const started = Date.now();
    const entries = await lastValueFrom(otherStore.follow('f4', 0).pipe(toArray()));
    expect(entries.map((entry) => entry.position)).toEqual([1, 2]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(200);
    expect(await store.read('f4')).toBeUndefined();
    await delay(200); // a follower subscribed within a round trip of the expiry may get the run still
    await expect(lastValueFrom(store.follow('f4', 0))).rejects.toThrow(new RunNotFoundError('f4'));
  });

  it('holds one listening connection for every run it follows, given back when nothing is followed', async () => {
    const own = await connectPool({ application_name: `rx-agent-spec-${process.pid}` });
    const listening = async () =>
      Number(
        (
          await pool.query<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND query = $2`, [
            `rx-agent-spec-${process.pid}`,
            `LISTEN "${schema}"`,
          ])
        ).rows[0].n,
      );
    const listener = postgresStore({ pool: own, schema });
    try {
      await store.append('f5', 0, [event(1)]);
      const subscriptions = [listener.follow('f5', 0).subscribe(), listener.answers('f5').subscribe(), listener.cancellations('f6').subscribe()];
      await delay(100);
      expect(await listening()).toBe(1);
      for (const subscription of subscriptions) subscription.unsubscribe();
      await delay(100);
      expect(await listening()).toBe(0);
      expect(own.totalCount - own.idleCount).toBe(0); // given back
    } finally {
      await listener.close();
      await own.end();
    }
  });
});

describe('a lost listening connection', () => {
  const terminate = async (application: string) => {
    const { rowCount } = await pool.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, [
      application,
    ]);
    expect(rowCount).toBe(1);
  };

  it('is opened again, and what was appended meanwhile is read: a follower misses nothing', async () => {
    const application = `rx-agent-spec-resync-${process.pid}`;
    const own = await connectPool({ application_name: application });
    const following = postgresStore({ pool: own, schema });
    try {
      await store.append('lost1', 0, [event(1)]);
      const entries = lastValueFrom(following.follow('lost1', 0).pipe(take(4), toArray()));
      const answers = first(following.answers('lost1'), 1);
      await delay(100);
      await terminate(application);
      await store.append('lost1', 1, [event(2), event(3)]);
      await store.putAnswer('lost1', permission('q1'));
      await delay(300);
      // And again, later.
      await terminate(application);
      await store.append('lost1', 3, [event(4)]);
      expect((await entries).map((entry) => entry.position)).toEqual([1, 2, 3, 4]);
      expect(await answers).toEqual([permission('q1')]);
    } finally {
      await following.close();
      await own.end();
    }
  });

  it.each(['its id started a new run', 'a sweep ran'] as const)(
    'retainMs 0: once back, a follower gets the end of a run that ended while it was away, though %s meanwhile',
    async (meanwhile) => {
      const runId = `lost0-${meanwhile}`;
      const application = `rx-agent-spec-resync0-${process.pid}`;
      const own = await connectPool({ application_name: application });
      const { pool: slow, holds } = slowed(own);
      const held = gate();
      const follower = postgresStore({ pool: slow, schema });
      const dropping = makeStore({ retainMs: 0, sweepEvery: 0 });
      try {
        await dropping.append(runId, 0, [event(1)]);
        const entries = lastValueFrom(follower.follow(runId, 0).pipe(toArray()));
        await delay(100);
        holds.connect = held.opened; // it takes a while to get another connection
        await terminate(application);
        await dropping.append(runId, 1, [event(2), end]); // notified while it is away
        if (meanwhile === 'its id started a new run') {
          expect(await store.append(runId, 0, [event(1, 'again')])).toBe(1);
        } else {
          await delay(1100);
          await store.sweep();
        }
        held.open();
        expect((await entries).map((entry) => entry.record.kind)).toEqual(['event', 'event', 'end']);
      } finally {
        held.open();
        await follower.close();
        await own.end();
      }
    },
  );

  it('fails the followers, saying so, when it cannot be opened again', async () => {
    const application = `rx-agent-spec-lost-${process.pid}`;
    // Idle connections close at once: the listening one is the pool's only connection.
    const own = await connectPool({ application_name: application, idleTimeoutMillis: 1 });
    const following = postgresStore({ pool: own, schema });
    try {
      await store.append('lost2', 0, [event(1)]);
      // Both fail at once: each one's error is kept from the start (none is left unhandled).
      const entries = lastValueFrom(following.follow('lost2', 0).pipe(toArray())).then(
        () => new Error('completed'),
        (error: Error) => error,
      );
      const cancels = lastValueFrom(following.cancellations('lost2')).then(
        () => new Error('completed'),
        (error: Error) => error,
      );
      await delay(100);
      // The database becomes unreachable for this pool (a port nothing listens on), and the
      // listening connection is cut.
      for (let waited = 0; own.totalCount > 1 && waited < 5000; waited += 20) await delay(20);
      expect(own.totalCount).toBe(1);
      (own as unknown as { options: { connectionString?: string } }).options.connectionString = 'postgres://postgres@127.0.0.1:1/test';
      await terminate(application);
      expect((await entries).message).toMatch(/^postgresStore: the listening connection was lost and could not be opened again \(.*ECONNREFUSED/);
      expect((await cancels).message).toMatch('postgresStore: the listening connection was lost and could not be opened again');
    } finally {
      await following.close();
      await own.end();
    }
  });

  it('close() completes what the store follows, and gives its connection back', async () => {
    const own = await connectPool();
    const closing = postgresStore({ pool: own, schema });
    await store.append('closing', 0, [event(1)]);
    const entries = lastValueFrom(closing.follow('closing', 0).pipe(toArray()));
    await delay(50);
    await closing.close();
    expect((await entries).map((entry) => entry.position)).toEqual([1]);
    expect(own.totalCount - own.idleCount).toBe(0); // back once close() resolves
    await own.end();
  });
});

describe('answers and cancels', () => {
  it('keeps the first answer to a request; another process hears each one at once', async () => {
    await store.append('a1', 0, [event(1)]);
    const heard = first(otherStore.answers('a1'), 3);
    await delay(50);
    expect(await store.putAnswer('a1', permission('q1'))).toBe(true);
    expect(await otherStore.putAnswer('a1', permission('q1', false))).toBe(false);
    expect(await store.putAnswer('a1', permission('q2', false))).toBe(true);
    expect(await store.putAnswer('a1', permission('q3'))).toBe(true);
    expect(await heard).toEqual([permission('q1'), permission('q2', false), permission('q3')]);
    expect(await first(store.answers('a1'), 3)).toEqual([permission('q1'), permission('q2', false), permission('q3')]);
  });

  it('received() reads the answers kept and the cancel flag in one statement, from any process', async () => {
    expect(await store.received('v1')).toEqual({ answers: [], cancelled: false }); // no such run
    await otherStore.append('v1', 0, [event(1)]);
    expect(await store.received('v1')).toEqual({ answers: [], cancelled: false });
    await otherStore.putAnswer('v1', permission('q1'));
    await otherStore.putAnswer('v1', permission('q2', false));
    expect(await store.received('v1')).toEqual({ answers: [permission('q1'), permission('q2', false)], cancelled: false });
    await otherStore.requestCancel('v1');
    expect(await store.received('v1')).toEqual({ answers: [permission('q1'), permission('q2', false)], cancelled: true });
    // A run past its retention has received nothing.
    const brief = makeStore({ retainMs: 0 });
    await brief.append('v2', 0, [event(1)]);
    await brief.putAnswer('v2', permission('q1'));
    await brief.append('v2', 1, [end]);
    expect(await store.received('v2')).toEqual({ answers: [], cancelled: false });
  });

  it('keeps one of many racing answers to one request', async () => {
    await store.append('a2', 0, [event(1)]);
    const kept = await Promise.all(
      Array.from({ length: 8 }, (_, i) => (i % 2 ? otherStore : store).putAnswer('a2', { ...permission('q'), approved: i % 3 === 0 })),
    );
    expect(kept.filter(Boolean)).toHaveLength(1);
    expect(await first(store.answers('a2'), 1)).toEqual([{ ...permission('q'), approved: kept.indexOf(true) % 3 === 0 }]);
  });

  it('errors answers() with a stored answer that is not a response (a corrupted row), naming it', async () => {
    await store.append('bad-answer', 0, [event(1)]);
    await store.putAnswer('bad-answer', permission('q'));
    await pool.query(`UPDATE "${schema}".answers SET response = '"not a response"' WHERE run = (SELECT id FROM "${schema}".runs WHERE run_id = 'bad-answer')`);
    await expect(firstValueFrom(store.answers('bad-answer'))).rejects.toThrow("Run 'bad-answer': answer 1 in the store is not a response");
  });

  it('keeps no answer and no cancel for a run it does not hold', async () => {
    expect(await store.putAnswer('no-such-run', permission('q'))).toBe(false);
    await store.requestCancel('no-such-run');
    const { rows } = await pool.query(`SELECT 1 FROM "${schema}".runs WHERE run_id = 'no-such-run'`);
    expect(rows).toEqual([]);
  });

  it('cancels once; cancellations() emits at once when set before, or when it is set', async () => {
    await store.append('c1', 0, [event(1)]);
    const cancelled = firstValueFrom(otherStore.cancellations('c1'));
    await delay(50);
    await store.requestCancel('c1');
    await store.requestCancel('c1');
    await expect(cancelled).resolves.toBeUndefined();
    await expect(lastValueFrom(store.cancellations('c1').pipe(toArray()))).resolves.toEqual([undefined]);
  });
});

describe('retention', () => {
  it('reads a finished run as gone after retainMs, and sweep() deletes its rows in batches', async () => {
    const brief = makeStore({ retainMs: 100, sweepEvery: 0 });
    const kept = makeStore({ retainMs: Infinity, sweepEvery: 0 });
    await brief.append('r1', 0, [event(1), event(2), event(3)]);
    await brief.putAnswer('r1', permission('q1'));
    await brief.requestCancel('r1');
    await brief.append('r1', 3, [end]);
    await kept.append('r-kept', 0, [event(1), end]);
    await brief.append('r-live', 0, [event(1)]);
    await brief.acquireLease('r1', 'me', 50);
    await delay(150);
    expect(await store.read('r1')).toBeUndefined();
    expect(await store.putAnswer('r1', permission('q2'))).toBe(false);
    // Deleted 10 s after its retention, not before (a follower subscribed before its expiry still
    // reads it): its rows and its lease are aged by that much here.
    const count = async () => Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".runs WHERE run_id = 'r1'`)).rows[0].n);
    expect(await count()).toBe(1);
    await store.sweep();
    expect(await count()).toBe(1);
    for (const table of ['runs', 'leases']) {
      await pool.query(`UPDATE "${schema}".${table} SET expires_at = expires_at - interval '10 seconds' WHERE run_id = 'r1'`);
    }
    const swept = await store.sweep({ batch: 2 });
    expect(swept.records).toBeGreaterThanOrEqual(4);
    expect(swept.runs).toBeGreaterThanOrEqual(1);
    expect(swept.leases).toBeGreaterThanOrEqual(1);
    expect(await count()).toBe(0);
    const orphans = await pool.query(`SELECT 1 FROM "${schema}".journal j WHERE NOT EXISTS (SELECT 1 FROM "${schema}".runs r WHERE r.id = j.run)`);
    expect(orphans.rows).toEqual([]);
    expect((await store.read('r-kept'))?.length).toBe(2);
    expect((await store.read('r-live'))?.length).toBe(1);
    // The id is free again.
    expect(await store.append('r1', 0, [event(1)])).toBe(1);
  });

  it('an id past its retention starts a new run at position 0, even before a sweep', async () => {
    const brief = makeStore({ retainMs: 0, sweepEvery: 0 });
    await brief.append('r2', 0, [event(1), end]);
    expect(await store.append('r2', 0, [event(1, 'again')])).toBe(1);
    expect((await store.read('r2'))?.map((e) => e.record)).toEqual([event(1, 'again')]);
  });

  it('retainMs 0: keeps a run’s rows 10 s past its end for its followers, keyless once its id starts anew, then sweeps them', async () => {
    const dropping = makeStore({ retainMs: 0, sweepEvery: 0 });
    await dropping.append('r3', 0, [event(1), end]);
    await dropping.append('r3', 0, [event(1, 'again'), end]);
    await dropping.append('r3', 0, [event(1, 'third')]);
    const rows = async () =>
      (
        await pool.query<{ keyed: boolean; records: string }>(
          `SELECT r.key IS NOT NULL AS keyed, (SELECT count(*) FROM "${schema}".journal j WHERE j.run = r.id) AS records FROM "${schema}".runs r WHERE r.run_id = 'r3' ORDER BY r.id`,
        )
      ).rows;
    expect(await rows()).toEqual([
      { keyed: false, records: '2' },
      { keyed: false, records: '2' },
      { keyed: true, records: '1' },
    ]);
    expect((await store.read('r3'))?.map((e) => e.record)).toEqual([event(1, 'third')]);
    // Aged by 9 s, then by 1 s more.
    const age = (by: string) => pool.query(`UPDATE "${schema}".runs SET expires_at = expires_at - interval '${by}' WHERE run_id = 'r3' AND key IS NULL`);
    await age('9 seconds');
    await store.sweep();
    expect(await rows()).toHaveLength(3);
    await age('1 second');
    await store.sweep();
    expect(await rows()).toEqual([{ keyed: true, records: '1' }]);
  });

  it('sweeps on a timer of the scheduler from the first end it writes, until close()', () => {
    const scheduler = new TestScheduler((a, b) => expect(a).toEqual(b));
    const sweeps: string[] = [];
    scheduler.run(({ flush }) => {
      const timed = postgresStore({ pool, schema, retainMs: 0, sweepEvery: 1000, scheduler });
      // A sweep that settles at once (no Promise in virtual time).
      (timed as unknown as { sweep: () => PromiseLike<unknown> }).sweep = () => {
        sweeps.push(`sweep at ${scheduler.now()}`);
        return { then: (settled: () => void) => (settled(), undefined) } as unknown as PromiseLike<unknown>;
      };
      (timed as unknown as { startSweeping: () => void }).startSweeping();
      scheduler.schedule(() => void timed.close(), 3500);
      flush();
    });
    expect(sweeps).toEqual(['sweep at 1000', 'sweep at 2000', 'sweep at 3000']);
  });
});

describe('leases', () => {
  it('one owner at a time on the database clock; renewed and released by its owner only; expires by itself', async () => {
    const claim = await store.acquireLease('l1', 'A', 400);
    expect(claim.acquired).toBe(true);
    const { rows } = await pool.query<{ now: number }>('SELECT floor(extract(epoch FROM now()) * 1000)::float8 AS now');
    expect(Math.abs(claim.lease.expiresAt - (rows[0].now + 400))).toBeLessThan(200);
    const refused = await otherStore.acquireLease('l1', 'B', 400);
    expect(refused).toEqual({ acquired: false, lease: { owner: 'A', expiresAt: claim.lease.expiresAt } });
    expect(await otherStore.renewLease('l1', 'B', 400)).toBe(false);
    expect(await store.renewLease('l1', 'A', 400)).toBe(true);
    await otherStore.releaseLease('l1', 'B');
    expect((await store.getLease('l1'))?.owner).toBe('A');
    await store.releaseLease('l1', 'A');
    expect(await store.getLease('l1')).toBeUndefined();
    expect((await otherStore.acquireLease('l1', 'B', 150)).acquired).toBe(true);
    await delay(250);
    expect(await store.getLease('l1')).toBeUndefined();
    expect(await otherStore.renewLease('l1', 'B', 150)).toBe(false);
    expect((await store.acquireLease('l1', 'A', 150)).acquired).toBe(true);
  });

  it('gives a free lease to one of many racing owners', async () => {
    const claims = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? otherStore : store).acquireLease('l2', `owner-${i}`, 5_000)));
    const winners = claims.filter((c) => c.acquired);
    expect(winners).toHaveLength(1);
    for (const claim of claims) expect(claim.lease.owner).toBe(winners[0].lease.owner);
  });
});

describe('sessions', () => {
  const message = (id: string, text = id) => ({ id, role: 'user' as const, content: [{ type: 'text' as const, text }] });
  const turnRows = async (id: string) =>
    (
      await pool.query<{ seq: number; ctid: string; turn: string }>(
        `SELECT t.seq, t.ctid::text, t.turn FROM "${schema}".session_turns t JOIN "${schema}".sessions s ON s.key = t.session WHERE s.session_id = $1 ORDER BY t.seq`,
        [id],
      )
    ).rows;

  it('keeps a row per turn, keyed by (session, seq): an append writes the turn, never the history', async () => {
    const big = 'x'.repeat(10_000);
    for (let i = 0; i < 5; i++) {
      const before = await turnRows('s1');
      expect(
        await store.appendTurn('s1', i, { runId: `r${i}`, messages: [message(`m${i}`, `${i}${big}`)], state: { [`k${i}`]: { version: 1, value: i } } }),
      ).toEqual({
        revision: i + 1,
        appended: true,
      });
      const after = await turnRows('s1');
      expect(after.slice(0, i)).toEqual(before); // the earlier rows untouched
    }
    const rows = await turnRows('s1');
    expect(rows.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(new Set(rows.map((r) => r.turn.length)).size).toBe(1);
    const loaded = await otherStore.load('s1');
    expect(loaded).toMatchObject({ id: 's1', revision: 5, lastRunId: 'r4' });
    expect(loaded?.messages.map((m) => m.id)).toEqual(['m0', 'm1', 'm2', 'm3', 'm4']);
    expect(Object.keys(loaded?.state ?? {})).toEqual(['k0', 'k1', 'k2', 'k3', 'k4']);
    expect(await otherStore.revision('s1')).toBe(5);
    // The same run's turn again: not written, whatever the revision given.
    expect(await store.appendTurn('s1', 0, { runId: 'r2', messages: [message('again')], state: {} })).toEqual({ revision: 5, appended: false });
    expect(await turnRows('s1')).toHaveLength(5);
    // A unique (session, seq): a row cannot be written twice at one revision, even past the function.
    await expect(
      pool.query(
        `INSERT INTO "${schema}".session_turns (session, seq, run_key, turn) SELECT key, 5, '\\x00', '{}' FROM "${schema}".sessions WHERE session_id = 's1'`,
      ),
    ).rejects.toThrow('duplicate key');
  });

  it('lets one of many racing appends at one revision through, from two pools, the rest conflicting with the revision found', async () => {
    await store.appendTurn('s2', 0, { runId: 'first', messages: [message('a')], state: {} });
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) => (i % 2 ? otherStore : store).appendTurn('s2', 1, { runId: `racer-${i}`, messages: [message(`r${i}`)], state: {} })),
    );
    const won = results.filter((r) => r.status === 'fulfilled');
    expect(won).toHaveLength(1);
    expect((won[0] as PromiseFulfilledResult<unknown>).value).toEqual({ revision: 2, appended: true });
    for (const lost of results.filter((r) => r.status === 'rejected')) {
      expect(lost.reason).toMatchObject({ name: 'SessionConflictError', expected: 1, actual: 2 });
    }
    // Racing creations of one session: one makes it.
    const made = await Promise.allSettled(
      Array.from({ length: 6 }, (_, i) => (i % 2 ? otherStore : store).appendTurn('s3', 0, { runId: `maker-${i}`, messages: [message(`m${i}`)], state: {} })),
    );
    expect(made.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect(await store.revision('s3')).toBe(1);
  });

  it('shares a fork’s prefix with its parent: one row per session, the parent’s turns read, not copied', async () => {
    await store.appendTurn('p', 0, { runId: 'p1', messages: [message('a'), message('b')], state: { n: { version: 1, value: 1 } } });
    await store.appendTurn('p', 1, { runId: 'p2', messages: [message('c')], state: { n: { version: 1, value: 2 } } });
    await otherStore.fork('p', 'f', 2);
    expect(await turnRows('f')).toEqual([]);
    await store.appendTurn('p', 2, { runId: 'p3', messages: [message('d')], state: {} });
    await store.appendTurn('f', 0, { runId: 'f1', messages: [message('x')], state: {} });
    expect(await store.load('f')).toEqual({
      version: 1,
      id: 'f',
      messages: [message('a'), message('b'), message('x')],
      state: { n: { version: 1, value: 1 } },
      revision: 1,
      lastRunId: 'f1',
      parentId: 'p',
      forkedAt: 2,
    });
    // A fork of a fork reads both prefixes.
    await store.fork('f', 'ff', 3);
    expect((await otherStore.load('ff'))?.messages.map((m) => m.id)).toEqual(['a', 'b', 'x']);
    expect(await store.forks('p')).toEqual(['f']);
    expect(await store.forks('f')).toEqual(['ff']);
    await expect(store.delete('p')).rejects.toMatchObject({ name: 'SessionConflictError' });
    await expect(store.delete('p')).rejects.toThrow("Session 'p' has forks ('f')");
    await store.delete('ff');
    await store.delete('f');
    expect(await store.forks('p')).toEqual([]);
    await store.delete('p');
    expect(await store.load('p')).toBeUndefined();
    const { rows } = await pool.query(
      `SELECT 1 FROM "${schema}".session_turns t JOIN "${schema}".sessions s ON s.key = t.session WHERE s.session_id IN ('p', 'f', 'ff')`,
    );
    expect(rows).toEqual([]);
  });

  it('keeps a session’s lease on the database clock, and tells a waiter in another process of a release at once', async () => {
    const claim = await store.acquireSession('sl', 'A', 400);
    expect(claim.acquired).toBe(true);
    const { rows } = await pool.query<{ now: number }>('SELECT floor(extract(epoch FROM now()) * 1000)::float8 AS now');
    expect(Math.abs(claim.lease.expiresAt - (rows[0].now + 400))).toBeLessThan(200);
    expect(await otherStore.acquireSession('sl', 'B', 400)).toEqual({ acquired: false, lease: { owner: 'A', expiresAt: claim.lease.expiresAt } });
    expect(await otherStore.renewSession('sl', 'B', 400)).toBe(false);
    expect(await store.renewSession('sl', 'A', 5_000)).toBe(true);
    const heard: number[] = [];
    const started = Date.now();
    const subscription = otherStore.sessionReleases('sl').subscribe(() => heard.push(Date.now() - started));
    await delay(100);
    expect(heard).toHaveLength(1); // once listening
    await otherStore.releaseSession('sl', 'B'); // not the holder: nothing released, nothing told
    await delay(50);
    expect(heard).toHaveLength(1);
    const released = Date.now() - started;
    await store.releaseSession('sl', 'A');
    await delay(100);
    subscription.unsubscribe();
    expect(heard).toHaveLength(2);
    expect(heard[1] - released).toBeLessThan(100);
    expect((await otherStore.acquireSession('sl', 'B', 150)).acquired).toBe(true);
    await delay(250);
    expect(await otherStore.renewSession('sl', 'B', 150)).toBe(false); // expired
    expect((await store.acquireSession('sl', 'A', 150)).acquired).toBe(true);
  });
});

describe('hostile ids and texts through every method', () => {
  it.each(HOSTILE_IDS)(
    'an id with %s',
    async (_, id) => {
      const text = `${id} "q" ' $1 '; DROP TABLE runs; -- \u0000 \\ \n ${'x'.repeat(1 << 20)} \uD800 🦊`;
      expect(await store.append(id, 0, [event(1, text)])).toBe(1);
      const following = first(otherStore.follow(id, 0), 3);
      const answers = first(otherStore.answers(id), 1);
      const cancelled = firstValueFrom(otherStore.cancellations(id));
      await delay(50);
      expect(await store.append(id, 1, [event(2, text), end])).toBe(3);
      const entries = await following;
      expect(entries.map((entry) => entry.position)).toEqual([1, 2, 3]);
      expect((entries[1].record as { event: { text: string } }).event.text).toBe(text);
      expect(await store.read(id)).toEqual(entries);
      expect(await store.putAnswer(id, { ...permission(id), reason: text } as never)).toBe(true);
      expect(await store.putAnswer(id, permission(id))).toBe(false);
      expect(await answers).toEqual([{ ...permission(id), reason: text }]);
      await store.requestCancel(id);
      await expect(cancelled).resolves.toBeUndefined();
      expect((await store.acquireLease(id, id, 5_000)).lease.owner).toBe(id);
      expect((await otherStore.acquireLease(id, 'other', 5_000)).lease.owner).toBe(id);
      expect(await store.renewLease(id, id, 5_000)).toBe(true);
      expect((await store.getLease(id))?.owner).toBe(id);
      await store.releaseLease(id, id);
      expect(await store.getLease(id)).toBeUndefined();
      const messages = [
        { ...user(text), id },
        { ...user(id), id: `${id}-2` },
      ];
      const state = { [id]: { version: 1, value: text } };
      expect(await store.appendTurn(id, 0, { runId: id, messages, state })).toEqual({ revision: 1, appended: true });
      expect(await otherStore.appendTurn(id, 1, { runId: id, messages, state })).toEqual({ revision: 1, appended: false });
      expect(await otherStore.load(id)).toEqual({ version: 1, id, messages, state, revision: 1, lastRunId: id });
      expect((await otherStore.acquireSession(id, id, 5_000)).lease.owner).toBe(id);
      expect((await store.acquireSession(id, 'other', 5_000)).lease.owner).toBe(id);
      await otherStore.releaseSession(id, id);
      const fork = `${id}\u0000fork`;
      await store.fork(id, fork, 2);
      expect(await otherStore.forks(id)).toEqual([fork]);
      expect(await otherStore.load(fork)).toEqual({ version: 1, id: fork, parentId: id, forkedAt: 2, messages, state, revision: 0 });
      await store.delete(fork);
      await store.delete(id);
      expect(await store.load(id)).toBeUndefined();
    },
    30_000,
  );

  it('keeps ids, request ids and owners apart that differ only where text is escaped', async () => {
    const ids = ['x\uD800', 'x\uDBFF', 'x\uFFFD', 'x\\uD800', 'x\u0000', 'x\\u0000', 'x', 'x"'];
    for (const [i, id] of ids.entries()) await store.append(id, 0, [event(1, String(i))]);
    for (const [i, id] of ids.entries()) {
      expect(((await store.read(id)) as JournalEntry[]).map((entry) => (entry.record as { event: { text: string } }).event.text)).toEqual([String(i)]);
    }
    await store.append('ids', 0, [event(1)]);
    for (const requestId of ['q\uD800', 'q\uDBFF', 'q\uFFFD']) expect(await store.putAnswer('ids', permission(requestId))).toBe(true);
    expect(await first(store.answers('ids'), 3)).toEqual([permission('q\uD800'), permission('q\uDBFF'), permission('q\uFFFD')]);
    expect((await store.acquireLease('ids', 'o\uD800', 5_000)).acquired).toBe(true);
    expect((await store.acquireLease('ids', 'o\uDBFF', 5_000)).acquired).toBe(false);
    expect((await store.getLease('ids'))?.owner).toBe('o\uD800');
  });

  it('leaves the tables as they were: every statement is parameterised', async () => {
    const { rows } = await pool.query<{ table_name: string }>('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1', [schema]);
    expect(rows.map((r) => r.table_name)).toEqual(['answers', 'journal', 'leases', 'runs', 'schema_version', 'session_leases', 'session_turns', 'sessions']);
  });
});
