// The example worker (examples/bullmqWorker.ts) and the fleet example (examples/fleetServer.ts) as
// a user of BullMQ meets them: how a run's error ends its job, which run ids make job ids, and
// where the resume of a suspended run runs when runsHandler puts runs on a queue. Real Redis, real
// BullMQ, real HTTP on 127.0.0.1.
import { Queue, QueueEvents, UnrecoverableError, type Job, type Worker } from 'bullmq';
import type Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { createAgent, type AgentEvent, type AgentStore, type JournalRecord } from '../../src/index';
import { runsHandler } from '../../src/http/runsHandler';
import { redisStore } from '../../src/redis/index';
import { scriptedModel } from '../../src/testing/index';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';
import { bookingAgent, label, readFrames, serveRuns } from '../support/runsServer';
import { agentWorker, jobIdOf, runJob, type RunJob, type RunJobResult } from '../../examples/bullmqWorker';
import { executionsKey, schemaOf, startFleetServer } from '../../examples/fleetServer';

let client: Redis;
let connection: Redis;
let prefix: string;
let bullPrefix: string;
const closers: Array<() => Promise<unknown>> = [];
let queues = 0;

beforeAll(async () => {
  client = await connectRedis();
  connection = client.duplicate({ maxRetriesPerRequest: null });
  prefix = uniquePrefix('bullmqRuns');
  bullPrefix = uniquePrefix('bullmqRuns-queue').slice(0, -1);
});

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

afterAll(async () => {
  await deleteKeys(client, prefix);
  await deleteKeys(client, bullPrefix);
  await connection.quit();
  await client.quit();
});

/** A queue of its own, with its events, and a worker of `agentWorker` on it. */
function queueFor(agent: Parameters<typeof agentWorker>[0]) {
  const name = `q${++queues}`;
  const queue = new Queue<RunJob, RunJobResult>(name, { connection, prefix: bullPrefix });
  const events = new QueueEvents(name, { connection: connection.duplicate(), prefix: bullPrefix });
  const worker: Worker<RunJob, RunJobResult> = agentWorker(agent, name, { connection, prefix: bullPrefix });
  closers.push(
    () => queue.close(),
    () => events.close(),
    () => worker.close(),
  );
  return { queue, events, worker };
}

