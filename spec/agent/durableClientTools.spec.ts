import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineClientTool, defineTool, memoryStore, type AgentEvent } from '../../src/index';
import { readResumePoint } from '../../src/journal/resumePoint';
import { eventsOfType, scriptedModel } from '../../src/testing/index';

// A journaled run keeps the specs of its own client tools in its start record: resumed in another
// process (another agent object over the same store), it offers them to the model again.

const pickColor = defineClientTool({
  name: 'pick_color',
  description: 'Asks the user to pick a color',
  parameters: { type: 'object', properties: { palette: { type: 'string' } }, required: ['palette'] },
});

/** A tool that never ends the first time it runs (the process stops there), and tells when it started. */
function slowTool() {
  let calls = 0;
  let started = () => undefined as void;
  const startedOnce = new Promise<void>((resolve) => (started = resolve));
  const tool = defineTool({
    name: 'slow',
    description: 'Never ends the first time',
    parameters: z.object({}),
    idempotent: true,
    execute: () => {
      started();
      return calls++ === 0 ? new Promise<string>(() => undefined) : 'done';
    },
  });
  return { tool, startedOnce };
}

describe('a journaled run given client tools', () => {
  it('resumed after an interruption, still offers them, and leaves their calls to the client', async () => {
    const store = memoryStore();
    const { tool, startedOnce } = slowTool();
    const first = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'slow', args: {}, callId: 's1' }] }]), tools: [tool], store });
    const live = first.run('Pick', { runId: 'r1', tools: [pickColor] }).subscribe();
    await startedOnce;
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
    const gate = { held: true, reached: () => undefined as void };
    const reached = new Promise<void>((resolve) => (gate.reached = resolve));
    const { NEVER, of, switchMap } = await import('rxjs');
    const middleware = [
      {
        name: 'gate',
        beforeMessageTurn: switchMap(<T>(ctx: T) => {
          gate.reached();
          return gate.held ? NEVER : of(ctx);
        }),
      },
    ];
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'cool' }, callId: 'c1' }] }]);
    const agent = createAgent({ model, middleware, store });
    const live = agent.run('Pick', { runId: 'r2', tools: [pickColor] }).subscribe();
    await reached;
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
    const { tool, startedOnce } = slowTool();
    const first = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'slow', args: {}, callId: 's1' }] }]), tools: [tool], store });
    const live = first.run('Pick', { runId: 'r1', tools: [pickColor] }).subscribe();
    await startedOnce;
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
