// Seeded random crashes on PostgreSQL: a run in a child process killed with SIGKILL at a random moment,
// resumed by another child (killed at random too), and so on, then finished here. Checked: it
// completes exactly once; every call has exactly one outcome; a non-idempotent call ran at most
// once and, caught mid-flight, reads the interrupted result; the journal's seqs are gap-free; the
// session's history pairs every call with a result.
//
// Replay a failing case with `FUZZ_SEED=<seed> npx jest spec/postgres/crashInvariants.spec.ts`.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import { lastValueFrom, toArray } from 'rxjs';
import { recordEvents, type AgentEvent, type JournalRecord } from '../../src/index';
import { postgresStore, type PostgresStore } from '../../src/postgres/index';
import { connectPool, DATABASE_URL, dropSchema, uniqueSchema } from '../support/postgres';
import { Rng, fuzzSeeds } from '../support/random';
import { bundleWorker, Child } from '../support/children';
import { createExecutions, durableAgent as agentOn, executions as executed, unpairedToolCalls, type DurableAgentOptions } from './fixtures/durableRuns';

const INTERRUPTED = (name: string) => `Tool '${name}' was interrupted; its outcome is unknown.`;
const LEASE_MS = 1_000;
const seeds = fuzzSeeds(4);

let pool: pg.Pool;
let bundle: string;
let store: PostgresStore;
const schema = uniqueSchema('crashInvariants');
const stores: PostgresStore[] = [];

beforeAll(async () => {
  pool = await connectPool();
  store = postgresStore({ pool, schema });
  stores.push(store);
  await store.migrate();
  await createExecutions(pool, schema);
  bundle = await bundleWorker(join(__dirname, 'fixtures', 'worker.ts'));
}, 60_000);

afterAll(async () => {
  for (const made of stores) await made.close();
  await dropSchema(pool, schema);
  await pool.end();
  rmSync(bundle, { force: true });
});

/** The agent in this process (its store closed after the file). */
function durableAgent(options: Omit<DurableAgentOptions, 'pool' | 'schema'>) {
  const made = agentOn({ ...options, pool, schema });
  stores.push(made.store);
  return made;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function leaseLapsed(runId: string): Promise<void> {
  const lease = await store.getLease(runId);
  if (lease) await sleep(Math.max(0, lease.expiresAt - Date.now()) + 20);
}

describe.each(seeds.seedsFrom(17_000))('a run on PostgreSQL killed at random and resumed (seed %i)', (seed) => {
  it('completes exactly once; no non-idempotent call twice; every call answered; history valid', async () => {
    const rng = new Rng(seed);
    const plan: DurableAgentOptions['plan'] = Array.from({ length: rng.int(1, 3) }, () =>
      Array.from({ length: rng.int(1, 2) }, () => ({ tool: rng.pick(['pay', 'lookup'] as const), ms: rng.int(0, 80) })),
    );
    const kills = Array.from({ length: rng.int(1, 3) }, () => rng.int(0, 400));
    const runId = `fuzz-${seed}`;
    const sessionId = `fuzz-session-${seed}`;
    const base = {
      url: DATABASE_URL,
      schema,
      leaseMs: LEASE_MS,
      tool: 'pay',
      mode: 'finish',
      plan,
      finalDeltas: 20,
      deltaDelayMs: 5,
      runId,
      sessionId,
      input: 'Go',
    };

    for (const ms of kills) {
      await leaseLapsed(runId);
      // Killed before its start record was written, a run does not exist: it is started again.
      const started = (await store.read(runId)) !== undefined;
      const child = new Child(bundle, { ...base, resume: started });
      try {
        await child.waitFor((line) => line.startsWith('EVENT ') || line === 'COMPLETE', 'its first event');
        await Promise.race([sleep(ms), child.exited]);
      } finally {
        await child.kill().catch(() => undefined); // it may have ended by itself
      }
    }

    let info = await store.read(runId);
    if (!info?.some((entry) => entry.record.kind === 'end')) {
      await leaseLapsed(runId);
      const { agent } = durableAgent(base as unknown as DurableAgentOptions);
      const run$ = info ? agent.resume(runId) : agent.run('Go', { runId, sessionId });
      const events = await lastValueFrom(run$.pipe(toArray()));
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
      info = await store.read(runId);
    }

    const records = (info ?? []).map((entry) => entry.record);
    expect(records.filter((r) => r.kind === 'end')).toEqual([expect.objectContaining({ kind: 'end', reason: 'completed' })]);
    const seqs = records.flatMap((r) => recordEvents(runId, r).map((e) => e.seq));
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, k) => k + 1));

    const outcomes = records.filter((r): r is Extract<JournalRecord, { kind: 'tool-outcome' }> => r.kind === 'tool-outcome');
    for (const [iteration, calls] of plan.entries()) {
      for (const [j, { tool }] of calls.entries()) {
        const callId = `call-${iteration}-${j}`;
        const mine = outcomes.filter((o) => o.callId === callId);
        expect(mine).toHaveLength(1); // every call answered, once
        const executions = await executed(pool, schema, runId, `call:${callId}`);
        if (tool === 'pay') {
          expect(executions).toBeLessThanOrEqual(1);
          // Interrupted: its outcome is unknown. The count is a statement of its own, which the
          // kill may cut before it reaches the database (0) or not (1); never run again (≤ 1 above).
          if (mine[0].result !== INTERRUPTED('pay')) {
            expect(mine[0]).toMatchObject({ isError: false, result: { paid: true } });
            expect(executions).toBe(1);
          }
        } else {
          expect(mine[0]).toMatchObject({ isError: false, result: { amount: 42 } }); // re-run when caught mid-flight
          expect(executions).toBeGreaterThanOrEqual(1);
        }
      }
    }

    const replay: AgentEvent[] = await lastValueFrom(
      durableAgent(base as unknown as DurableAgentOptions)
        .agent.events(runId)
        .pipe(toArray()),
    );
    expect(replay.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
    const session = await store.load(sessionId);
    expect(unpairedToolCalls(session?.messages ?? [])).toEqual([]);
    expect(session?.messages.at(-1)).toMatchObject({ role: 'assistant' });
  }, 60_000);
});
