/**
 * Durable runs on Redis (`redisStore`, a real Redis at REDIS_URL, default 127.0.0.1:6379):
 * - S1 with a redisStore journal: ns per delta against the same floor as S1, and the commands sent
 *   to Redis per run (each one a round trip at most; appends are one at a time, so the count bounds
 *   the round trips on the run's path);
 * - S2 with a redisStore journal: µs per iteration at K = 500 and 5,000, and commands per iteration;
 * - resume latency: a child process is killed with SIGKILL while a tool runs; its lease is let go
 *   (lease expiry excluded), then `agent.resume()` here: ms to `run-start` and to the next event
 *   (the interrupted call's result);
 * - `events()` catch-up: a finished run's journal replayed from seq 0, events per second.
 * Every run uses keys under a prefix of its own, dropped at the end.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type Redis from 'ioredis';
import { lastValueFrom, toArray } from 'rxjs';
import { createAgent, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { redisStore } from '../../src/redis/index';
import { bench, benchPair, check, median, type Measured } from '../lib/harness';
import { s1Model } from '../lib/fakeModel';
import { N, s1Floor, s1OnStore } from './s1';
import { K, K_BIG, s2Run } from './s2';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
/** Runs of the resume-latency child. */
export const RESUMES = 5;
/** Events in the journal replayed by the catch-up workload. */
export const CATCH_UP_DELTAS = 100_000;

export interface RedisResult {
  readonly s1: { readonly floor: Measured; readonly rx: Measured; readonly commandsPerRun: Record<string, number> };
  readonly s2: { readonly k500: Measured; readonly k5000: Measured; readonly commandsPerIteration500: number; readonly commandsPerIteration5000: number };
  readonly resume: { readonly msToRunStart: number; readonly msToNextEvent: number; readonly samples: readonly { runStart: number; next: number }[] };
  readonly catchUp: { readonly events: number; readonly eventsPerSecond: number; readonly records: number; readonly recordsPerSecond: number };
}

/** Counts the commands a client sends, by name (scripts are `evalsha`). */
function countCommands(client: Redis): { counts: Map<string, number>; total(): number; reset(): void } {
  const counts = new Map<string, number>();
  const send = client.sendCommand.bind(client);
  (client as { sendCommand: typeof client.sendCommand }).sendCommand = (command: { name: string }, ...rest: unknown[]) => {
    counts.set(command.name, (counts.get(command.name) ?? 0) + 1);
    return (send as (...args: unknown[]) => unknown)(command, ...rest);
  };
  return {
    counts,
    total: () => [...counts.values()].reduce((a, b) => a + b, 0),
    reset: () => counts.clear(),
  };
}

async function connect(): Promise<Redis> {
  // Loaded here, not at the top: ioredis defines `class VerbatimString extends String`, which turns
  // V8's String.prototype into a dictionary-mode object, so every method call on a string
  // (`charCodeAt`, `slice`, ...) is slower for the rest of the process. A static import would load
  // it (the bench is bundled into one file) before the other workloads run.
  const { default: RedisClient } = await import('ioredis');
  const client = new RedisClient(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
  } catch (error) {
    throw new Error(`the Redis workloads need Redis at ${REDIS_URL}: ${(error as Error).message}`);
  }
  return client;
}

async function dropPrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await client.unlink(...keys);
  } while (cursor !== '0');
}

/** One S1 run journaled on Redis, checked as S1 checks its runs. */
export function s1Journaled(client: Redis, prefix: string, middleware: readonly AgentMiddleware[], n = N): () => Promise<void> {
  // retainMs 0: a finished run's keys go at its end, its journal 10 s later (nothing piles up over the runs).
  return s1OnStore(redisStore({ client, prefix, retainMs: 0 }), 'Redis', middleware, n);
}

async function runS1Redis(client: Redis, prefix: string, middleware: readonly AgentMiddleware[]): Promise<RedisResult['s1']> {
  const run = s1Journaled(client, prefix, middleware);
  const [floor, rx] = await benchPair(N, () => s1Floor(), run, 7);
  const counter = countCommands(client);
  await run();
  return { floor, rx, commandsPerRun: Object.fromEntries(counter.counts) };
}

