// An agent on postgresStore, in one process (spec/support/agentOnStore.ts), with run ids that
// also try SQL quoting.
import type pg from 'pg';
import { postgresStore, type PostgresStore } from 'rx-agent/postgres';
import { connectPool, dropSchema, uniqueSchema } from '../support/postgres';
import { describeAgentOnStore, HOSTILE_RUN_IDS } from '../support/agentOnStore';

let pool: pg.Pool;
const schema = uniqueSchema('durableAgent');
const stores: PostgresStore[] = [];

/** A store on the file's schema, closed after it. */
function store(): PostgresStore {
  const made = postgresStore({ pool, schema });
  stores.push(made);
  return made;
}

beforeAll(async () => {
  pool = await connectPool();
  await store().migrate();
});

afterAll(async () => {
  for (const made of stores) await made.close();
  await dropSchema(pool, schema);
  await pool.end();
});

describeAgentOnStore('postgresStore', store, [['quotes, braces and SQL', `run "x" 'y' {z} $1 '; DROP TABLE runs; --`], ...HOSTILE_RUN_IDS.slice(1)]);
