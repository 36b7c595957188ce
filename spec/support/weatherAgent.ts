import { z } from 'zod';
import { createAgent, defineTool, type Agent } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';

const weather = defineTool({
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: z.object({ city: z.string() }),
  // A line break in the result: its JSON must travel whole through SSE frames.
  execute: async ({ city }) => ({ city, celsius: 21, note: 'sunny ☀️\nwarm' }),
});

/**
 * An agent that calls `get_weather` for Zürich, then answers in three deltas, the last being
 * `lastDelta`: for specs that carry a whole run across a transport.
 */
export function weatherAgent(lastDelta: string): Agent {
  return createAgent({
    model: scriptedModel([
      { toolCalls: [{ name: 'get_weather', args: { city: 'Zürich' }, callId: 'c1' }], usage: { inputTokens: 10, outputTokens: 5 } },
      { text: ['It is ', '21°C ', lastDelta], usage: { inputTokens: 30, outputTokens: 8 } },
    ]),
    tools: [weather],
  });
}

/** The event labels (rx-agent/testing's `eventLabel`) of a {@link weatherAgent} run. */
export function weatherLabels(lastDelta: string): string[] {
  return [
    'run-start',
    'iteration-start',
    'tool-input-start',
    'tool-input-delta',
    'tool-input-delta',
    'tool-call:get_weather',
    'tool-result:get_weather',
    'iteration-end',
    'iteration-start',
    'text-delta:It is ',
    'text-delta:21°C ',
    `text-delta:${lastDelta}`,
    'iteration-end',
    'run-end:completed',
  ];
}
