import type pg from 'pg';
import { loadFiveOperators } from '../../bench/lib/operators';
import { s1Journaled } from '../../bench/workloads/postgres';
import { s2Run } from '../../bench/workloads/s2';
import { postgresStore, type PostgresStore } from '../../src/postgres/index';
import { connectPool, dropSchema, uniqueSchema } from '../support/postgres';

// The PostgreSQL workloads of the bench at small sizes: they pass with the five operators,
// journaled on a real PostgreSQL, and check their own results.
let pool: pg.Pool;
let store: PostgresStore;
const schema = uniqueSchema('bench');

beforeAll(async () => {
  pool = await connectPool();
  store = postgresStore({ pool, schema, retainMs: 0, sweepEvery: 0 });
  await store.migrate();
});

afterAll(async () => {
  await store.close();
  await dropSchema(pool, schema);
  await pool.end();
});

describe('bench workloads on postgresStore', () => {
  it('S1 and S2 pass with the five operators', async () => {
    const five = loadFiveOperators().map((o) => o.middleware);
    await expect(s1Journaled(store, five, 1000)()).resolves.toBeUndefined();
    await expect(s2Run(five, 20, store)()).resolves.toBeUndefined();
    // retainMs 0: the finished runs are gone; their rows stay 10 s for their followers, then a sweep deletes them.
    expect((await store.sweep()).runs).toBe(0);
    await pool.query(`UPDATE "${schema}".runs SET expires_at = expires_at - interval '10 seconds'`);
    expect((await store.sweep()).runs).toBe(2);
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".journal`)).rows).toEqual([{ n: 0 }]);
  });
});
