import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineState, mapContext, memoryStore, type AgentEvent, type AgentMiddleware, type MemoryStore } from '../../src/index';
import { eventsOfType, scriptedModel } from '../../src/testing/index';
import { hangingFirstTool, turnGate } from '../support/durableGate';

// A journaled run keeps its starting state (`run(input, { state })`) in its start record: a
// resume before its first checkpoint starts from it again.

const Cart = defineState({
  key: 'shop.cart',
  schema: z.object({ items: z.number(), owner: z.string().transform((name) => name.toUpperCase()) }),
  initial: () => ({ items: 0, owner: 'NOBODY' }),
  shared: true,
});
const Prefs = defineState({ key: 'ui.prefs', schema: z.object({ theme: z.string() }), initial: () => ({ theme: 'light' }), scope: 'session', shared: true });
const Total = defineState({ key: 'shop.total', schema: z.bigint(), initial: () => 0n, shared: true });

/** Tells the model the shared state (as its instructions). */
const shop: AgentMiddleware = {
  name: 'shop',
  state: [Cart, Prefs, Total],
  beforeIteration: mapContext((ctx) => ctx.with({ instructions: `cart ${JSON.stringify(ctx.state(Cart))}, prefs ${JSON.stringify(ctx.state(Prefs))}` })),
};

const modelSays = () => scriptedModel([(request) => `I see ${request.instructions}`], { loop: true });
const runEnd = (events: AgentEvent[]) => eventsOfType(events, 'run-end')[0];

describe('a journaled run given a starting state', () => {
  let store: MemoryStore;
  beforeEach(() => {
    store = memoryStore();
  });

  it('resumed after an interruption before its first checkpoint, starts from the same values', async () => {
    const gate = turnGate();
    const agent = createAgent({ model: modelSays(), middleware: [shop, gate.middleware], store });
    const live = agent
      .run('hi', { runId: 'r1', sessionId: 's1', state: { 'shop.cart': { items: 2, owner: 'ada' }, 'ui.prefs': { theme: 'dark' } } })
      .subscribe();
    await gate.reached;
    live.unsubscribe(); // the process stops in beforeMessageTurn
    expect((await agent.runs.get('r1'))?.status).toBe('interrupted');
    const kinds = (store.read('r1') ?? []).map((entry) => entry.record.kind);
    expect(kinds).not.toContain('checkpoint');

    gate.held = false;
    const events = await lastValueFrom(agent.resume('r1').pipe(toArray()));
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'I see cart {"items":2,"owner":"ADA"}, prefs {"theme":"dark"}' });
    // The session-scoped value is saved with the turn, by the resumed run.
    expect(store.load('s1')?.state['ui.prefs']).toEqual({ version: 1, value: { theme: 'dark' } });
  });

  it('holds the values in its start record as the schemas parsed them, by scope, as JSON', async () => {
    const gate = turnGate();
    const agent = createAgent({ model: modelSays(), middleware: [shop, gate.middleware], store });
    const live = agent.run('hi', { runId: 'r2', state: { 'shop.cart': { items: 1, owner: 'grace' }, 'ui.prefs': { theme: 'dark' } } }).subscribe();
    await gate.reached;
    const start = store.read('r2')?.[0].record;
    live.unsubscribe();
    expect(start).toMatchObject({
      kind: 'start',
      state: { run: { 'shop.cart': { version: 1, value: { items: 1, owner: 'GRACE' } } }, session: { 'ui.prefs': { version: 1, value: { theme: 'dark' } } } },
    });
    expect(JSON.parse(JSON.stringify(start))).toEqual(start);
  });

  it('a run given no state writes no state in its start record (journals read as before)', async () => {
    const gate = turnGate();
    const agent = createAgent({ model: modelSays(), middleware: [shop, gate.middleware], store });
    const live = agent.run('hi', { runId: 'r3' }).subscribe();
    await gate.reached;
    const start = store.read('r3')?.[0].record;
    live.unsubscribe();
    expect(start).toMatchObject({ kind: 'start', runId: 'r3' });
    expect(start).not.toHaveProperty('state');
  });

  it('resumed after its first checkpoint (a tool interrupted), goes on from the values the checkpoint holds', async () => {
    const { tool: slow, started } = hangingFirstTool();
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', args: {}, callId: 'c1' }] }, (request) => `I see ${request.instructions}`]);
    const agent = createAgent({ model, tools: [slow], middleware: [shop], store });
    const live = agent.run('hi', { runId: 'r4', state: { 'shop.cart': { items: 5, owner: 'lin' } } }).subscribe();
    await started;
    live.unsubscribe();
    const events = await lastValueFrom(agent.resume('r4').pipe(toArray()));
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'I see cart {"items":5,"owner":"LIN"}, prefs {"theme":"light"}' });
  });

  it('a starting value JSON cannot hold is refused by the journal: an error naming the key, run-end reason error, nothing journaled', () => {
    const agent = createAgent({ model: modelSays(), middleware: [shop], store });
    const events: AgentEvent[] = [];
    agent.run('hi', { runId: 'r5', state: { 'shop.total': 5n } }).subscribe((event) => events.push(event));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(eventsOfType(events, 'error')[0].error.message).toContain("cannot hold its start record: state 'shop.total' holds a BigInt, which JSON cannot hold");
    expect(runEnd(events).reason).toBe('error');
    expect(store.read('r5')).toBeUndefined();
  });
});
