import OpenAI from 'openai';
import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, textMessage, type ModelRequest } from '../../src/index';
import { openAIChat, type OpenAIChatOptions } from '../../src/openai/openAIChat';
import { eventLabel } from '../../src/testing/index';
import type { FakeOpenAITurn } from '../../src/testing/openAIServer';
import { collect, fakeOpenAIServers, getWeather, Weather, weatherSchema } from './fixtures/structuredOutput';

const start = fakeOpenAIServers();

async function setup(script: FakeOpenAITurn[], options: Partial<OpenAIChatOptions> = {}) {
  const { server, client } = await start(script);
  return { server, model: openAIChat({ client, model: 'gpt-test', ...options }) };
}

describe('openAIChat structured output as response_format (the default)', () => {
  it('sends the schema as a strict json_schema response format and the run parses the answer', async () => {
    const { server, model } = await setup([{ text: ['{"city":"Paris",', '"celsius":21}'] }]);
    const result = await createAgent({ model, output: Weather }).invoke('Weather in Paris?');
    expect(result.output).toEqual({ city: 'Paris', celsius: 21 });
    const body = server.requests[0];
    expect(body.response_format).toEqual({
      type: 'json_schema',
      json_schema: { name: 'final_answer', description: 'The weather in a city', schema: weatherSchema, strict: true },
    });
    expect(body).not.toHaveProperty('structuredOutputs');
    expect(body).not.toHaveProperty('tools');
  });

  it('a schema with an optional field is sent with strict: false', async () => {
    const { server, model } = await setup([{ text: '{"city":"Paris"}' }]);
    const result = await createAgent({ model, output: z.object({ city: z.string(), celsius: z.number().optional() }) }).invoke('x');
    expect(result.output).toEqual({ city: 'Paris' });
    expect(server.requests[0].response_format).toMatchObject({ json_schema: { strict: false, schema: { required: ['city'], additionalProperties: false } } });
  });

  it('an answer that fails goes back over HTTP as a user message naming the issues', async () => {
    const { server, model } = await setup([{ text: '{"city":"Paris"}' }, { text: '{"city":"Paris","celsius":21}' }]);
    const result = await createAgent({ model, output: Weather }).invoke('x');
    expect(result.output).toEqual({ city: 'Paris', celsius: 21 });
    expect(server.requests[1].messages?.slice(-2)).toEqual([
      { role: 'assistant', content: '{"city":"Paris"}' },
      {
        role: 'user',
        content:
          'Invalid output: ✖ Invalid input: expected number, received undefined;   → at celsius. Answer again with only the JSON that fits the output schema.',
      },
    ]);
  });

  it('a request without output has no response_format', async () => {
    const { server, model } = await setup([{ text: 'Hi' }]);
    await createAgent({ model }).invoke('x');
    expect(server.requests[0]).not.toHaveProperty('response_format');
  });
});

