/**
 * Profiling driver for S1 journaled to a store (not part of `npm run bench`):
 *   node bench/profile/build.mjs s1store && node --cpu-prof --cpu-prof-dir=/tmp/prof/s1r $TMPDIR/rx-agent-prof/s1store.mjs <memory|redis|postgres> [runs]
 *   node bench/profile/top.mjs /tmp/prof/s1r/<file>.cpuprofile 40
 * Redis at REDIS_URL and PostgreSQL at DATABASE_URL, as `npm run bench` takes them.
 */
import { randomUUID } from 'node:crypto';
import { memoryStore } from '../../src/journal/memoryStore';
import type { AgentStore } from '../../src/journal/store';
import { postgresStore } from '../../src/postgres/index';
import { redisStore } from '../../src/redis/index';
import { loadFiveOperators } from '../lib/operators';
import { N, s1Floor, s1OnStore } from '../workloads/s1';
import { cpuPerUnit } from '../lib/harness';
import { DATABASE_URL } from '../workloads/postgres';
import { REDIS_URL } from '../workloads/redis';

const where = process.argv[2] ?? 'memory';
const runs = Number(process.argv[3] ?? 20);
const middleware = loadFiveOperators().map((o) => o.middleware);

let close = (): Promise<void> => Promise.resolve();
let store: AgentStore;
if (where === 'redis') {
  const { default: Redis } = await import('ioredis');
  const client = new Redis(REDIS_URL);
  store = redisStore({ client, prefix: `rx-agent-prof:${randomUUID()}:`, retainMs: 0 });
  close = () => {
    client.disconnect();
    return Promise.resolve();
  };
} else if (where === 'postgres') {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
  const schema = `prof_${randomUUID().replace(/-/g, '').slice(0, 16)}`;
  const pgStore = postgresStore({ pool, schema, retainMs: 0, sweepEvery: 1000 });
  await pgStore.migrate();
  store = pgStore;
  close = async () => {
    await pgStore.close();
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
  };
} else {
  store = memoryStore();
}

if (process.argv.includes('time-append')) {
  const append = store.append.bind(store);
  store.append = (runId, expected, records) => {
    const t0 = process.cpuUsage();
    const w0 = performance.now();
    const result = append(runId, expected, records);
    const c = process.cpuUsage(t0);
    const w1 = performance.now();
    void Promise.resolve(result).then(() =>
      console.log(
        `append of ${records.length} records: ${(c.user + c.system) / 1000} ms CPU sync, ${(w1 - w0).toFixed(2)} ms wall sync, ${(performance.now() - w0).toFixed(2)} ms to answer`,
      ),
    );
    return result;
  };
}
const run = s1OnStore(store, where, middleware, N);
// `<store> vs`: each run on the store is paired with one on a memoryStore (which costs what the journal does in process).
const pair = process.argv.includes('vs') ? s1OnStore(memoryStore(), 'memory', middleware, N) : undefined;
const cpu = (fn: () => Promise<void>) => cpuPerUnit(N, fn);
for (let r = 0; r < runs; r++) {
  const floor = await cpu(() => s1Floor(N));
  const rx = await cpu(run);
  const memory = pair && (await cpu(pair));
  console.log(
    `S1 on ${where}: floor ${floor.toFixed(0)} ns/delta, rx-agent ${rx.toFixed(0)} ns/delta CPU, ${(rx / floor).toFixed(2)}×` +
      (memory === undefined ? '' : `; on a memoryStore ${memory.toFixed(0)} (${(memory / floor).toFixed(2)}×)`),
  );
}
await close();
