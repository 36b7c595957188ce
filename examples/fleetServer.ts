/**
 * A server any number of instances of which run side by side on one Redis, with the runs kept in
 * Redis or in PostgreSQL: a run started, followed, answered or cancelled through any instance is
 * the same run. `POST /runs` puts the run on a BullMQ queue (`runsHandler`'s `start` option) and
 * answers once a worker of some instance has it in the store; every instance's worker takes runs
 * from that queue. When an instance is killed, its stalled jobs are handed by BullMQ to the
 * workers of the others, which go on with `agent.resume(runId)`.
 *
 * ```sh
 * npx tsx examples/fleetServer.ts --store redis --port 3001      # in three terminals: 3001, 3002, 3003
 * npx tsx examples/fleetServer.ts --store postgres --port 3001   # runs and sessions in PostgreSQL
 * curl -s localhost:3001/runs -H 'content-type: application/json' -d '{"input":"A table for two","sessionId":"s1"}'
 * curl -sN localhost:3002/runs/<runId>/events                       # the run's events, from another instance
 * ```
 *
 * The model is scripted (no API key): each turn it says a few words and calls `book_table`, a
 * tool that needs a person's approval and is not idempotent (it counts each execution, per run
 * and call, in Redis: a booking run twice would show), then answers. REDIS_URL (default
 * redis://127.0.0.1:6379) and DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) say
 * where the services are; `--name` keeps the keys, the queue and the schema of one fleet apart.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { Queue, type Worker } from 'bullmq';
import Redis from 'ioredis';
import pg from 'pg';
import { z } from 'zod';
import { createAgent, defineTool, type Agent, type AgentStore, type LegacyAgentStore, type Message, type RunOptions, type ToolResultPart } from '../src/index';
import { permissions } from '../operators/index';
import { runsHandler, toNodeHandler } from '../src/http/index';
import { postgresStore } from '../src/postgres/index';
import { redisStore } from '../src/redis/index';
import { scriptedModel, type ScriptedTurn } from '../src/testing/index';
import { agentWorker, jobIdOf, type RunJob, type RunJobResult } from './bullmqWorker';

/** Options of {@link startFleetServer}. */
export interface FleetServerOptions {
  /** Where the runs and sessions are kept. The queue and the tool's counts are always in Redis. */
  readonly store: 'redis' | 'postgres';
  /** The port to listen on (0: any free one). */
  readonly port: number;
  /** Keeps one fleet's keys, queue and schema apart from another's (default `'fleet'`). */
  readonly name?: string;
  readonly redisUrl?: string;
  readonly databaseUrl?: string;
  /** How many runs this instance's worker runs at once (default 200); a run waiting for a person holds its place. */
  readonly concurrency?: number;
  /** The run's lease (`createAgent({ leaseMs })`, default 30 000). */
  readonly leaseMs?: number;
  /** BullMQ's job lock (`lockDuration`, default 30 000): a job of a dead worker stalls once it lapses. */
  readonly lockMs?: number;
  /** How often the worker looks for stalled jobs (`stalledInterval`, default 30 000). */
  readonly stalledMs?: number;
  /** The model's pace: ms before each piece it streams (default 5). */
  readonly delayMs?: number;
  /** How long a booking takes, in ms (default 50). */
  readonly toolMs?: number;
  /** Told as each booking starts (after it is counted). */
  readonly onBooking?: (runId: string, callId: string) => void;
}

/** A running instance. */
export interface FleetServer {
  readonly url: string;
  readonly agent: Agent;
  readonly worker: Worker<RunJob, RunJobResult>;
  /**
   * Stops taking requests and jobs, waits for the runs its worker runs to end (BullMQ's
   * `worker.close()`: a run waiting for a person holds it), then disconnects. A process killed
   * instead leaves its runs to the other instances.
   */
  close(): Promise<void>;
}

/** The Redis hash counting the executions of `book_table`, one field `<runId>/<callId>` per call. */
export const executionsKey = (name: string) => `${name}:executions`;

/** The PostgreSQL schema of a fleet's store. */
export const schemaOf = (name: string) => name.replace(/[^A-Za-z0-9_]/g, '_').toLowerCase();

