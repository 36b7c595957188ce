// Seeded random crashes on Redis: a run in a child process killed with SIGKILL at a random moment,
// resumed by another child (killed at random too), and so on, then finished here. Checked: it
// completes exactly once; every call has exactly one outcome; a non-idempotent call ran at most
// once and, caught mid-flight, reads the interrupted result; the journal's seqs are gap-free; the
// session's history pairs every call with a result, and its middleware state counts each call once.
//
// Replay a failing case with `FUZZ_SEED=<seed> npx jest spec/redis/crashInvariants.spec.ts`.
import { rmSync } from 'node:fs';
import type Redis from 'ioredis';
import { lastValueFrom, toArray } from 'rxjs';
import { recordEvents, type AgentEvent, type JournalRecord } from '../../src/index';
import { redisStore } from '../../src/redis/index';
import { Rng, fuzzSeeds } from '../support/random';
import { connectRedis, deleteKeys, REDIS_URL, uniquePrefix } from '../support/redis';
import { bundleWorker, Child } from './fixtures/children';
import { callCounterKey, callTracker, durableAgent, TrackedCalls, unpairedToolCalls, type DurableAgentOptions } from './fixtures/durableRuns';

const INTERRUPTED = (name: string) => `Tool '${name}' was interrupted; its outcome is unknown.`;
const LEASE_MS = 1_000;
const seeds = fuzzSeeds(4);

let client: Redis;
let bundle: string;
const prefix = uniquePrefix('crashInvariants');

beforeAll(async () => {
  client = await connectRedis();
  bundle = await bundleWorker();
}, 60_000);

afterAll(async () => {
  await deleteKeys(client, prefix);
  await client.quit();
  rmSync(bundle, { force: true });
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function leaseLapsed(runId: string): Promise<void> {
  const lease = await redisStore({ client, prefix }).getLease(runId);
  if (lease) await sleep(Math.max(0, lease.expiresAt - Date.now()) + 20);
}

describe.each(seeds.seedsFrom(17_000))('a run on Redis killed at random and resumed (seed %i)', (seed) => {
  it('completes exactly once; no non-idempotent call twice; every call answered; history valid', async () => {
    const rng = new Rng(seed);
    const plan: DurableAgentOptions['plan'] = Array.from({ length: rng.int(1, 3) }, () =>
      Array.from({ length: rng.int(1, 2) }, () => ({ tool: rng.pick(['pay', 'lookup'] as const), ms: rng.int(0, 80) })),
    );
    const kills = Array.from({ length: rng.int(1, 3) }, () => rng.int(0, 400));
    const runId = `fuzz-${seed}`;
    const sessionId = `fuzz-session-${seed}`;
    const base = {
      url: REDIS_URL,
      prefix,
      leaseMs: LEASE_MS,
      tool: 'pay',
      mode: 'finish',
      plan,
      finalDeltas: 20,
      deltaDelayMs: 5,
      runId,
      sessionId,
      input: 'Go',
      tracker: true,
    };
    const store = redisStore({ client, prefix });

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
      const { agent } = durableAgent({ ...(base as unknown as DurableAgentOptions), client, prefix, middleware: [callTracker()] });
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
        const executions = Number((await client.get(callCounterKey(prefix, runId, callId))) ?? 0);
        if (tool === 'pay') {
          expect(executions).toBeLessThanOrEqual(1);
          if (mine[0].result === INTERRUPTED('pay')) expect(executions).toBe(1);
          else expect(mine[0]).toMatchObject({ isError: false, result: { paid: true } });
        } else {
          expect(mine[0]).toMatchObject({ isError: false, result: { amount: 42 } }); // re-run when caught mid-flight
          expect(executions).toBeGreaterThanOrEqual(1);
        }
      }
    }

    const replay: AgentEvent[] = await lastValueFrom(
      durableAgent({ ...(base as unknown as DurableAgentOptions), client, prefix })
        .agent.events(runId)
        .pipe(toArray()),
    );
    expect(replay.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
    const session = await store.load(sessionId);
    expect(unpairedToolCalls(session?.messages ?? [])).toEqual([]);
    expect(session?.messages.at(-1)).toMatchObject({ role: 'assistant' });
    // The middleware state is that of a run never killed: every call passed each hook once.
    const calls = plan.flat().length;
    expect(session?.state[TrackedCalls.key]).toEqual({ version: 1, value: { before: calls, after: calls } });
  }, 60_000);
});
