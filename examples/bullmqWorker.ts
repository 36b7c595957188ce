/**
 * Durable runs as BullMQ jobs on Redis: a job is a run id and its input (its job id
 * `jobIdOf(runId)`); a worker runs it with `agent.run()`, or, when the journal knows the run
 * already (its worker died and BullMQ handed the stalled job to this one, or it is a `resume` job
 * that `runsHandler` enqueued for a suspended run's answer), goes on with `agent.resume(runId)`.
 * BullMQ does the queueing, the stalled-job detection and the hand-over; the run's journal makes
 * the hand-over safe: what was done is not done again, a tool caught mid-flight is not silently
 * re-run.
 *
 * - `npx tsx examples/bullmqWorker.ts`: starts a worker (Ctrl-C, or kill it, and start another).
 * - `npx tsx examples/bullmqWorker.ts add "What is the weather in Paris?"`: enqueues a run.
 *
 * REDIS_URL (default redis://127.0.0.1:6379) says where the queue and the runs are kept.
 */
import { randomBytes } from 'node:crypto';
import { Queue, UnrecoverableError, Worker, type Job, type WorkerOptions } from 'bullmq';
import Redis from 'ioredis';
import { filter, lastValueFrom, map, tap, type Observable } from 'rxjs';
import { createAgent, type Agent, type AgentEvent, type ErrorInfo } from '../src/index';
import { redisStore } from '../src/redis/index';
import { demoModel } from './concierge';
import { getWeather, searchPlaces } from './tools';

/**
 * What a job carries: the run's id and, for a job that starts the run, its input (and session). A
 * job with `resume: true` goes on with a run the store knows (`runsHandler`'s `resume` puts such a
 * job on the queue when a suspended run gets its answer). Its BullMQ job id is {@link jobIdOf}.
 */
export interface RunJob {
  readonly runId: string;
  /** The run's input: what `agent.run()` is given when the store does not know the run yet. */
  readonly input?: string;
  readonly sessionId?: string;
  /** The job resumes the run: it has no input, and a run the store does not know fails it. */
  readonly resume?: true;
}

/** What a job returns: how its run ended. */
export interface RunJobResult {
  readonly reason: string;
  readonly text: string;
}

/**
 * The BullMQ job id of a run: `run-` and the run's id, its `%` and `:` percent-encoded; with
 * `resumeAt`, the id of the job that resumes the run suspended at that seq: `resume-<seq>-` and
 * the same encoded id. BullMQ refuses a custom job id that contains `:` or is an integer ("Custom
 * Id cannot contain :", "Custom Id cannot be integers"), which a run id may well be
 * (`alice:<uuid>`, `12345`); these never are. Each run id (and seq) has its own: a run is enqueued
 * once however often its `POST` is sent, and a suspension is resumed once however many answers
 * it gets.
 *
 * @example
 * jobIdOf('alice:7f3c…'); // 'run-alice%3A7f3c…'
 * jobIdOf('12345'); // 'run-12345'
 * jobIdOf('12345', 9); // 'resume-9-12345'
 */
export function jobIdOf(runId: string, resumeAt?: number): string {
  if (typeof runId !== 'string' || runId === '') throw new TypeError(`jobIdOf: a run id must be a non-empty string, got ${String(runId)}`);
  const id = runId.replace(/[%:]/g, (c) => encodeURIComponent(c));
  if (resumeAt === undefined) return `run-${id}`;
  if (!Number.isInteger(resumeAt) || resumeAt < 0) throw new TypeError(`jobIdOf: 'resumeAt' must be a seq (a whole number >= 0), got ${String(resumeAt)}`);
  return `resume-${resumeAt}-${id}`;
}

type RunEnd = Extract<AgentEvent, { type: 'run-end' }>;

