import { delay, lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore, type AgentEvent, type AgentStore, type Tool } from '../../src/index';
import { describeStoreConformance, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { permissions } from '../../operators/permissions';

/**
 * A memoryStore whose every answer comes later, through a Promise (as a remote store's does), and
 * whose notifications (answers, cancels) arrive later too: the runtime must wait for each write
 * where it matters (a tool's start, the end), keep their order, and not count on a notification
 * replaying at once.
 */
function asyncStore(inner = memoryStore()): AgentStore & { readonly appends: number } {
  let appends = 0;
  const later = <T>(work: () => T) =>
    new Promise<T>((resolve, reject) =>
      setTimeout(() => {
        try {
          resolve(work());
        } catch (error) {
          reject(error);
        }
      }, 1),
    );
  return {
    get appends() {
      return appends;
    },
    append: (runId, expected, records) => later(() => (appends++, inner.append(runId, expected, records))),
    read: (runId, after) => later(() => inner.read(runId, after)),
    follow: (runId, after) => inner.follow(runId, after),
    putAnswer: (runId, response) => later(() => inner.putAnswer(runId, response)),
    answers: (runId) => inner.answers(runId).pipe(delay(5)),
    requestCancel: (runId) => later(() => inner.requestCancel(runId)),
    cancellations: (runId) => inner.cancellations(runId).pipe(delay(5)),
    received: (runId) => later(() => inner.received(runId)),
    acquireLease: (runId, owner, ttl) => later(() => inner.acquireLease(runId, owner, ttl)),
    renewLease: (runId, owner, ttl) => later(() => inner.renewLease(runId, owner, ttl)),
    releaseLease: (runId, owner) => later(() => inner.releaseLease(runId, owner)),
    getLease: (runId) => later(() => inner.getLease(runId)),
    load: (id) => later(() => inner.load(id)),
    revision: (id) => later(() => inner.revision(id)),
    appendTurn: (id, expected, turn) => later(() => inner.appendTurn(id, expected, turn)),
    fork: (parentId, forkId, at) => later(() => inner.fork(parentId, forkId, at)),
    forks: (id) => later(() => inner.forks(id)),
    delete: (id) => later(() => inner.delete(id)),
    acquireSession: (id, owner, ttl) => later(() => inner.acquireSession(id, owner, ttl)),
    renewSession: (id, owner, ttl) => later(() => inner.renewSession(id, owner, ttl)),
    releaseSession: (id, owner) => later(() => inner.releaseSession(id, owner)),
    sessionReleases: (id) => inner.sessionReleases(id),
  };
}

describeStoreConformance('memoryStore answering through Promises', () => asyncStore());

const payCall: ScriptedTurn = { toolCalls: [{ name: 'pay', args: { n: 1 }, callId: 'c1' }] };
const collect = (events$: import('rxjs').Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));

function pay(ran: string[], needsApproval: boolean, settle?: Promise<void>): Tool {
  return defineTool({
    name: 'pay',
    description: 'Pays',
    parameters: z.object({ n: z.number() }),
    needsApproval,
    execute: async ({ n }) => {
      ran.push(`pay ${n}`);
      await settle;
      return `paid ${n}`;
    },
  });
}

