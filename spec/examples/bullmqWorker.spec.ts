// Recovery on BullMQ: the example's worker runs a durable run as a job; its process is killed
// with SIGKILL while a non-idempotent tool runs; BullMQ's stalled-job check hands the job to a
// second worker process, which resumes the run. Real Redis, real BullMQ, real processes.
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { Queue, type Job } from 'bullmq';
import type Redis from 'ioredis';
import { lastValueFrom, NEVER, toArray, type Observable, type Subscription } from 'rxjs';
import { z } from 'zod';
import {
  createAgent,
  defineTool,
  memoryStore,
  type Agent,
  type AgentEvent,
  type AgentStore,
  type JournalRecord,
  type Message,
  type Tool,
} from '../../src/index';
import { scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { redisStore } from '../../src/redis/index';
import { connectRedis, deleteKeys, REDIS_URL, uniquePrefix } from '../support/redis';
import { bundleWorker, Child } from '../support/children';
import { counterKey, TOOL_STARTED, unpairedToolCalls } from '../redis/fixtures/durableRuns';
import { runJob, type RunJob, type RunJobResult } from '../../examples/bullmqWorker';
import { permissions } from '../../operators/permissions';

const INTERRUPTED = "Tool 'pay' was interrupted; its outcome is unknown.";
/** Short, so that the killed worker's job stalls and its run's lease lapses within seconds. */
const LEASE_MS = 1_500;
const LOCK_MS = 1_500;
const STALLED_MS = 500;

let client: Redis;
let prefix: string;
let bullPrefix: string;
let bundle: string;
let queue: Queue<RunJob, RunJobResult>;
let queueConnection: Redis;
const queueName = `runs-${process.pid}-${Date.now()}`;
const children: Child[] = [];

beforeAll(async () => {
  client = await connectRedis();
  prefix = uniquePrefix('bullmq');
  bullPrefix = uniquePrefix('bullmq-queue').slice(0, -1);
  bundle = await bundleWorker(join(__dirname, 'fixtures', 'bullmqChild.ts'));
  queueConnection = client.duplicate({ maxRetriesPerRequest: null });
  queue = new Queue<RunJob, RunJobResult>(queueName, { connection: queueConnection, prefix: bullPrefix });
}, 60_000);

afterEach(async () => {
  for (const child of children.splice(0)) await child.kill().catch(() => undefined);
});

afterAll(async () => {
  await queue.obliterate({ force: true });
  await queue.close();
  await queueConnection.quit();
  await deleteKeys(client, prefix);
  await deleteKeys(client, bullPrefix);
  await client.quit();
  rmSync(bundle, { force: true });
});

function worker(): Child {
  const child = new Child(bundle, {
    url: REDIS_URL,
    prefix,
    bullPrefix,
    queue: queueName,
    leaseMs: LEASE_MS,
    lockDuration: LOCK_MS,
    stalledInterval: STALLED_MS,
  });
  children.push(child);
  return child;
}

describe('a run as a BullMQ job whose worker is killed mid-tool', () => {
  it('is handed to another worker by the stalled-job check and resumed there: it completes once, the tool ran once, the history is valid', async () => {
    const runId = 'bullmq-pay';
    const first = worker();
    await first.waitFor((line) => line === 'READY', 'the worker to be ready');
    await queue.add('run', { runId, input: 'Pay INV-7', sessionId: 'bullmq-session' }, { jobId: runId });
    await first.waitFor((line) => line === `${TOOL_STARTED} pay`, 'the tool to start');
    await first.kill();
    expect(await client.get(counterKey(prefix, runId, 'pay'))).toBe('1');

    const second = worker();
    const completed = await second.waitFor((line) => line.startsWith('COMPLETED '), 'the job to complete', 30_000);
    const { id, result } = JSON.parse(completed.slice('COMPLETED '.length)) as { id: string; result: RunJobResult };
    expect(id).toBe(runId);
    expect(result).toEqual({ reason: 'completed', text: `Done. The tool said: ${INTERRUPTED}` });

    // BullMQ: the job completed once, after one stall.
    const job = await queue.getJob(runId);
    expect(await job?.getState()).toBe('completed');
    expect(job?.returnvalue).toEqual(result);
    expect(job?.stalledCounter).toBe(1); // handed over by the stalled-job check, not retried as a failure
    expect(job?.attemptsStarted).toBe(2);
    expect(await queue.getJobCounts('completed', 'failed', 'active', 'wait')).toEqual({ completed: 1, failed: 0, active: 0, wait: 0 });
    expect(first.lines.filter((line) => line.startsWith('COMPLETED') || line.startsWith('FAILED'))).toEqual([]);
    expect(second.lines.filter((line) => line.startsWith('COMPLETED') || line.startsWith('FAILED'))).toHaveLength(1);

    // The run: one end, completed; the non-idempotent tool ran once; its call answered in the history.
    const store = redisStore({ client, prefix });
    const records: JournalRecord[] = ((await store.read(runId)) ?? []).map((entry) => entry.record);
    expect(records.filter((record) => record.kind === 'end')).toEqual([{ version: 1, kind: 'end', reason: 'completed' }]);
    expect(
      records.filter((record) => record.kind === 'event' && record.event.type === 'run-start').map((r) => (r as { event: { resumed?: true } }).event.resumed),
    ).toEqual([undefined, true]);
    expect(await client.get(counterKey(prefix, runId, 'pay'))).toBe('1');
    const messages: readonly Message[] = (await store.load('bullmq-session'))?.messages ?? [];
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(unpairedToolCalls(messages)).toEqual([]);
    expect(messages[2].content).toEqual([{ type: 'tool-result', callId: 'call-1', name: 'pay', result: INTERRUPTED, isError: true }]);
  }, 60_000);
});

describe('runJob, when another process ran the run between its look and its lease', () => {
  const job = { data: { runId: 'r', input: 'Pay INV-7' } } as Job<RunJob>;
  const payCall = { toolCalls: [{ name: 'pay', args: {}, callId: 'c1' }] };

  /** A `pay` tool that hangs (a process stopped mid-tool) or answers at once. */
  function payTool(hang: boolean, started: () => void = () => undefined): Tool {
    return defineTool({
      name: 'pay',
      description: 'Pays',
      parameters: z.object({}),
      idempotent: true,
      execute: () => {
        started();
        return hang ? NEVER : 'paid';
      },
    });
  }

  /** Runs `run` with a hanging tool and stops it when the tool starts: the run is interrupted there. */
  async function stopMidTool(store: AgentStore, turns: ScriptedTurn[], run: (agent: Agent) => Observable<AgentEvent>): Promise<void> {
    let subscription: Subscription | undefined;
    await new Promise<void>((resolve) => {
      const agent = createAgent({ model: scriptedModel(turns), tools: [payTool(true, resolve)], store });
      subscription = run(agent).subscribe();
    });
    subscription?.unsubscribe();
  }

  /** The store as this worker sees it: `race` runs (another process) just before its first lease. */
  function racing(store: AgentStore, race: () => Promise<void>): AgentStore {
    let raced = false;
    return Object.assign(Object.create(store) as AgentStore, {
      acquireLease: async (runId: string, owner: string, ttl: number) => {
        if (!raced) {
          raced = true;
          await race();
        }
        return store.acquireLease(runId, owner, ttl);
      },
    });
  }

  async function interruptedRun(): Promise<AgentStore> {
    const store: AgentStore = memoryStore({ retainMs: 60_000 });
    await stopMidTool(store, [payCall], (agent) => agent.run('Pay INV-7', { runId: 'r' }));
    const kinds = ((await store.read('r')) ?? []).map((entry) => entry.record.kind);
    expect(kinds).toContain('tool-start');
    expect(kinds).not.toContain('end');
    expect(await store.getLease('r')).toBeUndefined();
    return store;
  }

  it('reports the run when the other process finished it (the resume was refused with RunFinishedError)', async () => {
    const store = await interruptedRun();
    const other = createAgent({ model: scriptedModel(['Paid elsewhere.']), tools: [payTool(false)], store });
    const worker = createAgent({
      model: scriptedModel(['Paid here.']),
      tools: [payTool(false)],
      store: racing(store, async () => void (await lastValueFrom(other.resume('r')))),
    });
    await expect(runJob(worker, job)).resolves.toEqual({ reason: 'completed', text: 'Paid elsewhere.' });
  });

  it('reports a finished run that suspended on its way by its last end, not by its suspension', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const pay = defineTool({ name: 'pay', description: 'Pays', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const model = scriptedModel([payCall, 'Paid once approved.']);
    const agent = createAgent({ model, tools: [pay], middleware: [permissions()], store, onRequest: 'suspend' });
    const first = await lastValueFrom(agent.run('Pay INV-7', { runId: 'r' }).pipe(toArray()));
    expect(first.at(-1)).toMatchObject({ type: 'run-end', reason: 'suspended' });
    const request = first.find((event) => event.type === 'permission-request') as Extract<AgentEvent, { type: 'permission-request' }>;
    expect(await agent.respond('r', { type: 'permission-response', requestId: request.requestId, approved: true })).toBe(true);
    expect(await lastValueFrom(agent.resume('r'))).toMatchObject({ type: 'run-end', reason: 'completed' });
    // A job for it again (its worker died after the end, before BullMQ heard of it): the run's end is read.
    await expect(runJob(agent, job)).resolves.toEqual({ reason: 'completed', text: 'Paid once approved.' });
  });

  it('resumes again when the other process went on and stopped again (refused with JournalConflictError)', async () => {
    const store = await interruptedRun();
    const before = (await store.read('r'))?.length ?? 0;
    const worker = createAgent({
      model: scriptedModel(['Paid here.']),
      tools: [payTool(false)],
      store: racing(store, () => stopMidTool(store, [], (agent) => agent.resume('r'))),
    });
    await expect(runJob(worker, job)).resolves.toEqual({ reason: 'completed', text: 'Paid here.' });
    const records = ((await store.read('r')) ?? []).map((entry) => entry.record);
    expect(records.length).toBeGreaterThan(before);
    expect(records.filter((record) => record.kind === 'end')).toEqual([{ version: 1, kind: 'end', reason: 'completed' }]);
    // Three run-starts: the first process's, the other's resume, this worker's second resume.
    expect(records.filter((record) => record.kind === 'event' && record.event.type === 'run-start')).toHaveLength(3);
  });
});

describe('the example worker (npx tsx examples/bullmqWorker.ts)', () => {
  /** A database of its own: the example's queue and key prefix are fixed. */
  const url = new URL(REDIS_URL);
  url.pathname = '/11';

  afterAll(async () => {
    const db = client.duplicate({ db: 11 });
    await deleteKeys(db, 'bull:rx-agent-runs:');
    await db.quit();
  });

  it('exits on Ctrl-C (SIGINT), its embedded model closed with it', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, REDIS_URL: url.href };
    delete env.OPENAI_API_KEY;
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/bullmqWorker.ts'], {
      cwd: join(__dirname, '..', '..'),
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let output = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString('utf8');
        if (output.includes('waiting for runs')) resolve();
      });
      void exited.then(() => reject(new Error(`the worker exited before it was ready:\n${output}`)));
    });
    child.kill('SIGINT');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    const code = await exited;
    clearTimeout(timer);
    expect(code).toBe(0);
  }, 30_000);
});
