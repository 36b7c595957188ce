/**
 * The demo's durable mode (`npm start -- --redis`): the run is journaled in Redis, so any terminal
 * can answer, resume or follow it by id.
 *
 * - `--redis`: starts a run; when it needs the booking approved it suspends, and the process
 *   prints the commands that answer it, then exits.
 * - `--redis --approve <runId>` / `--deny <runId>`: answers the approval, then resumes the run here.
 * - `--redis --resume <runId>`: continues a run whose process was stopped (Ctrl-C) or killed.
 * - `--redis --events <runId>`: replays the run's events, then follows it live to its end.
 *
 * REDIS_URL (default redis://127.0.0.1:6379) and REDIS_PREFIX (default `rx-agent-demo:`) say
 * where the runs are kept.
 */
import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import type { Observable, Subscription } from 'rxjs';
import type { AgentEvent } from '../src/index';
import { redisStore } from '../src/redis/index';
import { demoAgent, demoModel, line, show, startAnswer, style } from './concierge';
import { DemoError, type DemoArgs } from './demoArgs';
import { makeBookTable } from './tools';

/** Long enough to press Ctrl-C (or kill the process) while the booking runs. */
const bookingDelayMs = 4_000;
/** A process that dies keeps its run this long; short, so that `--resume` after a kill soon works. */
const leaseMs = 5_000;

type RunEnd = Extract<AgentEvent, { type: 'run-end' }>;

/** How a stream of a run's events ended here. */
type Outcome = { kind: 'ended'; end: RunEnd } | { kind: 'busy' } | { kind: 'stopped' };