async function runS2Redis(client: Redis, prefix: string, middleware: readonly AgentMiddleware[]): Promise<RedisResult['s2']> {
  const store = redisStore({ client, prefix, retainMs: 0 });
  const k500 = await bench(K, s2Run(middleware, K, store), 7);
  const k5000 = await bench(K_BIG, s2Run(middleware, K_BIG, store), 3);
  const counter = countCommands(client);
  await s2Run(middleware, K, store)();
  const commandsPerIteration500 = counter.total() / (K + 1);
  counter.reset();
  await s2Run(middleware, K_BIG, store)();
  const commandsPerIteration5000 = counter.total() / (K_BIG + 1);
  return { k500, k5000, commandsPerIteration500, commandsPerIteration5000 };
}

/** The child of the resume workload: starts a run whose tool never returns, and prints its runId. */
const CHILD = join(process.cwd(), 'bench', 'workloads', 'redisResumeChild.ts');

async function killedRun(prefix: string, runId: string): Promise<void> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, JSON.stringify({ url: REDIS_URL, prefix, runId })], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      if (out.includes('TOOL-STARTED')) resolve();
    });
    child.on('exit', (code) => reject(new Error(`resume bench child exited (${code}) before its tool started: ${out}`)));
  });
  child.kill('SIGKILL');
  await new Promise((resolve) => child.on('exit', resolve));
}

async function runResume(client: Redis, prefix: string): Promise<RedisResult['resume']> {
  const { resumeAgent } = await import('./redisResumeChild');
  const store = redisStore({ client, prefix, retainMs: 0 });
  const agent = resumeAgent(store, 'finish');
  const samples: { runStart: number; next: number }[] = [];
  for (let i = 0; i < RESUMES; i++) {
    const runId = `resume-${randomUUID()}`;
    await killedRun(prefix, runId);
    const lease = await store.getLease(runId);
    check(lease !== undefined, 'resume bench: the killed run holds no lease');
    await store.releaseLease(runId, lease.owner); // lease expiry is not part of the latency
    const t0 = performance.now();
    let runStart = NaN;
    let next = NaN;
    const events = await new Promise<AgentEvent[]>((resolve, reject) => {
      const seen: AgentEvent[] = [];
      agent.resume(runId).subscribe({
        next(event) {
          seen.push(event);
          if (seen.length === 1) runStart = performance.now() - t0;
          else if (seen.length === 2) next = performance.now() - t0;
        },
        error: reject,
        complete: () => resolve(seen),
      });
    });
    check(events[0]?.type === 'run-start' && (events[0] as { resumed?: boolean }).resumed === true, `resume bench: first event ${JSON.stringify(events[0])}`);
    const result = events.find((e): e is Extract<AgentEvent, { type: 'tool-result' }> => e.type === 'tool-result');
    check(result?.result === "Tool 'pay' was interrupted; its outcome is unknown.", `resume bench: tool-result ${JSON.stringify(result)}`);
    check(events.at(-1)?.type === 'run-end' && (events.at(-1) as { reason: string }).reason === 'completed', `resume bench: ${JSON.stringify(events.at(-1))}`);
    samples.push({ runStart, next });
  }
  return { msToRunStart: median(samples.map((s) => s.runStart)), msToNextEvent: median(samples.map((s) => s.next)), samples };
}

async function runCatchUp(client: Redis, prefix: string, middleware: readonly AgentMiddleware[]): Promise<RedisResult['catchUp']> {
  const store = redisStore({ client, prefix, retainMs: 600_000 });
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
  check(events.length === live.length, `catch-up bench: replayed ${events.length} events, the run streamed ${live.length}`);
  check(JSON.stringify(events) === JSON.stringify(live), 'catch-up bench: the replay differs from what the run streamed');
  const ms = median(times);
  return { events: events.length, eventsPerSecond: (events.length / ms) * 1000, records, recordsPerSecond: (records / ms) * 1000 };
}

export async function runRedis(middleware: readonly AgentMiddleware[]): Promise<RedisResult> {
  const client = await connect();
  const prefix = `rx-agent-bench:${randomUUID()}:`;
  try {
    const s1 = await runS1Redis(client, prefix, middleware);
    const s2 = await runS2Redis(client, prefix, middleware);
    const resume = await runResume(client, prefix);
    const catchUp = await runCatchUp(client, prefix, middleware);
    return { s1, s2, resume, catchUp };
  } finally {
    await dropPrefix(client, prefix);
    client.disconnect();
  }
}
