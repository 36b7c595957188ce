// The listening connection after a server restart, a failover or pg_terminate_backend: every
// connection of the pool is gone, the idle ones too, and the pool may hand one of those out
// before it has heard. The store tries again on a bounded back-off, so that a waiting run still
// hears the answer or the cancel given after that, and is not failed; so does a follower's read once
// listening again, which the pool may send on such a connection.
import type pg from 'pg';
import { firstValueFrom, lastValueFrom, take, toArray, VirtualTimeScheduler } from 'rxjs';
import { createAgent, type AgentEvent, type JournalRecord } from 'rx-agent';
import { postgresStore, type PgPool, type PgPoolClient, type PostgresStore } from 'rx-agent/postgres';
import { scriptedModel } from 'rx-agent/testing';
import { permissions } from '../../operators/permissions';
import { connectPool, dropSchema, uniqueSchema } from '../support/postgres';
import { payTool as pay } from '../support/specTools';

const schema = uniqueSchema('listenRetry');
let pool: pg.Pool;
const stores: PostgresStore[] = [];
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  pool = await connectPool();
  const made = postgresStore({ pool, schema });
  stores.push(made);
  await made.migrate();
});

afterAll(async () => {
  for (const made of stores) await made.close();
  await dropSchema(pool, schema);
  await pool.end();
});

/** A pool of its own, named, holding `idle` idle connections besides whatever the store takes. */
async function namedPool(name: string, idle: number): Promise<{ own: pg.Pool; application: string }> {
  const application = `rx-agent-spec-${name}-${process.pid}`;
  const own = await connectPool({ application_name: application, max: idle + 2, idleTimeoutMillis: 60_000 });
  own.on('error', () => undefined); // an idle client's termination
  const clients = await Promise.all(Array.from({ length: idle }, () => own.connect()));
  for (const client of clients) client.release();
  return { own, application };
}

/**
 * `own` as a store's pool that, once `handOut()` is called, sends its next statements on `ended`
 * connections first, one each, as a pool does with idle connections it has not yet heard were
 * ended: `takeOut(n)` checks n connections out of `own` to be ended with the others. A statement
 * that fails there drops its connection, as pg does.
 */
function handingOutEnded(own: pg.Pool) {
  const ended: pg.PoolClient[] = [];
  const failures: Error[] = [];
  let handing = false;
  const pool: PgPool = {
    query: async (config) => {
      const client = handing ? ended.shift() : undefined;
      if (!client) return own.query(config);
      try {
        return await client.query(config);
      } catch (error) {
        failures.push(error as Error);
        client.release(error as Error);
        throw error;
      }
    },
    connect: () => own.connect(),
  };
  const takeOut = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const client = await own.connect();
      client.on('error', () => undefined); // its termination
      ended.push(client);
    }
  };
  return { pool, takeOut, handOut: () => void (handing = true), failures, left: () => ended.length };
}

/** Ends every connection of the pool named `application` (as a restart or a failover does). */
async function terminateAll(application: string): Promise<number> {
  const { rowCount } = await pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [application]);
  return rowCount ?? 0;
}

/** Waits (10 s at most) until a connection of the pool named `application` is listening again. */
async function listeningAgain(application: string): Promise<void> {
  for (let waited = 0; ; waited += 50) {
    const { rows } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE 'LISTEN%' AND state = 'idle'",
      [application],
    );
    if (rows[0].n > 0) return;
    if (waited > 10_000) throw new Error(`no connection of ${application} listens again`);
    await delay(50);
  }
}

function agentOn(store: PostgresStore, turns: Parameters<typeof scriptedModel>[0]) {
  return createAgent({ model: scriptedModel(turns), tools: [pay], middleware: [permissions({ timeout: 60_000 })], store });
}

/** Waits until `events` holds an event of `type`. */
async function until(events: AgentEvent[], type: AgentEvent['type']): Promise<void> {
  for (let waited = 0; !events.some((e) => e.type === type); waited += 20) {
    if (waited > 10_000) throw new Error(`no ${type} in ${events.map((e) => e.type).join(', ')}`);
    await delay(20);
  }
}

