import { lastValueFrom, toArray, type Observable } from 'rxjs';
import { z } from 'zod';
import {
  createAgent,
  defineClientTool,
  defineTool,
  JournalFormatError,
  memoryStore,
  type AgentEvent,
  type JournalRecord,
  type MemoryStore,
  type Message,
} from '../../src/index';
import { readResumePoint } from '../../src/journal/resumePoint';
import { eventsOfType, scriptedModel } from '../../src/testing/index';
import { permissions } from '../../operators/permissions';
import { hangingFirstTool, turnGate } from '../support/durableGate';

// A journaled run keeps the specs of its own client tools in its start record: resumed in another
// process (another agent object over the same store), it offers them to the model again. Once it
// ended on their calls, `runs.get()` lists those calls, read from the run-end the journal holds.

const pickColor = defineClientTool({
  name: 'pick_color',
  description: 'Asks the user to pick a color',
  parameters: { type: 'object', properties: { palette: { type: 'string' } }, required: ['palette'] },
});

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const runEnd = (events: AgentEvent[]) => eventsOfType(events, 'run-end').at(-1);

describe('a journaled run given client tools', () => {
  it('resumed after an interruption, still offers them, and leaves their calls to the client', async () => {
    const store = memoryStore();
    const { tool, started } = hangingFirstTool();
    const first = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'slow', args: {}, callId: 's1' }] }]), tools: [tool], store });
    const live = first.run('Pick', { runId: 'r1', tools: [pickColor] }).subscribe();
    await started;
    live.unsubscribe(); // the process stops while the tool runs
    expect((await first.runs.get('r1'))?.status).toBe('interrupted');
    const start = store.read('r1')?.[0].record;
    expect(start).toMatchObject({ kind: 'start', clientTools: [pickColor.spec] });
    expect(JSON.parse(JSON.stringify(start))).toEqual(start);

    // Another process: a new agent over the same store, which knows nothing of the client tool.
    // The first answer is journaled: the resumed run runs the tool again, then calls the model.
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }]);
    const second = createAgent({ model, tools: [tool], store });
    const events: AgentEvent[] = await lastValueFrom(second.resume('r1').pipe(toArray()));
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(['slow', 'pick_color']);
    expect(model.requests[0].tools[1]).toEqual(pickColor.spec);
    expect(eventsOfType(events, 'run-end')[0]).toMatchObject({
      reason: 'completed',
      clientCalls: [{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }],
    });
  });

  it('resumed before its first checkpoint, offers them too', async () => {
    const store = memoryStore();
    const gate = turnGate();
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'cool' }, callId: 'c1' }] }]);
    const agent = createAgent({ model, middleware: [gate.middleware], store });
    const live = agent.run('Pick', { runId: 'r2', tools: [pickColor] }).subscribe();
    await gate.reached;
    live.unsubscribe();
    gate.held = false;
    const events = await lastValueFrom(agent.resume('r2').pipe(toArray()));
    expect(model.requests[0].tools).toEqual([pickColor.spec]);
    expect(eventsOfType(events, 'run-end')[0].clientCalls).toEqual([{ callId: 'c1', name: 'pick_color', args: { palette: 'cool' } }]);
  });

  it('a start record without clientTools (an older journal) reads as before', () => {
    const start = { version: 2, kind: 'start', runId: 'r', agent: 'a', input: [], onRequest: 'wait' } as const;
    expect(readResumePoint('r', [{ position: 1, record: start }]).clientTools).toBeUndefined();
  });

  it('refuses a start record whose clientTools is not a list of specs', () => {
    const start = { version: 2, kind: 'start', runId: 'r', agent: 'a', input: [], onRequest: 'wait' };
    for (const clientTools of [{}, [{ name: 'x' }], [null]]) {
      expect(() => readResumePoint('r', [{ position: 1, record: { ...start, clientTools } as never }])).toThrow(/'clientTools' is not a list/);
    }
  });

  it('is not resumed by an agent that has a tool of that name now: that tool would take the calls', async () => {
    const store = memoryStore();
    const { tool, started } = hangingFirstTool();
    const first = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'slow', args: {}, callId: 's1' }] }]), tools: [tool], store });
    const live = first.run('Pick', { runId: 'r1', tools: [pickColor] }).subscribe();
    await started;
    live.unsubscribe();
    const serverPick = defineTool({ name: 'pick_color', description: 'Picks on the server', parameters: z.object({}), execute: () => 'red' });
    const second = createAgent({ model: scriptedModel(['never']), tools: [tool, serverPick], store });
    const events: AgentEvent[] = await lastValueFrom(second.resume('r1').pipe(toArray()));
    expect(eventsOfType(events, 'error')[0].error.message).toBe(
      "run: 'tools' has a tool named 'pick_color', as the agent (or one of its middleware) has already",
    );
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });
});

