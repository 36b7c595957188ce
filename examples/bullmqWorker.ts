/**
 * Durable runs as BullMQ jobs on Redis: a job is a run id and its input; a worker runs it with
 * `agent.run()`, or, when the journal knows the run already (its worker died and BullMQ handed the
 * stalled job to this one), goes on with `agent.resume(runId)`. BullMQ does the queueing, the
 * stalled-job detection and the hand-over; the run's journal makes the hand-over safe: what was
 * done is not done again, a tool caught mid-flight is not silently re-run.
 *
 * - `npx tsx examples/bullmqWorker.ts`: starts a worker (Ctrl-C, or kill it, and start another).
 * - `npx tsx examples/bullmqWorker.ts add "What is the weather in Paris?"`: enqueues a run.
 *
 * REDIS_URL (default redis://127.0.0.1:6379) says where the queue and the runs are kept.
 */
import { randomBytes } from 'node:crypto';
import { Queue, Worker, type Job, type WorkerOptions } from 'bullmq';
import Redis from 'ioredis';
import { filter, lastValueFrom, type Observable } from 'rxjs';
import { createAgent, type Agent, type AgentEvent } from '../src/index';
import { redisStore } from '../src/redis/index';
import { demoModel } from './concierge';
import { getWeather, searchPlaces } from './tools';

/** What a job carries: the run's id (also the job's id, so a run is enqueued once) and its input. */
export interface RunJob {
  readonly runId: string;
  readonly input: string;
  readonly sessionId?: string;
}

/** What a job returns: how its run ended. */
export interface RunJobResult {
  readonly reason: string;
  readonly text: string;
}

type RunEnd = Extract<AgentEvent, { type: 'run-end' }>;

/**
 * The refusals that mean another process has the run: it holds the lease (`RunBusyError`), or it
 * ran the run between this worker's look and its lease, and ended it (`RunFinishedError`) or
 * stopped it again (`JournalConflictError`).
 */
const RAN_ELSEWHERE: ReadonlySet<string> = new Set(['RunBusyError', 'RunFinishedError', 'JournalConflictError']);

/** A BullMQ worker that runs the jobs of `queueName` with `agent` (whose store is a `redisStore`). */
export function agentWorker(agent: Agent, queueName: string, options: WorkerOptions): Worker<RunJob, RunJobResult> {
  return new Worker<RunJob, RunJobResult>(queueName, (job) => runJob(agent, job), options);
}

/**
 * Runs a job's run: starts it when the store does not know it, resumes it when its last worker
 * stopped (after waiting for that worker's lease to lapse), reports it when it ended already (its
 * worker died after the end, before BullMQ heard of it). A run that ends with an error fails the
 * job, for BullMQ to retry it as its `attempts` say: the retry resumes the run.
 */
export async function runJob(agent: Agent, job: Job<RunJob>): Promise<RunJobResult> {
  const { runId, input, sessionId } = job.data;
  for (let tries = 0; tries < 3; tries++) {
    const info = await agent.runs.get(runId);
    if (info?.status === 'finished') return endOf(await lastEnd(agent.events(runId)));
    if (info?.status === 'running' && info.lease) {
      // The worker that ran it died holding its lease: it lapses by itself.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, info.lease!.expiresAt - Date.now()) + 50));
      continue;
    }
    let elsewhere = false;
    const events$ = info ? agent.resume(runId) : agent.run(input, { runId, sessionId });
    const end = await lastEnd(events$, (event) => (elsewhere ||= event.type === 'error' && RAN_ELSEWHERE.has(event.error.name)));
    if (elsewhere) continue; // another process took it first, or ran it meanwhile: look again
    if (end.reason === 'error') throw new Error(`run '${runId}' ended with an error`);
    return endOf(end);
  }
  throw new Error(`run '${runId}' is held by another process`);
}

function lastEnd(events$: Observable<AgentEvent>, seen: (event: AgentEvent) => void = () => undefined): Promise<RunEnd> {
  return lastValueFrom(events$.pipe(filter((event): event is RunEnd => (seen(event), event.type === 'run-end'))));
}

function endOf(end: RunEnd): RunJobResult {
  return { reason: end.reason, text: end.text };
}

async function main(): Promise<void> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  // BullMQ's workers block on Redis: their connection must not give up on a command.
  const connection = new Redis(url, { maxRetriesPerRequest: null });
  const queueName = 'rx-agent-runs';
  if (process.argv[2] === 'add') {
    const runId = `run-${randomBytes(4).toString('hex')}`;
    const queue = new Queue<RunJob, RunJobResult>(queueName, { connection });
    await queue.add('run', { runId, input: process.argv[3] ?? 'What is the weather in Paris?' }, { jobId: runId });
    console.log(`enqueued ${runId}`);
    await queue.close();
    await connection.quit();
    return;
  }
  const { model, close } = await demoModel();
  const agent = createAgent({
    name: 'concierge',
    model,
    instructions: 'You are a concise Paris concierge.',
    tools: [getWeather, searchPlaces],
    store: redisStore({ client: connection, prefix: 'rx-agent-runs:' }),
  });
  const worker = agentWorker(agent, queueName, { connection });
  worker.on('completed', (job, result) => console.log(`${job.id}: ${result.reason}: ${result.text}`));
  worker.on('failed', (job, error) => console.log(`${job?.id}: failed: ${error.message}`));
  // The embedded model's server would keep the process alive: it closes with the worker. Set
  // before the line below, which tells whoever started the worker that Ctrl-C is handled.
  process.once('SIGINT', () => void worker.close().then(() => Promise.all([connection.quit(), close()])));
  console.log(`worker ${process.pid} waiting for runs on '${queueName}'`);
}

if (process.argv[1]?.endsWith('bullmqWorker.ts')) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