describe("openAIChat structured output as a tool (structuredOutputs: 'tool')", () => {
  it('without other tools, forces the output tool; its streamed arguments are the answer, not a call to run', async () => {
    const { server, model } = await setup([{ toolCalls: [{ id: 'call_out', name: 'final_answer', args: { city: 'Paris', celsius: 21 }, chunks: 3 }] }], {
      structuredOutputs: 'tool',
    });
    const events = await collect(createAgent({ model, output: Weather }).run('x'));
    expect(server.requests[0].tools).toEqual([
      { type: 'function', function: { name: 'final_answer', description: 'The weather in a city', parameters: weatherSchema, strict: true } },
    ]);
    expect(server.requests[0].tool_choice).toEqual({ type: 'function', function: { name: 'final_answer' } });
    expect(server.requests[0]).not.toHaveProperty('response_format');
    const labels = events.map(eventLabel);
    expect(labels.filter((l) => l.startsWith('tool'))).toEqual([]);
    expect(
      events
        .filter((e) => e.type === 'text-delta')
        .map((e) => (e as { text: string }).text)
        .join(''),
    ).toBe('{"city":"Paris","celsius":21}');
    expect(labels.some((l) => l.startsWith('output-delta'))).toBe(true);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', output: { city: 'Paris', celsius: 21 } });
  });

  it("with other tools, asks for tool_choice 'required' so the model calls them first, then the output tool", async () => {
    const { server, model } = await setup(
      [
        { toolCalls: [{ id: 'call_w', name: 'get_weather', args: { city: 'Paris' } }] },
        { toolCalls: [{ id: 'call_out', name: 'final_answer', args: '{"city":"Paris","celsius":21}' }] },
      ],
      { structuredOutputs: 'tool' },
    );
    const result = await createAgent({ model, tools: [getWeather], output: Weather }).invoke('x');
    expect(result.output).toEqual({ city: 'Paris', celsius: 21 });
    for (const body of server.requests) {
      expect((body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name)).toEqual(['get_weather', 'final_answer']);
      expect(body.tool_choice).toBe('required');
    }
    // The history the second request carries: the weather call and its result.
    expect(server.requests[1].messages?.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(result.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(result.messages[3].content).toEqual([{ type: 'text', text: '{"city":"Paris","celsius":21}' }]);
  });

  it('maps the updates: the output call becomes text, a tool-calls finish becomes stop; other calls pass', async () => {
    const { model } = await setup(
      [
        { toolCalls: [{ id: 'call_out', name: 'final_answer', args: '{"a":1}', chunks: 2 }] },
        {
          toolCalls: [
            { id: 'call_w', name: 'get_weather', args: { city: 'Paris' }, chunks: 1 },
            { id: 'call_out', name: 'final_answer', args: '{}', chunks: 1 },
          ],
        },
      ],
      { structuredOutputs: 'tool' },
    );
    const request: ModelRequest = {
      messages: [textMessage('user', 'x')],
      tools: [getWeather.spec],
      settings: {},
      output: { name: 'final_answer', schema: { type: 'object' }, strict: false },
    };
    const first = await lastValueFrom(model(request).pipe(toArray()));
    expect(first.filter((u) => u.type !== 'usage')).toEqual([
      { type: 'text-delta', text: '{"a"' },
      { type: 'text-delta', text: ':1}' },
      { type: 'finish', reason: 'stop', model: 'gpt-test' },
    ]);
    const second = await lastValueFrom(model(request).pipe(toArray()));
    expect(second.filter((u) => u.type === 'tool-call-delta').map((u) => (u as { name?: string }).name)).toEqual(['get_weather', undefined]);
    expect(second.filter((u) => u.type === 'text-delta')).toEqual([{ type: 'text-delta', text: '{}' }]);
    expect(second.at(-1)).toEqual({ type: 'finish', reason: 'tool-calls', model: 'gpt-test' });
  });

  it("toolChoice 'none' leaves only the output tool, forced; a toolChoice naming a tool is kept", async () => {
    const { server, model } = await setup([{ text: '{}' }, { text: '{}' }], { structuredOutputs: 'tool' });
    const output = { name: 'final_answer', schema: { type: 'object' }, strict: false } as const;
    const base = { messages: [textMessage('user', 'x')], tools: [getWeather.spec], settings: {}, output };
    await lastValueFrom(model({ ...base, toolChoice: 'none' }).pipe(toArray()));
    expect((server.requests[0].tools as unknown[]).length).toBe(1);
    expect(server.requests[0].tool_choice).toEqual({ type: 'function', function: { name: 'final_answer' } });
    await lastValueFrom(model({ ...base, toolChoice: { name: 'get_weather' } }).pipe(toArray()));
    expect(server.requests[1].tool_choice).toEqual({ type: 'function', function: { name: 'get_weather' } });
  });

  it('a tool named like the output tool is an invalid request (not retryable), sent nowhere', async () => {
    const { server, model } = await setup([], { structuredOutputs: 'tool' });
    const clash = defineTool({ name: 'final_answer', description: '', parameters: z.object({}), execute: () => 1 });
    const events = await collect(createAgent({ model, tools: [clash], output: Weather }).run('x'));
    expect(events.slice(-2)).toMatchObject([
      { type: 'error', source: 'model', error: { name: 'ModelError', message: expect.stringContaining("a tool is named 'final_answer'") } },
      { type: 'run-end', reason: 'error' },
    ]);
    expect(server.requests).toHaveLength(0);
  });

  it("'structuredOutputs' must be 'json_schema' or 'tool'", () => {
    const client = new OpenAI({ apiKey: 'test', baseURL: 'http://127.0.0.1:9/v1' });
    expect(() => openAIChat({ client, model: 'm', structuredOutputs: 'xml' as never })).toThrow(
      "openAIChat: 'structuredOutputs' must be 'json_schema' or 'tool', got \"xml\"",
    );
  });
});