describe('runs.get of a journaled run that ended on client calls', () => {
  // Kept after its end (memoryStore() drops a finished run at once), as for a UI that comes back later.
  let store: MemoryStore;
  beforeEach(() => {
    store = memoryStore({ retainMs: 60_000 });
  });

  it('lists the calls as run-end did, in another process; the run that answers them lists none', async () => {
    const calls = [
      { name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' },
      { name: 'pick_color', args: { palette: 'cool' }, callId: 'c2' },
    ];
    const agent = createAgent({ model: scriptedModel([{ toolCalls: calls }, 'Teal it is.']), tools: [pickColor], store });
    const end = runEnd(await collect(agent.run('Pick two', { runId: 'r1', sessionId: 's1' })));
    expect(end?.clientCalls).toEqual(calls.map(({ callId, name, args }) => ({ callId, name, args })));

    // Another process: an agent over the same store, which knows nothing of the run or its tools.
    const other = createAgent({ model: scriptedModel([]), store });
    expect(await other.runs.get('r1')).toEqual({
      runId: 'r1',
      status: 'finished',
      sessionId: 's1',
      seq: end?.seq,
      pendingRequests: [],
      lease: undefined,
      reason: 'completed',
      clientCalls: end?.clientCalls,
    });

    // The client answers them with the next run's input: that run ends on a text, and lists no calls.
    const results: Message = {
      role: 'tool',
      content: (end?.clientCalls ?? []).map(({ callId, name }) => ({ type: 'tool-result', callId, name, result: 'teal' })),
    };
    expect(runEnd(await collect(agent.run(results, { runId: 'r2', sessionId: 's1' })))).toMatchObject({ reason: 'completed', text: 'Teal it is.' });
    const next = await other.runs.get('r2');
    expect(next).toMatchObject({ status: 'finished', reason: 'completed' });
    expect(next).not.toHaveProperty('clientCalls');
    expect((await other.runs.get('r1'))?.clientCalls).toEqual(end?.clientCalls);
  });

  it('suspended and resumed, lists none while it waits, then the calls of its final run-end', async () => {
    const pay = defineTool({ name: 'pay', description: 'Pays', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const model = scriptedModel([
      { toolCalls: [{ name: 'pay', args: {}, callId: 'p1' }] },
      { toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] },
    ]);
    const agent = createAgent({ model, tools: [pay, pickColor], middleware: [permissions()], store, onRequest: 'suspend' });
    const first = await collect(agent.run('Pay, then pick', { runId: 'r3' }));
    expect(runEnd(first)?.reason).toBe('suspended');
    const waiting = await agent.runs.get('r3');
    expect(waiting).toMatchObject({ status: 'suspended' });
    expect(waiting).not.toHaveProperty('clientCalls');

    const requestId = eventsOfType(first, 'permission-request')[0].requestId;
    expect(await agent.respond('r3', { type: 'permission-response', requestId, approved: true })).toBe(true);
    const end = runEnd(await collect(agent.resume('r3')));
    expect(end).toMatchObject({ reason: 'completed', clientCalls: [{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }] });
    // The journal holds both ends: the suspension's, without calls, and the last one.
    const ends = (store.read('r3') ?? []).filter(({ record }) => record.kind === 'event' && record.event.type === 'run-end');
    expect(ends).toHaveLength(2);
    expect(await agent.runs.get('r3')).toMatchObject({ status: 'finished', reason: 'completed', seq: end?.seq, clientCalls: end?.clientCalls });
  });

  it("refuses a journal whose run-end holds 'clientCalls' that are not calls, naming the entry", async () => {
    const journal = (runId: string, clientCalls: unknown): JournalRecord[] => [
      { version: 1, kind: 'start', runId, agent: 'agent', input: [], onRequest: 'wait' },
      { version: 1, kind: 'event', event: { type: 'run-start', runId, seq: 1 } },
      {
        version: 1,
        kind: 'event',
        event: { type: 'run-end', runId, reason: 'completed', text: '', usage: { inputTokens: 0, outputTokens: 0 }, clientCalls, seq: 2 } as never,
      },
      { version: 1, kind: 'end', reason: 'completed' },
    ];
    const agent = createAgent({ model: scriptedModel([]), store });
    for (const [i, clientCalls] of [{}, 'c1', [null], [{ name: 'pick_color', args: {} }], [{ callId: 'c1', name: 7 }]].entries()) {
      const runId = `bad-${i}`;
      store.append(runId, 0, journal(runId, clientCalls));
      const looked = agent.runs.get(runId);
      await expect(looked).rejects.toThrow(JournalFormatError);
      await expect(looked).rejects.toThrow(`Run '${runId}', journal entry 3: a run-end event whose 'clientCalls' is not a list of { callId, name, args }`);
    }
    // Well-formed, as a journal of another writer may hold them: listed as they are.
    store.append('good', 0, journal('good', [{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }]));
    expect((await agent.runs.get('good'))?.clientCalls).toEqual([{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }]);
  });
});