describe('durable runs on a store that answers later', () => {
  it('suspends, takes an answer and resumes in another agent, with gap-free seq and bounded writes', async () => {
    const store = asyncStore();
    const ran: string[] = [];
    const a = createAgent({ model: scriptedModel([payCall]), tools: [pay(ran, true)], middleware: [permissions()], store, onRequest: 'suspend' });
    const first = await collect(a.run('pay', { runId: 'r', sessionId: 's' }));
    expect(first.map((e) => [e.seq, e.type])).toEqual([
      [1, 'run-start'],
      [2, 'iteration-start'],
      [3, 'tool-input-start'],
      [4, 'tool-input-delta'],
      [5, 'tool-input-delta'],
      [6, 'tool-call'],
      [7, 'permission-request'],
      [8, 'run-end'],
    ]);
    const b = createAgent({ model: scriptedModel([{ text: ['pa', 'id', '!'] }]), tools: [pay(ran, true)], middleware: [permissions()], store });
    expect(await b.respond('r', { type: 'permission-response', requestId: 'r.0.c1.permission-request', approved: true })).toBe(true);
    const before = store.appends;
    const second = await collect(b.resume('r'));
    expect(second.map((e) => e.seq)).toEqual([9, 10, 11, 12, 13, 14, 15, 16, 17]);
    expect(second.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed', text: 'paid!' }));
    expect(ran).toEqual(['pay 1']);
    // Per iteration a bounded number of appends, whatever the number of deltas: here the tool's
    // outcome and checkpoint, the answer iteration's checkpoint, and the end.
    expect(store.appends - before).toBeLessThanOrEqual(4);
    expect((await store.load('s'))?.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
  });

  it("journals a call's start before the tool runs, so a stop mid-tool is known on resume", async () => {
    const store = asyncStore();
    const ran: string[] = [];
    let release!: () => void;
    const hang = new Promise<void>((resolve) => (release = resolve));
    const a = createAgent({ model: scriptedModel([payCall]), tools: [pay(ran, false, hang)], store });
    const seen: string[] = [];
    await new Promise<void>((resolve) => {
      const sub = a.run('pay', { runId: 'r' }).subscribe((e) => seen.push(e.type));
      const poll = setInterval(() => {
        if (ran.length === 1) {
          clearInterval(poll);
          sub.unsubscribe(); // the process stops while the tool runs
          resolve();
        }
      }, 1);
    });
    release();
    const info = await a.runs.get('r');
    expect(info).toEqual(expect.objectContaining({ status: 'interrupted' }));
    const b = createAgent({ model: scriptedModel(['sorry']), tools: [pay(ran, false)], store });
    const resumed = await collect(b.resume('r'));
    expect(resumed.find((e) => e.type === 'tool-result')).toEqual(
      expect.objectContaining({ result: "Tool 'pay' was interrupted; its outcome is unknown.", isError: true }),
    );
    expect(resumed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed' }));
    expect(ran).toEqual(['pay 1']);
  });

  it('delivers run-end only once the end is stored, and refuses a second resume while one runs', async () => {
    const store = asyncStore();
    const a = createAgent({ model: scriptedModel([payCall, 'ok']), tools: [pay([], true)], middleware: [permissions()], store, onRequest: 'suspend' });
    await collect(a.run('pay', { runId: 'r' }));
    await a.respond('r', { type: 'permission-response', requestId: 'r.0.c1.permission-request', approved: true });
    const b = createAgent({ model: scriptedModel(['ok']), tools: [pay([], true)], middleware: [permissions()], store });
    const [one, two] = await Promise.all([collect(b.resume('r')), collect(b.resume('r'))]);
    const ends = [one, two].map((events) => events.at(-1));
    expect(ends.map((e) => (e as { reason: string }).reason).sort()).toEqual(['completed', 'error']);
    const refused = [one, two].find((events) => events.some((e) => e.type === 'error'));
    expect(refused?.find((e) => e.type === 'error')).toEqual(expect.objectContaining({ error: expect.objectContaining({ name: 'RunBusyError' }) }));
    expect(await b.runs.get('r')).toBeUndefined(); // stored, then dropped (retention 0)
  });

  it('cancels a suspended run from another agent at once, though the cancel is heard late', async () => {
    const store = asyncStore();
    const ran: string[] = [];
    const model = scriptedModel([payCall]);
    const a = createAgent({ model, tools: [pay(ran, true)], middleware: [permissions()], store, onRequest: 'suspend' });
    await collect(a.run('pay', { runId: 'r', sessionId: 's' }));
    const b = createAgent({ model: scriptedModel([]), tools: [pay(ran, true)], middleware: [permissions()], store });
    expect(await b.cancel('r')).toBe(true);
    expect(ran).toEqual([]);
    // The turn is saved as its last checkpoint left it (the interrupted iteration is dropped), and the run is over.
    expect((await store.load('s'))?.messages.map((m) => m.role)).toEqual(['user']);
    expect(await b.runs.get('r')).toBeUndefined();
  });
});