describe('a listening connection lost with the whole pool (restart, failover, pg_terminate_backend)', () => {
  it.each(['an answer', 'a cancel'] as const)('is opened again on the pool: a waiting run hears %s given after that, and is not failed', async (given) => {
    const { own, application } = await namedPool(`retry-${given === 'an answer' ? 'a' : 'c'}`, 4);
    const running = postgresStore({ pool: own, schema });
    const elsewhere = postgresStore({ pool, schema }); // another process
    stores.push(running, elsewhere);
    const runId = `retry-${given}-${Date.now()}`;
    try {
      const events: AgentEvent[] = [];
      const done = new Promise<void>((resolve) =>
        agentOn(running, [{ toolCalls: [{ name: 'pay', args: { n: 1 }, callId: 'c1' }] }, 'paid'])
          .run('pay', { runId })
          .subscribe({ next: (e) => events.push(e), complete: resolve }),
      );
      await until(events, 'permission-request');
      await delay(100); // listening
      const total = own.totalCount;
      expect(own.idleCount).toBeGreaterThanOrEqual(2);
      expect(await terminateAll(application)).toBe(total); // the listening one and the idle ones
      await listeningAgain(application);
      const other = agentOn(elsewhere, []);
      // Still running here, not failed (the events say why if it was).
      expect(events.filter((e) => e.type === 'error' || e.type === 'run-end')).toEqual([]);
      expect((await other.runs.get(runId))?.status).toBe('running');
      if (given === 'an answer') {
        expect(await other.respond(runId, { type: 'permission-response', requestId: `${runId}.0.c1.permission-request`, approved: true })).toBe(true);
      } else {
        await other.cancel(runId);
      }
      await done;
      expect(events.filter((e) => e.type === 'error')).toEqual([]);
      expect(events.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: given === 'an answer' ? 'completed' : 'cancelled' }));
      const info = await other.runs.get(runId);
      expect(info).toEqual(expect.objectContaining({ status: 'finished', reason: given === 'an answer' ? 'completed' : 'cancelled' }));
    } finally {
      await running.close();
      await own.end();
    }
  });

  it('a waiting run whose catch-up reads, once listening again, go to connections ended too tries them again on others, and hears the answer', async () => {
    const { own, application } = await namedPool('reread-run', 3);
    const { pool: handing, takeOut, handOut, failures, left } = handingOutEnded(own);
    const running = postgresStore({ pool: handing, schema });
    const elsewhere = postgresStore({ pool, schema });
    stores.push(running, elsewhere);
    const runId = `reread-run-${Date.now()}`;
    try {
      const events: AgentEvent[] = [];
      const done = new Promise<void>((resolve) =>
        agentOn(running, [{ toolCalls: [{ name: 'pay', args: { n: 1 }, callId: 'c1' }] }, 'paid'])
          .run('pay', { runId })
          .subscribe({ next: (e) => events.push(e), complete: resolve }),
      );
      await until(events, 'permission-request');
      await delay(100); // listening
      // The run's answers and cancel flag are read again once listening: on ended connections
      // first, one of them twice.
      await takeOut(3);
      handOut();
      expect(await terminateAll(application)).toBe(own.totalCount);
      for (let waited = 0; left() > 0 && waited < 5000; waited += 20) await delay(20);
      expect(failures).toHaveLength(3);
      await delay(400); // the tries after them
      // Still running here, not failed (the events say why if it was).
      expect(events.filter((e) => e.type === 'error' || e.type === 'run-end')).toEqual([]);
      const other = agentOn(elsewhere, []);
      expect(await other.respond(runId, { type: 'permission-response', requestId: `${runId}.0.c1.permission-request`, approved: true })).toBe(true);
      await done;
      expect(events.filter((e) => e.type === 'error')).toEqual([]);
      expect(events.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed' }));
    } finally {
      await running.close();
      await own.end();
    }
  });

  it('a follower whose catch-up read, once listening again, goes to a connection ended too reads again on another, and misses nothing', async () => {
    const { own, application } = await namedPool('reread', 3);
    const { pool: handing, takeOut, handOut, failures, left } = handingOutEnded(own);
    const following = postgresStore({ pool: handing, schema });
    const writer = postgresStore({ pool, schema });
    stores.push(following, writer);
    const runId = `reread-${Date.now()}`;
    const event = (seq: number): JournalRecord => ({ version: 1, kind: 'event', event: { type: 'text-delta', iteration: 0, text: 'tok', seq } as never });
    try {
      await writer.append(runId, 0, [event(1)]);
      // Each one's error is kept from the start (none is left unhandled).
      const entries = lastValueFrom(following.follow(runId, 0).pipe(take(3), toArray())).catch((error: Error) => error);
      const answer = firstValueFrom(following.answers(runId)).catch((error: Error) => error);
      const cancelled = lastValueFrom(following.cancellations(runId)).then(
        () => 'cancelled',
        (error: Error) => error,
      );
      await delay(100); // listening
      // Each of the three reads again once listening, on an ended connection first.
      await takeOut(3);
      handOut();
      expect(await terminateAll(application)).toBe(own.totalCount);
      await writer.append(runId, 1, [event(2)]); // while it is away
      for (let waited = 0; left() > 0 && waited < 5000; waited += 20) await delay(20);
      expect(failures).toHaveLength(3);
      await delay(200); // the tries after them
      await writer.append(runId, 2, [event(3)]);
      await writer.putAnswer(runId, { type: 'permission-response', requestId: 'q', approved: true });
      await writer.requestCancel(runId);
      const got = await entries;
      expect(got instanceof Error ? got : got.map((entry) => entry.position)).toEqual([1, 2, 3]);
      expect(await answer).toEqual({ type: 'permission-response', requestId: 'q', approved: true });
      expect(await cancelled).toBe('cancelled');
    } finally {
      await following.close();
      await own.end();
    }
  });

  it('tries again on a bounded back-off (a connection that failed is released with its error, so that pg drops it), then fails the followers', async () => {
    const { own, application } = await namedPool('backoff', 0);
    const failures: number[] = [];
    const released: Array<Error | boolean | undefined> = [];
    let failing = 0;
    // The store's pool: its next `failing` listening connections fail their LISTEN.
    const wrapped: PgPool = {
      query: (config) => own.query(config),
      connect: async () => {
        const client = await own.connect();
        const fails = failing > 0;
        if (fails) failing--;
        const listening: PgPoolClient = {
          query: (text, values) => {
            if (fails && text.startsWith('LISTEN')) {
              failures.push(performance.now());
              return Promise.reject(new Error('Connection terminated unexpectedly'));
            }
            return client.query(text, values);
          },
          on: (name, listener) => client.on(name as 'notification', listener),
          removeListener: (name, listener) => client.removeListener(name, listener),
          release: (error) => {
            if (fails) released.push(error);
            client.release(error);
          },
        };
        return listening;
      },
    };
    const following = postgresStore({ pool: wrapped, schema });
    const writer = postgresStore({ pool, schema });
    stores.push(following, writer);
    try {
      await writer.append('backoff1', 0, [{ version: 1, kind: 'end', reason: 'completed' } as never]);
      // A follower for the whole spec, and one for the first answer.
      const cancels = lastValueFrom(following.cancellations('backoff1')).then(
        () => new Error('completed'),
        (error: Error) => error,
      );
      const answers = lastValueFrom(following.answers('backoff1').pipe(take(1), toArray()));
      await delay(100);
      // Lost, and the next three connections the pool hands out fail: the fourth try listens.
      failing = 3;
      const started = performance.now();
      expect(await terminateAll(application)).toBeGreaterThanOrEqual(1);
      await writer.putAnswer('backoff1', { type: 'permission-response', requestId: 'q', approved: true });
      expect(await answers).toEqual([{ type: 'permission-response', requestId: 'q', approved: true }]);
      expect(failures).toHaveLength(3);
      // Each failed connection given back with its error (pg destroys it), none reused.
      expect(released).toHaveLength(3);
      for (const error of released) expect(error).toBeInstanceOf(Error);
      // A back-off between tries (100, 200, then 400 ms): not all at once.
      expect(failures[2] - started).toBeGreaterThanOrEqual(250);
      // For good: every try fails; the followers are told, once the tries are spent (about 3 s).
      failing = 1000;
      const lostAt = performance.now();
      expect(await terminateAll(application)).toBeGreaterThanOrEqual(1);
      const error = await cancels;
      expect(error.message).toBe('postgresStore: the listening connection was lost and could not be opened again (Connection terminated unexpectedly)');
      expect(failures).toHaveLength(3 + 6);
      expect(performance.now() - lostAt).toBeGreaterThanOrEqual(2500);
      expect(performance.now() - lostAt).toBeLessThan(8000);
    } finally {
      await following.close();
      await own.end();
    }
  });

  it("waits 100, 200, 400, 800 and 1600 ms between tries, on the store's scheduler, then tells the followers", async () => {
    const scheduler = new VirtualTimeScheduler();
    const tries: number[] = [];
    const released: unknown[] = [];
    // A pool whose every connection fails its LISTEN.
    const broken: PgPool = {
      query: () => Promise.reject(new Error('not in this spec')),
      connect: () => {
        tries.push(scheduler.now());
        return Promise.resolve({
          query: () => Promise.reject(new Error('Connection terminated unexpectedly')),
          on: () => undefined,
          removeListener: () => undefined,
          release: (error?: Error | boolean) => void released.push(error),
        });
      },
    };
    const store = postgresStore({ pool: broken, schema, scheduler });
    let failed: Error | undefined;
    store.cancellations('r').subscribe({ error: (error: Error) => (failed = error) });
    for (let turn = 0; turn < 50 && !failed; turn++) {
      await delay(0); // the try's promises
      scheduler.flush(); // the wait before the next
    }
    expect(tries).toEqual([0, 100, 300, 700, 1500, 3100]);
    expect(released).toEqual(tries.map(() => new Error('Connection terminated unexpectedly')));
    expect(failed?.message).toBe('Connection terminated unexpectedly');
    await store.close();
  });

  it("reads again once listening again, as LISTEN is tried: after 100, 200, 400, 800 and 1600 ms on the store's scheduler, then errors with the read's failure", async () => {
    const scheduler = new VirtualTimeScheduler();
    const reads: number[] = [];
    let lost = false;
    let listeners = new Map<string, (error: Error) => void>();
    // A pool whose statements fail once the listening connection was lost (their connections were ended too).
    const failing: PgPool = {
      query: () => {
        reads.push(scheduler.now());
        return lost ? Promise.reject(new Error('Connection terminated unexpectedly')) : Promise.resolve({ rows: [], rowCount: 0 });
      },
      connect: () => {
        listeners = new Map();
        return Promise.resolve({
          query: () => Promise.resolve({ rows: [], rowCount: null }),
          on: (name: string, listener: (error: Error) => void) => void listeners.set(name, listener),
          removeListener: () => undefined,
          release: () => undefined,
        });
      },
    };
    const store = postgresStore({ pool: failing, schema, scheduler });
    let failed: Error | undefined;
    store.answers('r').subscribe({ error: (error: Error) => (failed = error) });
    await delay(0);
    expect(reads).toEqual([0]); // the first read, once listening
    lost = true;
    reads.length = 0;
    listeners.get('error')?.(new Error('Connection terminated unexpectedly'));
    for (let turn = 0; turn < 50 && !failed; turn++) {
      await delay(0); // the tries' promises
      scheduler.flush(); // the wait before the next
    }
    expect(reads).toEqual([0, 100, 300, 700, 1500, 3100]);
    expect(failed?.message).toBe('Connection terminated unexpectedly');
    await store.close();
  });
});