export async function durableDemo(args: DemoArgs): Promise<void> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const prefix = process.env.REDIS_PREFIX ?? 'rx-agent-demo:';
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: (times) => (times > 3 ? null : 200) });
  redis.on('error', () => undefined); // reported where a command fails
  try {
    await redis.connect();
  } catch (error) {
    throw new DemoError(`Cannot reach Redis at ${url} (set REDIS_URL): ${error instanceof Error ? error.message : String(error)}`);
  }
  const { model, close } = await demoModel();
  const runId = args.action?.runId ?? `paris-${randomBytes(4).toString('hex')}`;
  const bookTable = makeBookTable(bookingDelayMs, () =>
    line(style.yellow(`… booking (${bookingDelayMs / 1000} s). Stop this process now and continue the run with: npm start -- --redis --resume ${runId}`)),
  );
  const tracing = args.trace ? (await import('./traceTree')).traceInMemory() : undefined;
  const agent = demoAgent(model, {
    json: args.json,
    tracing,
    store: redisStore({ client: redis, prefix, retainMs: 24 * 60 * 60 * 1000 }),
    bookTable,
    permissionTimeoutMs: 60 * 60 * 1000,
    leaseMs,
  });
  console.log(style.dim(`Store: Redis at ${url}, keys under '${prefix}'.`));

  try {
    switch (args.action?.kind) {
      case undefined: {
        console.log(`${style.bold('Run:')} ${runId}`);
        console.log(`${style.bold('You:')} ${args.question}`);
        startAnswer();
        finish(runId, await stream(() => agent.run(args.question, { runId })));
        break;
      }
      case 'approve':
      case 'deny': {
        const approved = args.action.kind === 'approve';
        const info = await agent.runs.get(runId);
        if (!info) throw new DemoError(`No run '${runId}' in Redis at ${url} under '${prefix}'.`);
        const asks = info.pendingRequests.filter((r) => r.type === 'permission-request');
        if (info.status !== 'suspended' || asks.length === 0) {
          throw new DemoError(`Run '${runId}' waits for no approval: it is ${info.status}${info.reason ? ` (${info.reason})` : ''}.`);
        }
        for (const { requestId } of asks) {
          const reason = approved ? undefined : 'declined from another terminal';
          const accepted = await agent.respond(runId, { type: 'permission-response', requestId, approved, reason });
          line(style.yellow(accepted ? `${approved ? 'Approved' : 'Denied'} ${requestId}.` : `${requestId} took no answer (expired or already answered).`));
        }
        await resumeHere(runId);
        break;
      }
      case 'resume': {
        const info = await agent.runs.get(runId);
        if (!info) throw new DemoError(`No run '${runId}' in Redis at ${url} under '${prefix}'.`);
        if (info.status === 'finished') throw new DemoError(`Run '${runId}' has already ended (${info.reason ?? 'finished'}).`);
        await resumeHere(runId);
        break;
      }
      case 'events':
        await follow(runId);
        break;
    }
  } finally {
    await close();
    await redis.quit();
  }
  tracing?.print((text) => line(style.dim(text)));

  /** Resumes the run in this process; a run whose dead process still holds its lease is waited for. */
  async function resumeHere(id: string): Promise<void> {
    startAnswer();
    for (let attempt = 1; ; attempt++) {
      const outcome = await stream(() => agent.resume(id));
      if (outcome.kind !== 'busy') return finish(id, outcome);
      const lease = (await agent.runs.get(id))?.lease;
      if (attempt === 3 || !lease) throw new DemoError(`Run '${id}' is being run by another process (${lease?.owner ?? 'unknown'}).`);
      const waitMs = Math.max(0, lease.expiresAt - Date.now()) + 250;
      line(
        style.yellow(
          `Another process holds run ${id} (one that was killed keeps it for up to ${leaseMs / 1000} s); trying again in ${Math.ceil(waitMs / 1000)} s…`,
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  }

  /** Replays the run's events, then follows it live, across suspensions, to its end. */
  async function follow(id: string): Promise<void> {
    console.log(`${style.bold('Run:')} ${id} ${style.dim('(replayed, then live; Ctrl-C to stop following)')}`);
    let after = 0;
    for (;;) {
      let last = after;
      const outcome = await stream(
        () => agent.events(id, { after }),
        (event) => (last = event.seq ?? last),
      );
      if (outcome.kind !== 'ended' || outcome.end.reason !== 'suspended') return;
      line(style.dim('[following: waiting for the run to be answered and resumed]'));
      after = last;
    }
  }

  function finish(id: string, outcome: Outcome): void {
    if (outcome.kind === 'stopped') {
      line(style.yellow(`Stopped. The run is saved; continue it from any terminal with: npm start -- --redis --resume ${id}`));
    } else if (outcome.kind === 'ended' && outcome.end.reason === 'suspended') {
      line(style.yellow(`Run ${id} is saved in Redis and waits for an answer. From any terminal:`));
      line(`  npm start -- --redis --approve ${id}`);
      line(`  npm start -- --redis --deny ${id}`);
      line(style.dim(`  npm start -- --redis --events ${id}    (replay and follow its events)`));
    }
  }
}

/**
 * Prints a run's events until its `run-end`. Ctrl-C unsubscribes (the run is interrupted, not
 * cancelled, so it can be resumed). A resume refused because another process holds the run is
 * reported as `busy`, not printed.
 */
function stream(events: () => Observable<AgentEvent>, onEvent?: (event: AgentEvent) => void): Promise<Outcome> {
  return new Promise<Outcome>((resolve, reject) => {
    let end: RunEnd | undefined;
    let busy = false;
    let subscription: Subscription | undefined;
    const stop = () => {
      subscription?.unsubscribe();
      resolve({ kind: 'stopped' });
    };
    process.once('SIGINT', stop);
    const done = (outcome: Outcome) => {
      process.off('SIGINT', stop);
      resolve(outcome);
    };
    subscription = events().subscribe({
      next: (event) => {
        onEvent?.(event);
        if (event.type === 'error' && event.error.name === 'RunBusyError') busy = true;
        if (event.type === 'run-end') end = event;
        if (busy) return;
        void show(event, (request) =>
          line(style.yellow(`? ${request.toolName}(${JSON.stringify(request.args)}) needs your approval (request ${request.requestId}).`)),
        );
      },
      error: (error: unknown) => {
        process.off('SIGINT', stop);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
      complete: () => done(busy ? { kind: 'busy' } : end ? { kind: 'ended', end } : { kind: 'stopped' }),
    });
  });
}
