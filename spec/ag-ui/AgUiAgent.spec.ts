import { EventType, type BaseEvent } from '@ag-ui/client';
import { Observable } from 'rxjs';
import { createAgent, type ModelUpdate } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';
import { AgUiAgent } from '../../src/ag-ui/index';
import { bookingAgent, schemaFailures } from './agUiKit';

describe('AgUiAgent', () => {
  it('runs an rx-agent agent in process as an AG-UI agent: the conversation, the interrupt and its resume', async () => {
    const { agent, booked } = bookingAgent();
    const ui = new AgUiAgent(agent, { threadId: 'local' });
    expect(ui.description).toBe('booker');
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    const seen: BaseEvent[] = [];
    const onEvent = ({ event }: { event: BaseEvent }) => void seen.push(event);

    await ui.runAgent({ runId: 'one' }, { onEvent });
    expect(ui.pendingInterrupts.map((i) => i.toolCallId)).toEqual(['c1']);
    const result = await ui.runAgent({ runId: 'two', resume: [{ interruptId: ui.pendingInterrupts[0].id, status: 'resolved', payload: true }] }, { onEvent });
    expect(schemaFailures(seen)).toEqual([]);
    expect(booked).toEqual(['19:00']);
    expect(ui.pendingInterrupts).toEqual([]);
    expect(result.newMessages.map((m) => [m.role, m.content])).toEqual([
      ['tool', '{"booked":"19:00"}'],
      ['assistant', 'Booked for 19:00.'],
    ]);
    expect(seen.filter((e) => e.type === EventType.RUN_STARTED).map((e) => (e as unknown as { threadId: string }).threadId)).toEqual(['local', 'local']);
  });

  it('passes runOptions to each new run, and refuses what is not an agent', async () => {
    const { agent } = bookingAgent();
    const asked: string[] = [];
    const ui = new AgUiAgent(agent, { runOptions: (input) => (asked.push(input.runId), {}) });
    ui.messages.push({ id: 'u1', role: 'user', content: 'hi' });
    await ui.runAgent({ runId: 'x' });
    await ui.runAgent({ runId: 'y', resume: [{ interruptId: ui.pendingInterrupts[0].id, status: 'cancelled' }] });
    expect(asked).toEqual(['x']); // a resume continues the run it answers
    expect(() => new AgUiAgent(undefined as never)).toThrow('AgUiAgent: expected an agent (createAgent(...))');
  });

  it("onError says what the client is told of an error (a CopilotKit runtime forwards the events to the browser); AbstractAgent's own onError stays", async () => {
    const agent = createAgent({ model: scriptedModel([{ error: new Error('connect ECONNREFUSED 10.0.0.3') }]) });
    const ui = new AgUiAgent(agent, { onError: () => 'The assistant is unavailable' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'hi' });
    const seen: BaseEvent[] = [];
    await ui.runAgent({ runId: 'x' }, { onEvent: ({ event }) => void seen.push(event) });
    expect(schemaFailures(seen)).toEqual([]);
    expect(JSON.stringify(seen)).not.toContain('10.0.0.3');
    expect(seen.at(-1)).toEqual({ type: 'RUN_ERROR', message: 'The assistant is unavailable', code: 'Error' });
    expect(typeof Reflect.get(ui, 'onError')).toBe('function'); // the config's onError is not AbstractAgent's method
  });

  it("abortRun() cancels the run streaming, as HttpAgent's does (AbstractAgent's own does nothing); a clone runs and aborts the same", async () => {
    let modelCalls = 0;
    let tornDown = 0;
    // A model that says one word, then never ends; its call's teardown is the run's cancellation.
    const model = () =>
      new Observable<ModelUpdate>((subscriber) => {
        modelCalls++;
        subscriber.next({ type: 'text-delta', text: 'Thinking' });
        return () => tornDown++;
      });
    const original = new AgUiAgent(createAgent({ model }));
    for (const ui of [original, original.clone()]) {
      expect(ui).toBeInstanceOf(AgUiAgent);
      ui.messages.push({ id: `u${modelCalls}`, role: 'user', content: 'hi' });
      const settled = ui.runAgent({}, { onTextMessageContentEvent: () => void ui.abortRun() }).then(() => 'resolved');
      const late = new Promise((resolve) => setTimeout(() => resolve('still running'), 1000));
      const outcome = await Promise.race([settled, late]);
      if (outcome !== 'resolved') await ui.detachActiveRun();
      expect(outcome).toBe('resolved');
      expect(ui.messages.at(-1)).toMatchObject({ role: 'assistant', content: 'Thinking' });
    }
    expect([modelCalls, tornDown]).toEqual([2, 2]);
  });

  it('abortRun() right after runAgent(), before the run streams, still cancels it (a new controller per runAgent)', async () => {
    let modelCalls = 0;
    const model = () =>
      new Observable<ModelUpdate>(() => {
        modelCalls++; // never answers nor ends
      });
    const ui = new AgUiAgent(createAgent({ model }));
    ui.messages.push({ id: 'u1', role: 'user', content: 'hi' });
    const settled = ui.runAgent().then(() => 'resolved');
    ui.abortRun(); // runAgent() is still in its setup step: nothing is subscribed yet
    const late = new Promise((resolve) => setTimeout(() => resolve('still running'), 1000));
    const outcome = await Promise.race([settled, late]);
    if (outcome !== 'resolved') await ui.detachActiveRun();
    expect(outcome).toBe('resolved');
    expect(modelCalls).toBe(0);
    // The next runAgent() has a controller of its own: it runs.
    const next = createAgent({ model: scriptedModel(['Hello']) });
    const again = new AgUiAgent(next);
    again.abortRun();
    again.messages.push({ id: 'u2', role: 'user', content: 'hi' });
    await again.runAgent();
    expect(again.messages.at(-1)).toMatchObject({ role: 'assistant', content: 'Hello' });
  });
});
