/**
 * Three servers, one store: `npm run bench:fleet -- --store redis|postgres|both [--conversations 1000]`
 * (`--turns 3`, `--kill-at 0.5`: the share of the runs ended when one instance is killed, or `never`;
 * `--cancels 0`: how many conversations cancel their last turn instead of approving it).
 *
 * Starts three instances of examples/fleetServer.ts as child processes, drives `--conversations`
 * conversations at once, of `--turns` turns each (each turn a run in the conversation's session,
 * its booking approved), every request to a random live instance (a stream cut by a dead instance
 * reconnects, with Last-Event-ID, to another), kills one instance with SIGKILL when half of the
 * runs have ended and starts it again. Then it checks the outcome in the store and Redis and
 * prints: runs completed, answers lost, tool runs duplicated, invalid histories (a tool call
 * without its result, a turn missing or twice), time to first token, runs per second per instance.
 * Exits 1 when an answer was lost, a tool ran twice or a history is invalid.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import Redis from 'ioredis';
import pg from 'pg';
import { filter, lastValueFrom, tap, timeout } from 'rxjs';
import type { AgentEvent, AgentStore, LegacyAgentStore, Message } from '../src/index';
import { runsClient, RunsHttpError } from '../src/http/index';
import { postgresStore } from '../src/postgres/index';
import { redisStore } from '../src/redis/index';
import { executionsKey, schemaOf } from '../examples/fleetServer';

/** Options of {@link runFleet}. */
export interface FleetOptions {
  readonly store: 'redis' | 'postgres';
  /** Conversations driven at once (default 1000). */
  readonly conversations?: number;
  /** Turns per conversation (default 3). */
  readonly turns?: number;
  /** Kill (SIGKILL) and restart one instance when this share of the runs has ended (default 0.5; false: never). */
  readonly killAt?: number | false;
  /** How many conversations cancel their last turn (`POST /runs/:id/cancel`) instead of approving its booking (default 0). */
  readonly cancels?: number;
  /**
   * The instances' run lease, BullMQ lock and stalled-job check, in ms (default 30 000, 30 000,
   * 10 000): on a busy machine a shorter lock is missed by live workers, whose jobs are then handed
   * over while they run (safe, but each costs a wait).
   */
  readonly leaseMs?: number;
  readonly lockMs?: number;
  readonly stalledMs?: number;
  /** The model's pace and the booking's duration in the instances, in ms (default 5 and 50). */
  readonly delayMs?: number;
  readonly toolMs?: number;
  /** Progress lines (default: none). */
  readonly log?: (line: string) => void;
}

/** What {@link runFleet} measured and checked. */
export interface FleetReport {
  readonly store: 'redis' | 'postgres';
  readonly conversations: number;
  readonly turns: number;
  readonly runsCompleted: number;
  /** Last turns cancelled as asked, ended `cancelled` (the others count as lost). */
  readonly runsCancelled: number;
  /** Turns whose client did not get the answer: no `run-end` completed with the turn's text. */
  readonly answersLost: number;
  /** Executions of the booking beyond the first, per call. */
  readonly toolRunsDuplicated: number;
  /** Bookings caught by the kill: their outcome unknown, reported to the model, not run again. */
  readonly toolRunsInterrupted: number;
  /** Sessions whose history has a tool call without its result, or not one user and one answer per turn. */
  readonly invalidHistories: number;
  readonly ttftP50Ms: number;
  readonly ttftP99Ms: number;
  readonly seconds: number;
  /** Runs each instance's worker finished per second of the drive (the killed one's two processes together). */
  readonly runsPerSecondPerInstance: readonly number[];
  /** Whether an instance was killed (holding runs) and restarted. */
  readonly killed: boolean;
  /** Which one (0, 1, 2: the order of `runsPerSecondPerInstance`). */
  readonly killedInstance: number | undefined;
  /** Runs the killed instance held that BullMQ handed, stalled, to another worker, which resumed them. */
  readonly runsHandedOver: number;
  /** The first few problems, for a reader. */
  readonly problems: readonly string[];
}

// The repository: jest loads this file as CommonJS (__dirname), `npm run bench:fleet` as ESM, from the root.
const root = typeof __dirname === 'string' ? join(__dirname, '..') : process.cwd();

/** One instance slot: its process (the restarted one after a kill) and the runs its workers finished. */
class Instance {
  url: string | undefined;
  done = 0;
  /** Runs finished here that BullMQ had found stalled (their worker killed) and handed over. */
  handedOver = 0;
  /** The jobs this process runs now. */
  readonly active = new Set<string>();
  /** Called at the next booking this process starts (then forgotten). */
  onBooking: (() => void) | undefined;
  private child: ChildProcess | undefined;
  private output = '';

  constructor(
    private readonly bundle: string,
    private readonly args: readonly string[],
  ) {}

