// The specs of durable runs across real processes, run by each store's spec file against its
// server: child Node processes run (or are killed running) a run; the spec's process resumes,
// answers, cancels and reads it through a store of its own on the same server.
import { rmSync } from 'node:fs';
import { filter, firstValueFrom, lastValueFrom, toArray, type Observable } from 'rxjs';
import { recordEvents, type Agent, type AgentEvent, type AgentStore, type JournalRecord, type Message } from '../../src/index';
import type { ScriptedModel } from '../../src/testing/index';
import { bundleWorker, Child } from './children';
import { TOOL_STARTED, toolResultsRead, unpairedToolCalls, type DurableAgentOptions } from './durableRuns';

const INTERRUPTED = "Tool 'pay' was interrupted; its outcome is unknown.";
/** Short, so that a killed child's lease lapses quickly; long enough not to lapse in a busy child. */
const LEASE_MS = 3_000;

/** What the specs need of a store's server; `setup()` runs before any other member is used. */
export interface CrossProcessServer {
  /** The child process's source: a worker running the durable agent on this server. */
  readonly worker: string;
  /** Connects, and makes what the file's runs are kept in (a key prefix, a schema). */
  setup(): Promise<void>;
  /** Removes what `setup()` made and closes every connection. */
  teardown(): Promise<void>;
  /** What a child needs to reach the store (its URL, prefix or schema). */
  childOptions(): Record<string, unknown>;
  /** An agent of this process on the server, with a store of its own, as another process has. */
  agent(options: Omit<DurableAgentOptions, 'store' | 'countExecution'>): { agent: Agent; model: ScriptedModel };
  /** A store to read journals, sessions and leases with. */
  store(): AgentStore;
  /** How many times the run executed `tool`, in every process. */
  executed(runId: string, tool: string): Promise<number>;
}

