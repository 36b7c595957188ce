import { z } from 'zod';
import { createAgent, defineTool, mapContext, type AgentMiddleware, type FunctionResultContext } from '../../src/index';
import { collectEvents, eventsOfType, scriptedModel } from '../../src/testing/index';

describe('a tool result JSON cannot hold', () => {
  const cycle: Record<string, unknown> = { name: 'loop' };
  cycle.self = cycle;
  const tool = (name: string, result: unknown) => defineTool({ name, description: name, parameters: z.object({}), execute: () => result });

  it('is an error result saying why, which the model reads; the run goes on', () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'big', args: {} },
          { name: 'cyclic', args: {} },
          { name: 'fine', args: {} },
        ],
      },
      'done',
    ]);
    const agent = createAgent({ model, tools: [tool('big', { n: 10n }), tool('cyclic', cycle), tool('fine', { n: 10 })] });
    const events = collectEvents(agent.run('go'));
    const results = eventsOfType(events, 'tool-result').map(({ name, result, isError }) => ({ name, result, isError }));
    expect(results).toEqual([
      { name: 'big', result: 'The tool result could not be sent: Do not know how to serialize a BigInt', isError: true },
      { name: 'cyclic', result: expect.stringMatching(/^The tool result could not be sent: Converting circular structure to JSON/), isError: true },
      { name: 'fine', result: { n: 10 }, isError: false },
    ]);
    expect(model.requests[1].messages.at(-1)!.content).toEqual(results.map((r) => ({ type: 'tool-result', callId: expect.any(String), ...r })));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
  });

  it('is looked at after afterFunction, which may make it JSON (a BigInt as a string)', () => {
    const asText: AgentMiddleware = {
      name: 'bigint-as-text',
      afterFunction: mapContext((ctx: FunctionResultContext) =>
        ctx.with({ result: JSON.stringify(ctx.result, (_key, v: unknown) => (typeof v === 'bigint' ? String(v) : v)) }),
      ),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'big', args: {} }] }, 'done']);
    const agent = createAgent({ model, tools: [tool('big', { n: 10n })], middleware: [asText] });
    const events = collectEvents(agent.run('go'));
    expect(eventsOfType(events, 'tool-result')[0]).toMatchObject({ result: '{"n":"10"}', isError: false });
  });
});