  start(): Promise<string> {
    const child = spawn(process.execPath, [this.bundle, ...this.args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    return new Promise((resolve, reject) => {
      let rest = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        const lines = (rest + chunk).split('\n');
        rest = lines.pop() ?? '';
        for (const line of lines) {
          const [word, jobId, , stalled] = line.split(' ');
          if (word === 'ACTIVE') this.active.add(jobId);
          else if (word === 'BOOKING' && this.onBooking) {
            const then = this.onBooking;
            this.onBooking = undefined;
            then();
          } else if (word === 'DONE' || word === 'FAILED') {
            this.active.delete(jobId);
            if (word === 'DONE') this.done++;
            if (Number(stalled) > 0) this.handedOver++;
          } else if (line.startsWith('READY ')) resolve((this.url = line.split(' ')[1]));
          else this.output += `${line}\n`;
        }
      });
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (this.output += chunk));
      child.once('exit', (code, signal) => {
        if (this.child === child) this.url = undefined;
        reject(new Error(`instance exited (${signal ?? code}) before it was ready:\n${this.output}`));
      });
    });
  }

  /** SIGKILL: no goodbye, its jobs and leases are left to lapse. */
  async kill(): Promise<void> {
    const child = this.child!;
    this.url = undefined;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    this.active.clear();
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    this.url = undefined;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

/** Bundles the example once (a child then starts in a fraction of a second, and is the process a SIGKILL kills). */
async function bundleServer(): Promise<string> {
  const dir = join(root, 'node_modules', '.cache', `rx-agent-fleet-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  const outfile = join(dir, 'fleetServer.mjs');
  await build({
    entryPoints: [join(root, 'examples', 'fleetServer.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile,
    packages: 'external',
    logLevel: 'warning',
  });
  return outfile;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** Why a session's history is not valid, or undefined. */
function historyProblem(messages: readonly Message[], turns: number, answered: number): string | undefined {
  const calls = new Set<string>();
  const results = new Set<string>();
  for (const message of messages) {
    for (const part of message.content) {
      if (part.type === 'tool-call') calls.add(part.callId);
      if (part.type === 'tool-result') results.add(part.callId);
    }
  }
  const unpaired = [...calls].filter((id) => !results.has(id));
  if (unpaired.length > 0) return `tool calls without a result: ${unpaired.join(', ')}`;
  const users = messages.filter((m) => m.role === 'user').length;
  if (users !== turns) return `${users} user messages for ${turns} turns`;
  const answers = messages.filter((m) => m.role === 'assistant' && m.content.some((p) => p.type === 'text' && p.text.startsWith('Turn '))).length;
  if (answers !== answered) return `${answers} final answers for ${answered} turns answered`;
  return undefined;
}

/** Starts three instances, drives the conversations, kills and restarts one, checks and measures. */
export async function runFleet(options: FleetOptions): Promise<FleetReport> {
  const {
    store: kind,
    conversations = 1000,
    turns = 3,
    cancels = 0,
    killAt = 0.5,
    leaseMs = 30_000,
    lockMs = 30_000,
    stalledMs = 10_000,
    delayMs = 5,
    toolMs = 50,
  } = options;
  const log = options.log ?? (() => undefined);
  if (kind !== 'redis' && kind !== 'postgres') throw new TypeError(`runFleet: 'store' must be 'redis' or 'postgres', got ${String(kind)}`);
  if (!Number.isInteger(conversations) || conversations < 1) throw new TypeError(`runFleet: 'conversations' must be a whole number >= 1, got ${conversations}`);
  if (!Number.isInteger(cancels) || cancels < 0 || cancels > conversations) {
    throw new TypeError(`runFleet: 'cancels' must be a whole number from 0 to the conversations, got ${cancels}`);
  }
  if (killAt !== false && !(typeof killAt === 'number' && killAt > 0 && killAt <= 1)) {
    throw new TypeError(`runFleet: 'killAt' must be a share of the runs, above 0 and up to 1, or false, got ${String(killAt)}`);
  }
  const name = `fleet_${process.pid}_${Date.now().toString(36)}`;
  const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect().catch((error: Error) => {
    throw new Error(`The fleet needs Redis at ${redisUrl} and it does not answer (${error.message})`);
  });
  const pool = kind === 'postgres' ? new pg.Pool({ connectionString: databaseUrl, connectionTimeoutMillis: 3000 }) : undefined;
  if (pool) {
    await pool.query('SELECT 1').catch((error: Error) => {
      throw new Error(`The fleet needs PostgreSQL at ${databaseUrl} and it does not answer (${error.message})`);
    });
  }
  const bundle = await bundleServer();
  const args = ['--store', kind, '--port', '0', '--name', name, '--concurrency', String(conversations + 10)];
  args.push(
    '--lease-ms',
    String(leaseMs),
    '--lock-ms',
    String(lockMs),
    '--stalled-ms',
    String(stalledMs),
    '--delay-ms',
    String(delayMs),
    '--tool-ms',
    String(toolMs),
  );
  const instances = [0, 1, 2].map(() => new Instance(bundle, args));
  const problems: string[] = [];
  const problem = (text: string) => void (problems.length < 20 && problems.push(text));
  let ticker: ReturnType<typeof setInterval> | undefined;
  let store: ((AgentStore | LegacyAgentStore) & { close?(): Promise<void> }) | undefined;
  try {
    // The first one creates the PostgreSQL schema; then the other two.
    await instances[0].start();
    await Promise.all(instances.slice(1).map((instance) => instance.start()));
    log(`3 instances ready (${kind}): ${instances.map((i) => i.url).join(' ')}`);

    const live = () => instances.map((i) => i.url).filter((url): url is string => url !== undefined);
    /** A load balancer: each request to a random live instance. */
    const balanced = (input: string, init: RequestInit) => {
      const urls = live();
      const base = urls[Math.floor(Math.random() * urls.length)] ?? 'http://127.0.0.1:9';
      return fetch(input.replace(/^http:\/\/fleet/, base), init);
    };
    const client = runsClient('http://fleet/runs', { fetch: balanced, retryMs: 200, maxRetries: 50 });
    /** Retries what a dead instance could not answer (the request never reached a live one). */
    const retrying = async <T>(what: () => Promise<T>): Promise<T> => {
      for (let attempt = 0; ; attempt++) {
        try {
          return await what();
        } catch (error) {
          if (error instanceof RunsHttpError || attempt >= 50) throw error;
          await sleep(200);
        }
      }
    };

    const total = conversations * turns;
    const ttft: number[] = [];
    let ended = 0;
    let answersLost = 0;
    let runsCancelled = 0;
    let killed = false;
    let killedInstance: number | undefined;
    let killing: Promise<void> | undefined;
    const killThreshold = killAt === false ? Infinity : Math.max(1, Math.floor(total * killAt));

    async function turn(conversation: number, t: number): Promise<void> {
      const sessionId = `${name}-c${conversation}`;
      const runId = `${name}-c${conversation}-t${t}`;
      const started = performance.now();
      const cancelling = conversation < cancels && t === turns;
      let first: number | undefined;
      await retrying(() => client.start({ input: `Turn ${t}: a table for two, please`, sessionId, runId }));
      const end = await lastValueFrom(
        client.events(runId).pipe(
          tap((event: AgentEvent) => {
            if (event.type === 'text-delta' && first === undefined) first = performance.now() - started;
            if (event.type === 'permission-request' && cancelling) {
              void retrying(() => client.cancel(runId)).catch((error: Error) => problem(`${runId}: the cancel failed: ${error.message}`));
            } else if (event.type === 'permission-request') {
              void retrying(() => client.respond(runId, { type: 'permission-response', requestId: event.requestId, approved: true })).catch((error: Error) =>
                problem(`${runId}: the approval failed: ${error.message}`),
              );
            }
          }),
          filter((event): event is Extract<AgentEvent, { type: 'run-end' }> => event.type === 'run-end'),
          timeout({ first: 300_000 }),
        ),
        { defaultValue: undefined },
      ).catch((error: Error) => {
        problem(`${runId}: its stream failed: ${error.message}`);
        return undefined;
      });
      if (first !== undefined) ttft.push(first);
      if (cancelling && end?.reason === 'cancelled') runsCancelled++;
      else if (!end || end.reason !== 'completed' || !end.text.startsWith(`Turn ${t}: your table is `)) {
        answersLost++;
        if (end) problem(`${runId}: ended ${end.reason} with ${JSON.stringify(end.text)}`);
      }
      if (++ended === killThreshold) {
        killing = (async () => {
          // The instance where the next booking starts is killed: its run is handed over, the booking caught mid-flight.
          const victim = await new Promise<Instance>((resolve) => {
            const timer = setTimeout(() => resolve(instances[1]), 10_000); // no booking: the second one
            for (const instance of instances) {
              instance.onBooking = () => {
                clearTimeout(timer);
                for (const other of instances) other.onBooking = undefined;
                resolve(instance);
              };
            }
          });
          log(`${ended}/${total} runs ended: SIGKILL to ${victim.url}, then a new process in its place`);
          const held = victim.active.size;
          await victim.kill();
          log(`killed, holding ${held} runs`);
          killed = true;
          killedInstance = instances.indexOf(victim);
          await victim.start();
          log(`restarted at ${victim.url}`);
        })();
      }
    }

    const startedAt = performance.now();
    let progress = 0;
    ticker = setInterval(() => {
      if (ended !== progress) log(`${(progress = ended)}/${total} runs ended`);
    }, 5_000);
    await Promise.all(
      Array.from({ length: conversations }, async (_, c) => {
        for (let t = 1; t <= turns; t++) await turn(c, t);
      }),
    );
    const seconds = (performance.now() - startedAt) / 1000;
    clearInterval(ticker);
    await killing;

    // Checks, in Redis and the store.
    const counts = await redis.hgetall(executionsKey(name));
    let toolRunsDuplicated = 0;
    for (const [call, n] of Object.entries(counts)) {
      if (Number(n) > 1) {
        toolRunsDuplicated += Number(n) - 1;
        problem(`booking ${call} ran ${n} times`);
      }
    }
    const sessions = pool ? postgresStore({ pool, schema: schemaOf(name) }) : redisStore({ client: redis, prefix: `${name}:runs:` });
    store = sessions;
    let invalidHistories = 0;
    let toolRunsInterrupted = 0;
    for (let c = 0; c < conversations; c++) {
      const snapshot = await sessions.load(`${name}-c${c}`);
      const messages: readonly Message[] = snapshot?.messages ?? [];
      const why = historyProblem(messages, turns, c < cancels ? turns - 1 : turns);
      if (why) {
        invalidHistories++;
        problem(`session c${c}: ${why}`);
      }
      for (const m of messages)
        for (const p of m.content) if (p.type === 'tool-result' && p.isError && String(p.result).includes('was interrupted')) toolRunsInterrupted++;
    }
    const ttftSorted = ttft.sort((a, b) => a - b);
    return {
      store: kind,
      conversations,
      turns,
      runsCompleted: total - answersLost - runsCancelled,
      runsCancelled,
      answersLost,
      toolRunsDuplicated,
      toolRunsInterrupted,
      invalidHistories,
      ttftP50Ms: percentile(ttftSorted, 50),
      ttftP99Ms: percentile(ttftSorted, 99),
      seconds,
      runsPerSecondPerInstance: instances.map((i) => i.done / seconds),
      killed,
      killedInstance,
      runsHandedOver: instances.reduce((n, i) => n + i.handedOver, 0),
      problems,
    };
  } finally {
    clearInterval(ticker);
    await Promise.all(instances.map((i) => i.stop()));
    await store?.close?.();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${name}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.unlink(...keys);
    } while (cursor !== '0');
    await redis.quit();
    if (pool) {
      await pool.query(`DROP SCHEMA IF EXISTS "${schemaOf(name)}" CASCADE`);
      await pool.end();
    }
    rmSync(join(bundle, '..'), { recursive: true, force: true });
  }
}

/** The report as a table row of bench/README.md. */
export function reportRow(r: FleetReport): string {
  // The killed instance's figure in italics.
  const perInstance = r.runsPerSecondPerInstance.map((n, i) => (i === r.killedInstance ? `*${n.toFixed(1)}*` : n.toFixed(1))).join(' / ');
  return `| ${r.store} | ${r.conversations} × ${r.turns} | ${r.runsCompleted} | ${r.answersLost} | ${r.toolRunsDuplicated} | ${r.runsHandedOver} | ${r.toolRunsInterrupted} | ${r.invalidHistories} | ${Math.round(r.ttftP50Ms)} / ${Math.round(r.ttftP99Ms)} | ${perInstance} | ${r.seconds.toFixed(1)} |`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      store: { type: 'string', default: 'redis' },
      conversations: { type: 'string', default: '1000' },
      turns: { type: 'string', default: '3' },
      'kill-at': { type: 'string', default: '0.5' },
      cancels: { type: 'string', default: '0' },
    },
  });
  const stores = values.store === 'both' ? (['redis', 'postgres'] as const) : [values.store as 'redis' | 'postgres'];
  const rows: string[] = [];
  let failed = false;
  for (const store of stores) {
    const report = await runFleet({
      store,
      conversations: Number(values.conversations),
      killAt: values['kill-at'] === 'never' ? false : Number(values['kill-at']),
      cancels: Number(values.cancels),
      turns: Number(values.turns),
      log: (line) => console.log(`[${store}] ${line}`),
    });
    console.log(JSON.stringify({ ...report, problems: undefined }, null, 2));
    for (const p of report.problems) console.log(`  problem: ${p}`);
    rows.push(reportRow(report));
    failed ||= report.answersLost > 0 || report.toolRunsDuplicated > 0 || report.invalidHistories > 0;
  }
  console.log(
    '\n| store | conversations × turns | runs completed | answers lost | tool runs duplicated | runs handed over | bookings interrupted | invalid histories | first token p50 / p99 ms | runs/s per instance | s |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const row of rows) console.log(row);
  if (failed) process.exitCode = 1;
}

if (process.argv[1]?.endsWith('fleet.ts')) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
