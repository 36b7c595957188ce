// Durable runs across real processes on PostgreSQL: child Node processes run (or are killed
// running) a run; this process resumes, answers, cancels and reads it, through postgresStore.
import { join } from 'node:path';
import type pg from 'pg';
import { postgresStore, type PostgresStore } from '../../src/postgres/index';
import { describeCrossProcess } from '../support/crossProcess';
import { connectPool, DATABASE_URL, dropSchema, uniqueSchema } from '../support/postgres';
import { createExecutions, durableAgent, executions } from './fixtures/durableRuns';

let pool: pg.Pool;
let schema: string;
let store: PostgresStore;
/** Every store this file made: each holds a LISTEN connection until it is closed. */
const stores: PostgresStore[] = [];

describeCrossProcess({
  worker: join(__dirname, 'fixtures', 'worker.ts'),
  setup: async () => {
    pool = await connectPool();
    schema = uniqueSchema('crossProcess');
    store = postgresStore({ pool, schema });
    stores.push(store);
    await store.migrate();
    await createExecutions(pool, schema);
  },
  teardown: async () => {
    for (const made of stores) await made.close();
    await dropSchema(pool, schema);
    await pool.end();
  },
  childOptions: () => ({ url: DATABASE_URL, schema }),
  agent: (options) => {
    const made = durableAgent({ ...options, pool, schema });
    stores.push(made.store);
    return made;
  },
  store: () => store,
  executed: (runId, tool) => executions(pool, schema, runId, tool),
});