const json = (body: unknown) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('runJob: a run that ends with an error', () => {
  it('fails its job at once (an UnrecoverableError naming the run and its error) when the run is finished: never completed, not retried', async () => {
    const agent = createAgent({ model: scriptedModel([{ error: new Error('boom') }, 'Hello after retry']), store: redisStore({ client: connection, prefix }) });
    const { queue, events } = queueFor(agent);
    const job = await queue.add(
      'run',
      { runId: 'model-fails', input: 'hi' },
      { jobId: jobIdOf('model-fails'), attempts: 3, backoff: { type: 'fixed', delay: 10 } },
    );
    await expect(job.waitUntilFinished(events)).rejects.toThrow("run 'model-fails' ended with an error: Error: boom");
    const after = (await queue.getJob(job.id!))!;
    expect(await after.getState()).toBe('failed');
    expect(after.failedReason).toBe("run 'model-fails' ended with an error: Error: boom");
    expect(after.attemptsMade).toBe(1); // a retry cannot resume a finished run: none is made
    expect(await agent.runs.get('model-fails')).toMatchObject({ status: 'finished', reason: 'error' });
  });

  it('a retry that finds the run finished with an error (its worker died after the end) fails the job too, naming the error', async () => {
    const store = redisStore({ client: connection, prefix });
    const agent = createAgent({ model: scriptedModel([{ error: new TypeError('bad request') }]), store });
    // The run ended before a worker of the queue could report it: the job's next attempt finds it so.
    await lastValueFrom(agent.run('hi', { runId: 'ended-before' }));
    const { queue, events } = queueFor(agent);
    const job = await queue.add('run', { runId: 'ended-before', input: 'hi' }, { jobId: jobIdOf('ended-before'), attempts: 3 });
    await expect(job.waitUntilFinished(events)).rejects.toThrow("run 'ended-before' ended with an error: TypeError: bad request");
    expect(await (await queue.getJob(job.id!))!.getState()).toBe('failed');
    await expect(runJob(agent, { data: { runId: 'ended-before', input: 'hi' } } as Job<RunJob>)).rejects.toBeInstanceOf(UnrecoverableError);
  });

  it('is retried when the run is left interrupted (the store failed as it wrote the end): the retry resumes it and the job completes', async () => {
    const store = redisStore({ client: connection, prefix });
    let failed = 0;
    // The store fails once, as the run writes its end: the run stops with an error, its end unwritten.
    const flaky: AgentStore = Object.assign(Object.create(store) as AgentStore, {
      append: (runId: string, expected: number, records: readonly JournalRecord[]) =>
        records.some((record) => record.kind === 'end') && failed++ === 0
          ? Promise.reject(new Error('Redis went away'))
          : store.append(runId, expected, records),
    });
    const agent = createAgent({ model: scriptedModel(['Hello.'], { loop: true }), store: flaky });
    const { queue, events } = queueFor(agent);
    const job = await queue.add(
      'run',
      { runId: 'store-fails', input: 'hi' },
      { jobId: jobIdOf('store-fails'), attempts: 3, backoff: { type: 'fixed', delay: 10 } },
    );
    await expect(job.waitUntilFinished(events)).resolves.toEqual({ reason: 'completed', text: 'Hello.' });
    const after = (await queue.getJob(job.id!))!;
    expect(after.attemptsMade).toBe(2); // the first failed, the retry resumed the run
    const records = ((await store.read('store-fails')) ?? []).map((entry) => entry.record);
    expect(
      records.filter((record) => record.kind === 'event' && record.event.type === 'run-start').map((r) => (r as { event: { resumed?: true } }).event.resumed),
    ).toEqual([undefined, true]);
    expect(records.filter((record) => record.kind === 'end')).toEqual([{ version: 1, kind: 'end', reason: 'completed' }]);
  });
});

describe('jobIdOf: the job id of a run', () => {
  it('is accepted by BullMQ for any run id (with ":", an integer…) and is one per run id and resume', async () => {
    const runIds = ['alice:7f3c2a9e-0b1d-4c58-9d1e-2f6a8b4c3d21', '12345', '-5', 'a:b:c', 'a%3Ab', 'run-x', 'résumé 1', '0'];
    const ids = [...runIds.map((runId) => jobIdOf(runId)), ...runIds.map((runId) => jobIdOf(runId, 7)), jobIdOf('12345', 8)];
    expect(new Set(ids).size).toBe(ids.length);
    expect(jobIdOf('alice:1')).toBe('run-alice%3A1');
    expect(jobIdOf('12345', 9)).toBe('resume-9-12345');
    const queue = new Queue(`ids${++queues}`, { connection, prefix: bullPrefix });
    closers.push(() => queue.close());
    for (const id of ids) expect((await queue.add('run', {}, { jobId: id })).id).toBe(id);
    expect(() => jobIdOf('')).toThrow(TypeError);
    expect(() => jobIdOf('x', 1.5)).toThrow(TypeError);
  });
});

describe('the fleet example (examples/fleetServer.ts)', () => {
  it("starts runs that its client names 'alice:<uuid>' and '12345' (BullMQ refuses both as job ids): 201, run by its worker to their end", async () => {
    const name = `${prefix}fleet`;
    const fleet = await startFleetServer({ store: 'redis', port: 0, name, delayMs: 1, toolMs: 1 });
    closers.push(async () => {
      await fleet.close();
      await deleteKeys(client, `${name}:`);
      await client.del(executionsKey(name));
    });
    expect(schemaOf(name)).not.toContain(':');
    for (const runId of [`alice:${crypto.randomUUID()}`, '12345']) {
      const started = await fetch(`${fleet.url}/runs`, json({ input: 'A table for two', runId }));
      expect([started.status, await started.json()]).toEqual([201, { runId }]);
      const seen: AgentEvent[] = [];
      const frames = await readFrames(await fetch(`${fleet.url}/runs/${encodeURIComponent(runId)}/events`), (frame) => {
        seen.push(frame.data);
        if (frame.data.type === 'permission-request') {
          void fetch(
            `${fleet.url}/runs/${encodeURIComponent(runId)}/responses`,
            json({ type: 'permission-response', requestId: frame.data.requestId, approved: true }),
          );
        }
        return false;
      });
      expect(frames.map((frame) => label(frame.data)).at(-1)).toBe('run-end:completed');
      // The same POST again (a client whose connection was cut) is the same job: no second run.
      expect((await fetch(`${fleet.url}/runs`, json({ input: 'A table for two', runId }))).status).toBe(201);
      expect(await client.hgetall(executionsKey(name))).toMatchObject({ [`${runId}/book-1`]: '1' });
      expect(seen.filter((event) => event.type === 'run-start')).toHaveLength(1);
    }
  }, 30_000);
});

