// The listening connection after a server restart, a failover or pg_terminate_backend: every
// connection of the pool is gone, the idle ones too, and the pool may hand one of those out
// before it has heard. The store tries again on a bounded back-off, so that a waiting run still
// hears the answer or the cancel given after that, and is not failed.
import type pg from 'pg';
import { lastValueFrom, take, toArray, VirtualTimeScheduler } from 'rxjs';
import { createAgent, type AgentEvent } from 'rx-agent';
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
});
