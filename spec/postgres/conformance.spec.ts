import type pg from 'pg';
import { describeStoreConformance } from 'rx-agent/testing';
import { postgresStore, type PostgresStore } from 'rx-agent/postgres';
import { connectPool, dropSchema, uniqueSchema } from '../support/postgres';

// The AgentStore contract, on a real PostgreSQL: every test of the suite gets a store of its own
// (closed after it) on a fresh schema of this file's run, migrated once.
const schema = uniqueSchema('conformance');
let pool: pg.Pool;

beforeAll(async () => {
  pool = await connectPool();
  await postgresStore({ pool, schema }).migrate();
});

afterAll(async () => {
  await dropSchema(pool, schema);
  await pool.end();
});

describeStoreConformance('postgresStore', () => postgresStore({ pool, schema }), {
  teardown: (store) => (store as PostgresStore).close(),
});
