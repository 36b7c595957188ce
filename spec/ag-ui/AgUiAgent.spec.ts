import { EventType, type BaseEvent } from '@ag-ui/client';
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
});