describe("runsHandler with 'start' on a BullMQ queue, and a run that suspends for its answer", () => {
  it("puts the run's resume on the queue: the answer taken through HTTP is acted on by a worker, not by the HTTP process", async () => {
    const store = redisStore({ client: connection, prefix });
    const bookedByHttp: string[] = [];
    const bookedByWorker: string[] = [];
    const workerAgent = bookingAgent(store, { onRequest: 'suspend', booked: bookedByWorker, delayMs: 1 });
    const { queue, events: queueEvents } = queueFor(workerAgent);
    const httpAgent = bookingAgent(store, { onRequest: 'suspend', booked: bookedByHttp, delayMs: 1 });
    const server = await serveRuns(
      runsHandler(httpAgent, {
        start: async (input, { runId, sessionId }) => {
          await queue.add('run', { runId, input: input as string, sessionId }, { jobId: jobIdOf(runId) });
          while (!(await httpAgent.runs.get(runId))) await new Promise((resolve) => setTimeout(resolve, 5));
        },
        resume: async (runId, { seq }) => void (await queue.add('resume', { runId, resume: true }, { jobId: jobIdOf(runId, seq) })),
      }),
    );
    closers.push(() => server.close());

    const started = await fetch(`${server.url}/runs`, json({ input: 'book a table' }));
    const { runId } = (await started.json()) as { runId: string };
    const reading = readFrames(await fetch(`${server.url}/runs/${runId}/events`));
    let suspendedAt = 0;
    for (;;) {
      const info = await httpAgent.runs.get(runId);
      if (info?.status === 'suspended') {
        suspendedAt = info.seq;
        expect(info.pendingRequests).toHaveLength(1);
        const answered = await fetch(
          `${server.url}/runs/${runId}/responses`,
          json({ type: 'permission-response', requestId: info.pendingRequests[0].requestId, approved: true }),
        );
        expect([answered.status, await answered.json()]).toEqual([200, { accepted: true }]);
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const events = (await reading).map((frame) => frame.data);
    expect(events.map(label).slice(-3)).toEqual(['text:Booked for 2.', 'iteration-end', 'run-end:completed']);
    expect(events.filter((event) => event.type === 'run-end').map((event) => event.type === 'run-end' && event.reason)).toEqual(['suspended', 'completed']);
    // The booking was made by the worker's agent; the HTTP process only took the answer.
    expect([bookedByHttp, bookedByWorker]).toEqual([[], ['table for 2']]);
    // Two jobs: the start, which ended at the suspension, and the resume, which ended the run.
    const first = await queue.getJob(jobIdOf(runId));
    const second = await queue.getJob(jobIdOf(runId, suspendedAt));
    expect([await first?.getState(), first?.returnvalue?.reason]).toEqual(['completed', 'suspended']);
    // The run's end is in the store before its job is finished: wait for the job.
    expect(await second?.waitUntilFinished(queueEvents)).toEqual({ reason: 'completed', text: 'The answer: Booked for 2.' });
    expect(await second?.getState()).toBe('completed');
    expect(await httpAgent.runs.get(runId)).toMatchObject({ status: 'finished', reason: 'completed' });
  }, 30_000);
});