/** Describes durable runs across processes on `server`. */
export function describeCrossProcess(server: CrossProcessServer): void {
  let bundle: string;
  const children: Child[] = [];

  beforeAll(async () => {
    await server.setup();
    bundle = await bundleWorker(server.worker);
  }, 60_000);

  afterEach(async () => {
    // A failed spec leaves no child behind.
    for (const child of children.splice(0)) await child.kill().catch(() => undefined);
  });

  afterAll(async () => {
    await server.teardown();
    rmSync(bundle, { force: true });
  });

  function start(options: Record<string, unknown>): Child {
    const child = new Child(bundle, { ...server.childOptions(), leaseMs: LEASE_MS, mode: 'hang-first', input: 'Go', ...options });
    children.push(child);
    return child;
  }

  const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** The journal's records, as stored. */
  async function journal(runId: string): Promise<JournalRecord[]> {
    return ((await server.store().read(runId)) ?? []).map((entry) => entry.record);
  }

  async function sessionMessages(sessionId: string): Promise<readonly Message[]> {
    return (await server.store().load(sessionId))?.messages ?? [];
  }

  /** Waits until the killed process's lease has lapsed (a resume before that is refused). */
  async function leaseLapsed(runId: string): Promise<void> {
    const store = server.store();
    const lease = await store.getLease(runId);
    if (lease) await sleep(Math.max(0, lease.expiresAt - Date.now()) + 20);
    expect(await store.getLease(runId)).toBeUndefined();
  }

  describe('a process killed with SIGKILL while a tool runs, resumed in another', () => {
    it('does not run a non-idempotent tool again: the model reads that it was interrupted; the run completes once; the history is valid', async () => {
      const runId = 'killed-pay';
      const sessionId = 'session-pay';
      const child = start({ runId, sessionId, tool: 'pay' });
      await child.waitFor((line) => line === `${TOOL_STARTED} pay`, 'the tool to start');
      await child.kill();
      expect(await server.executed(runId, 'pay')).toBe(1);

      const { agent, model } = server.agent({ leaseMs: LEASE_MS, tool: 'pay', mode: 'finish' });
      // The dead process's lease has not lapsed yet: one process runs a run.
      const refused = await collect(agent.resume(runId));
      expect(refused.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
      expect(refused[1]).toMatchObject({ type: 'error', error: { name: 'RunBusyError' } });

      await leaseLapsed(runId);
      const events = await collect(agent.resume(runId));
      expect(events[0]).toMatchObject({ type: 'run-start', runId, resumed: true });
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
      expect(events.filter((e) => e.type === 'run-end')).toHaveLength(1);
      expect(events.find((e) => e.type === 'tool-result')).toMatchObject({ name: 'pay', callId: 'call-1', isError: true, result: INTERRUPTED });

      expect(await server.executed(runId, 'pay')).toBe(1); // not run again
      expect(model.calls).toBe(1); // the first answer (the call) came from the journal
      expect(toolResultsRead(model.requests[0])).toEqual([INTERRUPTED]);

      const records = await journal(runId);
      expect(records.filter((r) => r.kind === 'end')).toEqual([expect.objectContaining({ reason: 'completed' })]);
      const seqs = records.flatMap((r) => recordEvents(runId, r).map((e) => e.seq));
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));

      const history = await sessionMessages(sessionId);
      expect(history.length).toBeGreaterThanOrEqual(4); // user, the call, its result, the answer
      expect(unpairedToolCalls(history)).toEqual([]);

      // Finished: nothing to resume, from any process.
      const again = await collect(agent.resume(runId));
      expect(again[1]).toMatchObject({ type: 'error', error: { name: 'RunFinishedError' } });
      expect(await agent.runs.get(runId)).toMatchObject({ status: 'finished', reason: 'completed', sessionId });
    });

    it('runs an idempotent tool once more, and the model reads its result', async () => {
      const runId = 'killed-lookup';
      const sessionId = 'session-lookup';
      const child = start({ runId, sessionId, tool: 'lookup' });
      await child.waitFor((line) => line === `${TOOL_STARTED} lookup`, 'the tool to start');
      await child.kill();
      await leaseLapsed(runId);

      const { agent, model } = server.agent({ leaseMs: LEASE_MS, tool: 'lookup', mode: 'finish' });
      const events = await collect(agent.resume(runId));
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
      expect(events.find((e) => e.type === 'tool-result')).toMatchObject({ name: 'lookup', isError: false, result: { amount: 42, execution: 2 } });
      expect(await server.executed(runId, 'lookup')).toBe(2); // re-run once
      expect(toolResultsRead(model.requests[0])).toEqual([JSON.stringify({ amount: 42, execution: 2 })]);
      expect((await journal(runId)).filter((r) => r.kind === 'end')).toHaveLength(1);
      expect(unpairedToolCalls(await sessionMessages(sessionId))).toEqual([]);
    });

    it('a second process resumes once: of two resumes at the same time, one is refused with RunBusyError', async () => {
      const runId = 'killed-twice';
      const child = start({ runId, sessionId: 'session-twice', tool: 'pay' });
      await child.waitFor((line) => line.startsWith(TOOL_STARTED), 'the tool to start');
      await child.kill();
      await leaseLapsed(runId);
      const resumers = [
        start({ runId, sessionId: 'session-twice', tool: 'pay', mode: 'finish', resume: true }),
        start({ runId, sessionId: 'session-twice', tool: 'pay', mode: 'finish', resume: true }),
      ];
      await Promise.all(resumers.map((c) => c.done()));
      const ends = resumers.map((c) => c.events.at(-1) as Extract<AgentEvent, { type: 'run-end' }>);
      expect(ends.map((e) => e.reason).sort()).toEqual(['completed', 'error']);
      const refused = resumers[ends.findIndex((e) => e.reason === 'error')];
      expect(refused.events.find((e) => e.type === 'error')).toMatchObject({ error: { name: expect.stringMatching(/RunBusyError|RunFinishedError/) } });
      expect((await journal(runId)).filter((r) => r.kind === 'end')).toHaveLength(1);
      expect(await server.executed(runId, 'pay')).toBe(1);
    });
  });

  describe('a live run in process A, reached from process B', () => {
    it('takes an answer given in B', async () => {
      const runId = 'answered';
      const child = start({ runId, sessionId: 'session-answered', tool: 'book', mode: 'finish', permissions: true });
      const request = await child.event('permission-request');
      const { agent } = server.agent({ leaseMs: LEASE_MS, tool: 'book', mode: 'finish' });
      // Once the request is in the journal (its event is written with it), B sees the run wait for it.
      await firstValueFrom(agent.events(runId).pipe(filter((e) => e.type === 'permission-request')));
      expect(await agent.runs.get(runId)).toMatchObject({ pendingRequests: [expect.objectContaining({ requestId: request.requestId })] });
      expect(await agent.respond(runId, { type: 'permission-response', requestId: request.requestId, approved: true })).toBe(true);
      expect(await agent.respond(runId, { type: 'permission-response', requestId: request.requestId, approved: false })).toBe(false); // the first wins
      await child.done();
      expect(child.events.find((e) => e.type === 'tool-result')).toMatchObject({ name: 'book', isError: false, result: { booked: true, execution: 1 } });
      expect(child.events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
    });

    it('suspended in A (which exits), answered in B, resumed in C: the run completes there', async () => {
      const runId = 'suspended';
      const sessionId = 'session-suspended';
      const a = start({ runId, sessionId, tool: 'book', mode: 'finish', permissions: true, onRequest: 'suspend' });
      await a.done();
      expect(a.events.at(-1)).toMatchObject({
        type: 'run-end',
        reason: 'suspended',
        pendingRequests: [expect.objectContaining({ type: 'permission-request' })],
      });
      const { requestId } = (a.events.at(-1) as Extract<AgentEvent, { type: 'run-end' }>).pendingRequests?.[0] as { requestId: string };
      const { agent } = server.agent({ leaseMs: LEASE_MS, tool: 'book', mode: 'finish' });
      expect(await agent.runs.get(runId)).toMatchObject({ status: 'suspended', lease: undefined });
      expect(await agent.respond(runId, { type: 'permission-response', requestId, approved: true })).toBe(true);
      const c = start({ runId, sessionId, tool: 'book', mode: 'finish', permissions: true, resume: true });
      await c.done();
      expect(c.events[0]).toMatchObject({ type: 'run-start', resumed: true });
      expect(c.events.find((e) => e.type === 'tool-result')).toMatchObject({ name: 'book', isError: false, result: { booked: true, execution: 1 } });
      expect(c.events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
      expect(await server.executed(runId, 'book')).toBe(1);
      expect(unpairedToolCalls(await sessionMessages(sessionId))).toEqual([]);
    });

    it('stops when B cancels it', async () => {
      const runId = 'cancelled';
      const sessionId = 'session-cancelled';
      const child = start({ runId, sessionId, tool: 'pay', mode: 'finish', finalDeltas: 1000, deltaDelayMs: 20 });
      await child.event('text-delta');
      const { agent } = server.agent({ leaseMs: LEASE_MS, tool: 'pay', mode: 'finish' });
      expect(await agent.cancel(runId)).toBe(true);
      await child.done();
      expect(child.events.at(-1)).toMatchObject({ type: 'run-end', reason: 'cancelled' });
      expect(child.events.filter((e) => e.type === 'text-delta').length).toBeLessThan(1000);
      expect((await journal(runId)).filter((r) => r.kind === 'end')).toEqual([expect.objectContaining({ reason: 'cancelled' })]);
      expect(unpairedToolCalls(await sessionMessages(sessionId))).toEqual([]);
      expect(await agent.cancel(runId)).toBe(false); // finished
    });

    it('streams to B through events(runId, { after }) what it streams itself, live and replayed', async () => {
      const runId = 'followed';
      const child = start({ runId, sessionId: 'session-followed', tool: 'pay', mode: 'finish', finalDeltas: 60, deltaDelayMs: 5 });
      const { agent } = server.agent({ leaseMs: LEASE_MS, tool: 'pay', mode: 'finish' });
      const first = await child.event('tool-call');
      const live = collect(agent.events(runId, { after: 0 })); // joins while A runs
      await child.done();
      const streamed = child.events;
      expect(streamed.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
      expect(await live).toEqual(streamed);
      expect(await collect(agent.events(runId))).toEqual(streamed);
      const after = (first as { seq: number }).seq;
      expect(await collect(agent.events(runId, { after }))).toEqual(streamed.filter((e) => (e as { seq: number }).seq > after));
    });
  });
}
