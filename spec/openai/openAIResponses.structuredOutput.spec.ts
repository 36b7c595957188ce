import OpenAI from 'openai';
import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, textMessage, type ModelRequest } from '../../src/index';
import { openAIResponses, type OpenAIResponsesOptions } from '../../src/openai/openAIResponses';
import type { FakeOpenAITurn } from '../../src/testing/openAIServer';
import { collect, fakeOpenAIServers, getWeather, Weather, weatherSchema } from './fixtures/structuredOutput';

const start = fakeOpenAIServers();

async function setup(script: FakeOpenAITurn[], options: Partial<OpenAIResponsesOptions> = {}) {
  const { server, client } = await start(script);
  return { server, model: openAIResponses({ client, model: 'gpt-test', ...options }) };
}
type Body = Record<string, unknown>;

describe('openAIResponses structured output as text.format json_schema (the default)', () => {
  it('sends the schema as a strict json_schema text format and the run parses the answer', async () => {
    const { server, model } = await setup([{ text: ['{"city":"Paris",', '"celsius":21}'] }]);
    const result = await createAgent({ model, output: Weather }).invoke('Weather in Paris?');
    expect(result.output).toEqual({ city: 'Paris', celsius: 21 });
    const body = server.requests[0] as unknown as Body;
    expect(body.text).toEqual({
      format: { type: 'json_schema', name: 'final_answer', description: 'The weather in a city', schema: weatherSchema, strict: true },
    });
    expect(body).not.toHaveProperty('structuredOutputs');
    expect(body).not.toHaveProperty('tools');
    expect(body).not.toHaveProperty('response_format');
  });

  it('keeps the other text settings (verbosity) and sends strict: false for a schema with an optional field', async () => {
    const { server, model } = await setup([{ text: '{"city":"Paris"}' }], { text: { verbosity: 'low' } });
    const result = await createAgent({ model, output: z.object({ city: z.string(), celsius: z.number().optional() }) }).invoke('x');
    expect(result.output).toEqual({ city: 'Paris' });
    const text = (server.requests[0] as unknown as Body).text as Record<string, unknown>;
    expect(text.verbosity).toBe('low');
    expect(text.format).toMatchObject({
      type: 'json_schema',
      name: 'final_answer',
      strict: false,
      schema: { required: ['city'], additionalProperties: false },
    });
    expect(text.format).not.toHaveProperty('description');
  });

  it('a request without output has no text format', async () => {
    const { server, model } = await setup([{ text: 'Hi' }]);
    await createAgent({ model }).invoke('x');
    expect(server.requests[0]).not.toHaveProperty('text');
  });
});

describe("openAIResponses structured output as a tool (structuredOutputs: 'tool')", () => {
  it('without other tools, forces the output tool; its streamed arguments are the answer, not a call to run', async () => {
    const { server, model } = await setup([{ toolCalls: [{ id: 'call_out', name: 'final_answer', args: { city: 'Paris', celsius: 21 }, chunks: 3 }] }], {
      structuredOutputs: 'tool',
    });
    const events = await collect(createAgent({ model, output: Weather }).run('x'));
    const body = server.requests[0] as unknown as Body;
    expect(body.tools).toEqual([{ type: 'function', name: 'final_answer', description: 'The weather in a city', parameters: weatherSchema, strict: true }]);
    expect(body.tool_choice).toEqual({ type: 'function', name: 'final_answer' });
    expect(body).not.toHaveProperty('text');
    expect(events.filter((e) => e.type.startsWith('tool'))).toEqual([]);
    expect(
      events
        .filter((e) => e.type === 'text-delta')
        .map((e) => (e as { text: string }).text)
        .join(''),
    ).toBe('{"city":"Paris","celsius":21}');
    expect(events.some((e) => e.type === 'output-delta')).toBe(true);
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
    for (const body of server.requests as unknown as Body[]) {
      expect((body.tools as Array<{ name: string }>).map((t) => t.name)).toEqual(['get_weather', 'final_answer']);
      expect(body.tool_choice).toBe('required');
    }
    expect(result.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(result.messages[3].content).toEqual([{ type: 'text', text: '{"city":"Paris","celsius":21}' }]);
  });

  it("toolChoice 'none' leaves only the output tool, forced; a toolChoice naming a tool is kept", async () => {
    const { server, model } = await setup([{ text: '{}' }, { text: '{}' }], { structuredOutputs: 'tool' });
    const output = { name: 'final_answer', schema: { type: 'object' }, strict: false } as const;
    const base: ModelRequest = { messages: [textMessage('user', 'x')], tools: [getWeather.spec], settings: {}, output };
    await lastValueFrom(model({ ...base, toolChoice: 'none' }).pipe(toArray()));
    const first = server.requests[0] as unknown as Body;
    expect((first.tools as unknown[]).length).toBe(1);
    expect(first.tool_choice).toEqual({ type: 'function', name: 'final_answer' });
    await lastValueFrom(model({ ...base, toolChoice: { name: 'get_weather' } }).pipe(toArray()));
    expect((server.requests[1] as unknown as Body).tool_choice).toEqual({ type: 'function', name: 'get_weather' });
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
    expect(() => openAIResponses({ client, model: 'm', structuredOutputs: 'xml' as never })).toThrow(
      "openAIResponses: 'structuredOutputs' must be 'json_schema' or 'tool', got \"xml\"",
    );
  });
});