/** A run's end, and the last error it reported before it (what a run that ended with an error failed of). */
interface Ended {
  readonly end: RunEnd;
  readonly error: ErrorInfo | undefined;
}

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
 * Runs a job's run: starts it when the store does not know it, resumes it when it is suspended (a
 * `resume` job: its answer came) or when its last worker stopped (after waiting for that worker's
 * lease to lapse), reports it when it ended already (its worker died after the end, before BullMQ
 * heard of it).
 *
 * A run that ends with an error fails the job, in one of two ways:
 *
 * - The run is finished (the model, a tool or a middleware failed it; it is journaled as ended with
 *   reason `error`): nothing can resume it, and the job fails at once with an `UnrecoverableError`
 *   naming the run and its error, whatever its `attempts` say. A retry of such a job (or a job handed
 *   over after its worker died past that end) fails the same way: it is never reported as completed.
 * - The run is left interrupted (the store failed as it wrote, so its end is not journaled): the job
 *   fails with a plain error, and BullMQ retries it as its `attempts` say; the retry resumes the
 *   run from its journal. So does the hand-over of a job whose worker died (a stalled job).
 */
export async function runJob(agent: Agent, job: Job<RunJob>): Promise<RunJobResult> {
  const { runId, input, sessionId, resume } = job.data;
  for (let tries = 0; tries < 3; tries++) {
    const info = await agent.runs.get(runId);
    if (info?.status === 'finished') return resultOf(runId, await finalEnd(agent, runId));
    if (info?.status === 'running' && info.lease) {
      // The worker that ran it died holding its lease: it lapses by itself.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, info.lease!.expiresAt - Date.now()) + 50));
      continue;
    }
    if (!info && (resume || typeof input !== 'string')) {
      throw new UnrecoverableError(`run '${runId}' is not in the store: a job without input resumes a run, and there is none to resume`);
    }
    let elsewhere = false;
    const events$ = info ? agent.resume(runId) : agent.run(input!, { runId, sessionId });
    const ended = await lastEnd(events$, (event) => (elsewhere ||= event.type === 'error' && RAN_ELSEWHERE.has(event.error.name)));
    if (elsewhere) continue; // another process took it first, or ran it meanwhile: look again
    if (ended.end.reason === 'error' && (await agent.runs.get(runId))?.status !== 'finished') {
      // Its end is not journaled: a retry resumes it.
      throw new Error(`run '${runId}' stopped with an error (${errorText(ended.error)}) and is left to be resumed: a retry of the job resumes it`);
    }
    return resultOf(runId, ended);
  }
  throw new Error(`run '${runId}' is held by another process`);
}

/** A finished run's end: `events()` stops at every `run-end`, a suspension's too, so it reads on after those. */
async function finalEnd(agent: Agent, runId: string, after = 0): Promise<Ended> {
  const ended = await lastEnd(agent.events(runId, { after }));
  return ended.end.reason === 'suspended' ? finalEnd(agent, runId, ended.end.seq ?? after + 1) : ended;
}

function lastEnd(events$: Observable<AgentEvent>, seen: (event: AgentEvent) => void = () => undefined): Promise<Ended> {
  let error: ErrorInfo | undefined;
  return lastValueFrom(
    events$.pipe(
      tap((event) => {
        seen(event);
        if (event.type === 'error') error = event.error;
      }),
      filter((event): event is RunEnd => event.type === 'run-end'),
      map((end) => ({ end, error })),
    ),
  );
}

/** How a finished run ended; one that ended with an error fails the job for good (a retry cannot help). */
function resultOf(runId: string, { end, error }: Ended): RunJobResult {
  if (end.reason === 'error') throw new UnrecoverableError(`run '${runId}' ended with an error: ${errorText(error)}`);
  return { reason: end.reason, text: end.text };
}

const errorText = (error: ErrorInfo | undefined): string => (error ? `${error.name}: ${error.message}` : 'no error was reported');

async function main(): Promise<void> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  // BullMQ's workers block on Redis: their connection must not give up on a command.
  const connection = new Redis(url, { maxRetriesPerRequest: null });
  const queueName = 'rx-agent-runs';
  if (process.argv[2] === 'add') {
    const runId = `run-${randomBytes(4).toString('hex')}`;
    const queue = new Queue<RunJob, RunJobResult>(queueName, { connection });
    await queue.add('run', { runId, input: process.argv[3] ?? 'What is the weather in Paris?' }, { jobId: jobIdOf(runId) });
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
