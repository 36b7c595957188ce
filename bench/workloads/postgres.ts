/**
 * Durable runs on PostgreSQL (`postgresStore`, a real PostgreSQL at DATABASE_URL, default
 * postgres://postgres@127.0.0.1:5432/test), in a schema of its own dropped at the end:
 * - S1 with a postgresStore journal: ns per delta against the same floor as S1, and the statements
 *   sent per run (each one a round trip; LISTEN and UNLISTEN of the run's answers included);
 * - S2 with a postgresStore journal: µs per iteration at K = 500 and 5,000, and statements per iteration;
 * - `events()` catch-up: a finished run's journal replayed from seq 0, events per second.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { lastValueFrom, toArray } from 'rxjs';
import { createAgent, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { postgresStore, type PostgresStore } from '../../src/postgres/index';
import { bench, benchPair, check, median, type Measured } from '../lib/harness';
import { s1Model } from '../lib/fakeModel';
import { CATCH_UP_DELTAS } from './redis';
import { N, s1Floor, s1OnStore } from './s1';
import { K, K_BIG, s2Run } from './s2';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface PostgresResult {
  readonly s1: { readonly floor: Measured; readonly rx: Measured; readonly statementsPerRun: Record<string, number> };
  readonly s2: { readonly k500: Measured; readonly k5000: Measured; readonly statementsPerIteration500: number; readonly statementsPerIteration5000: number };
  readonly catchUp: { readonly events: number; readonly eventsPerSecond: number; readonly records: number; readonly recordsPerSecond: number };
}

/** Counts the statements every pg client sends, by their first words (the store's functions by name). */
function countStatements(Client: typeof pg.Client): { counts: Map<string, number>; total(): number; reset(): void; stop(): void } {
  const counts = new Map<string, number>();
  const query: (...args: unknown[]) => unknown = Reflect.get(Client.prototype, 'query');
  Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as string | { text?: string };
    const text = typeof config === 'string' ? config : (config.text ?? '');
    const name = /\.(\w+)\(/.exec(text)?.[1] ?? text.split(/\s+/).slice(0, 2).join(' ');
    counts.set(name, (counts.get(name) ?? 0) + 1);
    return query.apply(this, args);
  } as typeof Client.prototype.query;
  return {
    counts,
    total: () => [...counts.values()].reduce((a, b) => a + b, 0),
    reset: () => counts.clear(),
    stop: () => void (Client.prototype.query = query as typeof Client.prototype.query),
  };
}

/** One S1 run journaled on PostgreSQL, checked as S1 checks its runs. */
export function s1Journaled(store: PostgresStore, middleware: readonly AgentMiddleware[], n = N): () => Promise<void> {
  return s1OnStore(store, 'PostgreSQL', middleware, n);
}

async function runCatchUp(store: PostgresStore, middleware: readonly AgentMiddleware[]): Promise<PostgresResult['catchUp']> {
  const agent = createAgent({ model: s1Model(CATCH_UP_DELTAS), middleware, store });
  const runId = `catch-up-${randomUUID()}`;
  const live = await lastValueFrom(agent.run('Say tok many times', { runId }).pipe(toArray()));
  check(live.at(-1)?.type === 'run-end', 'catch-up bench: the run did not end');
  const records = (await store.read(runId))?.length ?? 0;
  const times: number[] = [];
  let events: AgentEvent[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    events = await lastValueFrom(agent.events(runId, { after: 0 }).pipe(toArray()));
    times.push(performance.now() - t0);
  }
  check(JSON.stringify(events) === JSON.stringify(live), 'catch-up bench: the replay differs from what the run streamed');
  const ms = median(times);
  return { events: events.length, eventsPerSecond: (events.length / ms) * 1000, records, recordsPerSecond: (records / ms) * 1000 };
}

export async function runPostgres(middleware: readonly AgentMiddleware[]): Promise<PostgresResult> {
  // Loaded here, not at the top: only this workload needs it.
  const { default: pgModule } = await import('pg');
  const pool = new pgModule.Pool({ connectionString: DATABASE_URL, max: 4 });
  const schema = `bench_${randomUUID().replace(/-/g, '').slice(0, 16)}`;
  // retainMs 0: a finished run reads as gone at its end; the sweep deletes it (nothing piles up over the runs).
  const store = postgresStore({ pool, schema, retainMs: 0, sweepEvery: 1000 });
  const kept = postgresStore({ pool, schema, retainMs: 600_000, sweepEvery: 0 });
  try {
    try {
      await store.migrate();
    } catch (error) {
      throw new Error(`the PostgreSQL workloads need PostgreSQL at ${DATABASE_URL}: ${(error as Error).message}`);
    }
    const s1Run = s1Journaled(store, middleware);
    const [floor, rx] = await benchPair(N, () => s1Floor(), s1Run, 7);
    const counted = async (work: () => Promise<void>) => {
      const counter = countStatements(pgModule.Client);
      try {
        await work();
        return { counts: Object.fromEntries(counter.counts), total: counter.total() };
      } finally {
        counter.stop();
      }
    };
    const statementsPerRun = (await counted(s1Run)).counts;
    const k500 = await bench(K, s2Run(middleware, K, store), 7);
    const k5000 = await bench(K_BIG, s2Run(middleware, K_BIG, store), 3);
    const statementsPerIteration500 = (await counted(s2Run(middleware, K, store))).total / (K + 1);
    const statementsPerIteration5000 = (await counted(s2Run(middleware, K_BIG, store))).total / (K_BIG + 1);
    const catchUp = await runCatchUp(kept, middleware);
    return { s1: { floor, rx, statementsPerRun }, s2: { k500, k5000, statementsPerIteration500, statementsPerIteration5000 }, catchUp };
  } finally {
    await store.close();
    await kept.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await pool.end();
  }
}