/** The scripted model's answer: it reads the conversation, so any instance continues any run. */
function answer(messages: readonly Message[]): ScriptedTurn {
  let lastUser = messages.length - 1;
  while (lastUser >= 0 && messages[lastUser].role !== 'user') lastUser--;
  const turn = messages.slice(0, lastUser + 1).filter((m) => m.role === 'user').length;
  const result = messages
    .slice(lastUser + 1)
    .flatMap((m) => m.content)
    .find((part): part is ToolResultPart => part.type === 'tool-result');
  if (!result) {
    return {
      text: ['Let me ', 'book that ', 'for you.'],
      toolCalls: [{ name: 'book_table', args: { place: 'Café de Flore', people: 2, turn }, callId: `book-${turn}` }],
    };
  }
  const outcome = result.isError ? `not booked (${typeof result.result === 'string' ? result.result : 'error'})` : `booked, ${JSON.stringify(result.result)}`;
  return { text: ['Turn ', `${turn}: `, 'your table ', 'is ', outcome, '.'] };
}

/** Starts one instance: the store, the agent, its BullMQ worker and the HTTP server. */
export async function startFleetServer(options: FleetServerOptions): Promise<FleetServer> {
  const {
    store: kind,
    port,
    name = 'fleet',
    redisUrl = 'redis://127.0.0.1:6379',
    databaseUrl = 'postgres://postgres@127.0.0.1:5432/test',
    concurrency = 200,
    leaseMs = 30_000,
    lockMs = 30_000,
    stalledMs = 30_000,
    delayMs = 5,
    toolMs = 50,
    onBooking,
  } = options;
  if (kind !== 'redis' && kind !== 'postgres') throw new TypeError(`startFleetServer: 'store' must be 'redis' or 'postgres', got ${String(kind)}`);
  // BullMQ's blocking commands must not give up: no retry limit on this connection.
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const pool = kind === 'postgres' ? new pg.Pool({ connectionString: databaseUrl, max: 20 }) : undefined;
  let store: (AgentStore | LegacyAgentStore) & { close?(): Promise<void> };
  if (pool) {
    const pgStore = postgresStore({ pool, schema: schemaOf(name) });
    await pgStore.migrate();
    store = pgStore;
  } else {
    store = redisStore({ client: redis, prefix: `${name}:runs:` });
  }

  const bookTable = defineTool({
    name: 'book_table',
    description: 'Books a table (asks the user first)',
    parameters: z.object({ place: z.string(), people: z.number().int().min(1), turn: z.number().int() }),
    needsApproval: true,
    execute: async ({ place, people, turn }, ctx) => {
      // Counted as it starts: a booking cut short by a crash counts too, and one run twice shows as 2.
      await redis.hincrby(executionsKey(name), `${ctx.runId}/${ctx.callId}`, 1);
      onBooking?.(ctx.runId, ctx.callId);
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, toolMs);
        ctx.signal.addEventListener('abort', () => (clearTimeout(timer), reject(ctx.signal.reason)), { once: true });
      });
      return { confirmation: `BK-${turn}-${people}`, place };
    },
  });
  const model = scriptedModel([(request) => ({ ...(answer(request.messages) as object), delay: delayMs })], { loop: true });
  const agent = createAgent({
    name: 'fleet',
    model,
    instructions: 'You book tables.',
    tools: [bookTable],
    middleware: [permissions({ timeout: 10 * 60_000 })],
    store,
    leaseMs,
  });

  const connection = { connection: redis, prefix: `${name}:bull` };
  const queue = new Queue<RunJob, RunJobResult>('runs', connection);
  const worker = agentWorker(agent, 'runs', { ...connection, concurrency, lockDuration: lockMs, stalledInterval: stalledMs, maxStalledCount: 5 });

  // A job that fails (its run stopped with an error and is left to be resumed) is retried; a run that
  // ended with an error fails its job for good (see runJob).
  const retries = { attempts: 3, backoff: { type: 'fixed', delay: 1_000 } } as const;

  /** Puts the run on the queue, and resolves once a worker (of any instance) has it in the store. */
  async function enqueue(input: unknown, run: RunOptions & { readonly runId: string }): Promise<void> {
    if (typeof input !== 'string') throw new TypeError(`This server takes text: "input" must be a string, got ${typeof input}`);
    const { runId, sessionId } = run;
    // jobIdOf: BullMQ refuses a job id with ':' or an integer one, which a run id may be.
    await queue.add('run', { runId, input, sessionId }, { jobId: jobIdOf(runId), ...retries });
    for (let wait = 5, waited = 0; !(await agent.runs.get(runId)); waited += wait, wait = Math.min(wait * 2, 100)) {
      if (waited > 60_000) throw new Error(`run '${runId}' was queued but no worker started it within 60 s`);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  const handle = toNodeHandler(
    runsHandler(agent, {
      start: enqueue,
      // A suspended run (onRequest: 'suspend') that gets its answer goes back on the queue: one
      // job per suspension, however many answers it gets and through whichever instances.
      resume: async (runId, { seq }) => void (await queue.add('resume', { runId, resume: true }, { jobId: jobIdOf(runId, seq), ...retries })),
      // A client may name its run (`alice:<uuid>`, `12345`…): sending the same POST again (its
      // connection was cut) is then the same job, never a second run.
      runOptions: (_request, body) => ({
        sessionId: body.sessionId,
        runId: typeof body.runId === 'string' && /^[\w:.-]{1,100}$/.test(body.runId) ? body.runId : undefined,
      }),
    }),
  );
  const server: Server = createServer((req, res) => {
    if ((req.url ?? '').startsWith('/runs')) return handle(req, res);
    res
      .writeHead(404, { 'content-type': 'application/json' })
      .end(JSON.stringify({ error: `No route for ${req.method} ${req.url}: the runs are under /runs` }));
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', resolve));
  await worker.waitUntilReady();
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    url,
    agent,
    worker,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await worker.close();
      await queue.close();
      await store.close?.();
      await pool?.end();
      await redis.quit();
    },
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      store: { type: 'string', default: 'redis' },
      port: { type: 'string', default: '3001' },
      name: { type: 'string', default: 'fleet' },
      concurrency: { type: 'string' },
      'lease-ms': { type: 'string' },
      'lock-ms': { type: 'string' },
      'stalled-ms': { type: 'string' },
      'delay-ms': { type: 'string' },
      'tool-ms': { type: 'string' },
    },
  });
  const number = (flag: string, value: string | undefined): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0) throw new TypeError(`--${flag} must be a number >= 0, got ${JSON.stringify(value)}`);
    return n;
  };
  const server = await startFleetServer({
    store: values.store as 'redis' | 'postgres',
    port: number('port', values.port) ?? 3001,
    name: values.name,
    redisUrl: process.env.REDIS_URL,
    databaseUrl: process.env.DATABASE_URL,
    concurrency: number('concurrency', values.concurrency),
    leaseMs: number('lease-ms', values['lease-ms']),
    lockMs: number('lock-ms', values['lock-ms']),
    stalledMs: number('stalled-ms', values['stalled-ms']),
    delayMs: number('delay-ms', values['delay-ms']),
    toolMs: number('tool-ms', values['tool-ms']),
    onBooking: (runId) => process.stdout.write(`BOOKING ${runId}\n`),
  });
  // A line per run this instance's worker takes and finishes (the load test counts them), then READY.
  server.worker.on('active', (job) => process.stdout.write(`ACTIVE ${job.id}\n`));
  // The third word: how often BullMQ found the job stalled (its worker died) and handed it over.
  server.worker.on('completed', (job, result) => process.stdout.write(`DONE ${job.id} ${result.reason} ${job.stalledCounter}\n`));
  server.worker.on('failed', (job, error) => process.stdout.write(`FAILED ${job?.id} ${error.message}\n`));
  process.stdout.write(`READY ${server.url} (${values.store}, pid ${process.pid})\n`);
  const stop = () => void server.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (process.argv[1]?.replace(/\.[cm]?[jt]s$/, '').endsWith('fleetServer')) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
