import OpenAI from 'openai';
import { firstValueFrom, lastValueFrom, take, tap, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, ofType, type AgentEvent } from '../../src/index';
import { textMessage, type Message } from '../../src/messages/message';
import { ResponseAssembler } from '../../src/model/assembleResponse';
import { UnparsedArguments } from '../../src/messages/unparsedArguments';
import { ModelError } from '../../src/model/errors';
import { openAIResponses, type OpenAIResponsesClient } from '../../src/openai/openAIResponses';
import type { ModelRequest, ModelUpdate } from '../../src/model/types';
import { startFakeOpenAIServer, type FakeOpenAIServer, type FakeOpenAITurn } from '../../src/testing/openAIServer';
import { modelRetry } from '../../operators/modelRetry';
import { collect, errorOf } from '../support/streamError';

let server: FakeOpenAIServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function setup(script: FakeOpenAITurn[], settings: Record<string, unknown> = {}) {
  server = await startFakeOpenAIServer(script);
  const client = new OpenAI({ apiKey: 'test', baseURL: server.url });
  return { server, client, model: openAIResponses({ client, model: 'gpt-test', ...settings }) };
}

const ask = (text = 'Hi', extra: Partial<ModelRequest> = {}): ModelRequest => ({
  messages: [textMessage('user', text)],
  tools: [],
  settings: {},
  ...extra,
});

/** A 200 answer whose body is these SSE events as they are (a turn that only sets the body). */
const rawEvents = (...events: Array<Record<string, unknown> | string>): FakeOpenAITurn => ({
  status: 200,
  headers: { 'content-type': 'text/event-stream' },
  body: events
    .map((event, i) => (typeof event === 'string' ? event : `event: ${String(event.type)}\ndata: ${JSON.stringify({ sequence_number: i, ...event })}\n\n`))
    .join(''),
});

const completed = (extra: Record<string, unknown> = {}) => ({
  type: 'response.completed',
  response: { id: 'resp_1', object: 'response', model: 'gpt-test-2026', output: [], usage: { input_tokens: 7, output_tokens: 2 }, ...extra },
});

describe('openAIResponses streaming (the real client, the fake server)', () => {
  it('streams text deltas, then the usage of response.completed, then finish with the model that answered', async () => {
    const { server, model } = await setup([{ text: ['Hel', 'lo', ' world'], usage: { prompt_tokens: 11, completion_tokens: 3 } }]);
    expect(await collect(model(ask()))).toEqual([
      { type: 'text-delta', text: 'Hel' },
      { type: 'text-delta', text: 'lo' },
      { type: 'text-delta', text: ' world' },
      { type: 'usage', inputTokens: 11, outputTokens: 3 },
      { type: 'finish', reason: 'stop', model: 'gpt-test' },
    ]);
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0]).toMatchObject({ model: 'gpt-test', stream: true, input: [{ role: 'user', content: 'Hi' }] });
  });

  it('streams a reasoning summary as reasoning deltas, before the text', async () => {
    const { model } = await setup([{ reasoning: ['Think', 'ing'], text: 'Done' }]);
    expect(await collect(model(ask()))).toEqual([
      { type: 'reasoning-delta', text: 'Think' },
      { type: 'reasoning-delta', text: 'ing' },
      { type: 'text-delta', text: 'Done' },
      expect.objectContaining({ type: 'usage' }),
      { type: 'finish', reason: 'stop', model: 'gpt-test' },
    ]);
  });

  it('streams function calls as tool-call deltas: opened with id and name, then the argument pieces', async () => {
    const { model } = await setup([
      {
        text: 'Checking.',
        toolCalls: [
          { id: 'call_a', name: 'get_weather', args: { city: 'Paris', unit: 'celsius' }, chunks: 3 },
          { id: 'call_b', name: 'get_time', args: '{"zone":"Europe/Paris"}', chunks: 2 },
        ],
      },
    ]);
    const updates = await collect(model(ask()));
    const deltas = updates.filter((u) => u.type === 'tool-call-delta');
    expect(deltas[0]).toEqual({ type: 'tool-call-delta', index: 0, callId: 'call_a', name: 'get_weather', argsDelta: '' });
    expect(deltas.slice(1, 4).map((d) => [d.index, d.callId, d.name])).toEqual([
      [0, undefined, undefined],
      [0, undefined, undefined],
      [0, undefined, undefined],
    ]);
    expect(deltas[4]).toEqual({ type: 'tool-call-delta', index: 1, callId: 'call_b', name: 'get_time', argsDelta: '' });
    expect(deltas).toHaveLength(7);

    const assembler = new ResponseAssembler();
    for (const u of updates) assembler.add(u);
    expect(assembler.message()).toEqual({
      id: expect.stringMatching(/^msg_/),
      role: 'assistant',
      content: [
        { type: 'text', text: 'Checking.' },
        { type: 'tool-call', callId: 'call_a', name: 'get_weather', args: { city: 'Paris', unit: 'celsius' } },
        { type: 'tool-call', callId: 'call_b', name: 'get_time', args: { zone: 'Europe/Paris' } },
      ],
    });
    expect(assembler.finishReason).toBe('tool-calls');
  });

  it.each([
    ['length', 'length'],
    ['content_filter', 'content-filter'],
  ] as const)('an incomplete response (%s) finishes with %s, its usage reported', async (finish, reason) => {
    const { model } = await setup([{ text: 'cut sh', finish, usage: { prompt_tokens: 4, completion_tokens: 9 } }]);
    const updates = await collect(model(ask()));
    expect(updates.slice(-2)).toEqual([
      { type: 'usage', inputTokens: 4, outputTokens: 9 },
      { type: 'finish', reason, model: 'gpt-test' },
    ]);
  });

  it('sends one request per subscription (cold)', async () => {
    const { server, model } = await setup([{ text: 'a' }, { text: 'b' }]);
    const updates$ = model(ask());
    expect(server.requests).toHaveLength(0);
    await collect(updates$);
    await collect(updates$);
    expect(server.requests).toHaveLength(2);
  });
});

describe('openAIResponses request mapping', () => {
  it('maps instructions, messages, tool calls and results to input items, and tools, tool_choice and settings', async () => {
    const { server, model } = await setup([{ text: 'ok' }], { temperature: 0.2, maxTokens: 100, reasoning: { effort: 'low', summary: 'auto' } });
    const messages: Message[] = [
      textMessage('system', 'Be brief.'),
      textMessage('user', 'Weather and time in Paris?'),
      {
        role: 'assistant',
        content: [
          { type: 'reasoning', text: 'secret thoughts' },
          { type: 'text', text: 'Let me check.' },
          { type: 'tool-call', callId: 'c1', name: 'get_weather', args: { city: 'Paris' } },
          { type: 'tool-call', callId: 'c2', name: 'get_time', args: new UnparsedArguments('{"zone":', 'bad json') },
        ],
      },
      {
        role: 'tool',
        content: [
          { type: 'tool-result', callId: 'c1', name: 'get_weather', result: { temp: 21 } },
          { type: 'tool-result', callId: 'c2', name: 'get_time', result: 'Bad arguments', isError: true },
        ],
      },
      { role: 'assistant', content: [{ type: 'tool-call', callId: 'c3', name: 'noop', args: {} }] },
      { role: 'tool', content: [{ type: 'tool-result', callId: 'c3', name: 'noop', result: 42 }] },
    ];
    await collect(
      model({
        messages,
        instructions: 'You are a weather bot.',
        tools: [{ name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } }],
        toolChoice: { name: 'get_weather' },
        settings: { temperature: 0.5, maxTokens: undefined, store: false },
      }),
    );
    expect(server.requests[0]).toEqual({
      model: 'gpt-test',
      instructions: 'You are a weather bot.',
      input: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather and time in Paris?' },
        { role: 'assistant', content: 'Let me check.' },
        { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call', call_id: 'c2', name: 'get_time', arguments: '{"zone":' },
        { type: 'function_call_output', call_id: 'c1', output: '{"temp":21}' },
        { type: 'function_call_output', call_id: 'c2', output: 'Bad arguments' },
        { type: 'function_call', call_id: 'c3', name: 'noop', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c3', output: '42' },
      ],
      tools: [
        {
          type: 'function',
          name: 'get_weather',
          description: 'Weather of a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
          strict: false,
        },
      ],
      tool_choice: { type: 'function', name: 'get_weather' },
      temperature: 0.5,
      max_output_tokens: 100,
      reasoning: { effort: 'low', summary: 'auto' },
      store: false,
      stream: true,
    });
  });

  it('omits tools and tool_choice without tools; string tool choices pass as is', async () => {
    const { server, model } = await setup([{ text: 'a' }, { text: 'b' }]);
    await collect(model(ask('x', { toolChoice: 'required' })));
    expect(server.requests[0]).not.toHaveProperty('tools');
    expect(server.requests[0]).not.toHaveProperty('tool_choice');
    expect(server.requests[0]).not.toHaveProperty('instructions');
    const tool = { name: 't', description: '', parameters: { type: 'object' } };
    await collect(model(ask('x', { tools: [tool], toolChoice: 'none' })));
    expect(server.requests[1].tool_choice).toBe('none');
  });
});

describe('openAIResponses in an agent', () => {
  it('runs a tool loop through createAgent: tool-input events stream, the result goes back as function_call_output', async () => {
    const { server, client } = await setup([
      { reasoning: 'I should look it up.', toolCalls: [{ id: 'call_1', name: 'get_weather', args: { city: 'Paris' }, chunks: 2 }] },
      { text: 'Sunny, 21 °C in Paris.', usage: { prompt_tokens: 40, completion_tokens: 8 } },
    ]);
    const weather = defineTool({
      name: 'get_weather',
      description: 'Current weather for a city',
      parameters: z.object({ city: z.string() }),
      execute: ({ city }) => ({ city, celsius: 21, sky: 'sunny' }),
    });
    const agent = createAgent({ model: openAIResponses({ client, model: 'gpt-test' }), instructions: 'Be terse.', tools: [weather] });
    const events: AgentEvent[] = await lastValueFrom(agent.run('Weather in Paris?').pipe(toArray()));
    const labels = events
      .filter((e) => ['tool-input-start', 'tool-input-delta', 'tool-call', 'tool-result', 'reasoning-delta'].includes(e.type))
      .map((e) => e.type);
    expect(labels).toEqual([
      ...Array<string>(5).fill('reasoning-delta'),
      'tool-input-start',
      'tool-input-delta',
      'tool-input-delta',
      'tool-call',
      'tool-result',
    ]);
    expect(
      events
        .filter((e) => e.type === 'tool-input-delta')
        .map((e) => (e as { argsDelta: string }).argsDelta)
        .join(''),
    ).toBe('{"city":"Paris"}');
    const end = events[events.length - 1];
    expect(end).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Sunny, 21 °C in Paris.' });
    // Both calls' usage: the first estimated by the fake server, the second as scripted.
    const { usage } = end as Extract<AgentEvent, { type: 'run-end' }>;
    expect(usage.inputTokens).toBeGreaterThan(40);
    expect(usage.outputTokens).toBeGreaterThan(8);

    expect(server.requests).toHaveLength(2);
    expect(server.requests[1].instructions).toBe('Be terse.');
    expect(server.requests[1].input).toEqual([
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"city":"Paris","celsius":21,"sky":"sunny"}' },
    ]);
  });

  it('modelRetry retries a 503 and a cut stream, then the answer streams', async () => {
    const { server, client } = await setup([{ status: 503 }, { text: ['a', 'b', 'c'], dropAfterChunks: 4 }, { text: 'Fine.' }]);
    const agent = createAgent({ model: openAIResponses({ client, model: 'gpt-test' }), middleware: [modelRetry({ initialDelayMs: 1, maxDelayMs: 1 })] });
    const events = await lastValueFrom(agent.run('Hi').pipe(toArray()));
    expect(events.filter((e) => e.type === 'model-retry')).toHaveLength(2);
    expect(events[events.length - 1]).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Fine.' });
    expect(server.requests).toHaveLength(3);
  });
});

describe('openAIResponses errors', () => {
  it('429 with retry-after is retryable with retryAfterMs; the SDK error is the cause', async () => {
    const { model } = await setup([{ status: 429, headers: { 'retry-after': '2' }, body: { error: { message: 'Rate limit reached', type: 'requests' } } }]);
    const error = await errorOf(model(ask()));
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ status: 429, retryable: true, retryAfterMs: 2000 });
    expect(error.message).toContain('Rate limit reached');
    expect(error.cause).toBeInstanceOf(OpenAI.RateLimitError);
  });

  it('a 429 for an exhausted quota is not retryable', async () => {
    const { model } = await setup([
      { status: 429, body: { error: { message: 'You exceeded your current quota', type: 'insufficient_quota', code: 'insufficient_quota' } } },
    ]);
    expect(await errorOf(model(ask()))).toMatchObject({ status: 429, retryable: false });
  });

  it('400 is not retryable; 500 is, requested exactly once (SDK retries are off)', async () => {
    const { server, model } = await setup([{ status: 400, body: { error: { message: 'Bad tool schema' } } }, { status: 500 }, { text: 'never' }]);
    const bad = await errorOf(model(ask()));
    expect(bad).toMatchObject({ status: 400, retryable: false });
    expect(bad.message).toContain('Bad tool schema');
    expect(await errorOf(model(ask()))).toMatchObject({ status: 500, retryable: true });
    expect(server.requests).toHaveLength(2);
  });

  it('a connection dropped mid-stream is a retryable ModelError, after the deltas that came', async () => {
    // Events: created, in_progress, item added, part added, then the text deltas.
    const { model } = await setup([{ text: ['a', 'b', 'c', 'd'], dropAfterChunks: 6 }]);
    const seen: ModelUpdate[] = [];
    let failure: unknown;
    await new Promise<void>((resolve) => model(ask()).subscribe({ next: (u) => seen.push(u), error: (e) => ((failure = e), resolve()), complete: resolve }));
    expect(seen).toEqual([
      { type: 'text-delta', text: 'a' },
      { type: 'text-delta', text: 'b' },
    ]);
    expect(failure).toBeInstanceOf(ModelError);
    expect(failure).toMatchObject({ status: undefined, retryable: true });
  });

  it('a stream that ends before response.completed is a retryable error', async () => {
    const { model } = await setup([rawEvents({ type: 'response.created', response: { model: 'm' } }, { type: 'response.output_text.delta', delta: 'Hi' })]);
    const error = await errorOf(model(ask()));
    expect(error).toMatchObject({ message: 'The model stream ended before response.completed (connection cut?)', retryable: true });
  });

  it('a refused connection is a retryable ModelError', async () => {
    const { server: s, model } = await setup([]);
    await s.close();
    expect(await errorOf(model(ask()))).toMatchObject({ status: undefined, retryable: true });
  });

  it('a request that cannot be built (a BigInt in a tool result) or sent (in a setting) is not retryable, and nothing is sent', async () => {
    const { server, model } = await setup([{ text: 'never' }]);
    const messages: Message[] = [
      { role: 'assistant', content: [{ type: 'tool-call', callId: 'c1', name: 'lookup', args: {} }] },
      { role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'lookup', result: { id: 1n } }] },
    ];
    const built = await errorOf(model(ask('x', { messages })));
    expect(built.message).toMatch(/^Invalid model request: .*BigInt/);
    expect(built.retryable).toBe(false);
    const sent = await errorOf(model(ask('x', { settings: { metadata: { n: 1n } } })));
    expect(sent.message).toMatch(/^Model request failed: .*BigInt/);
    expect(sent.retryable).toBe(false);
    expect(server.requests).toHaveLength(0);
  });

  it.each([
    ['server_error', true],
    ['rate_limit_exceeded', true],
    [null, true],
    ['invalid_prompt', false],
    ['context_length_exceeded', false],
  ])('an error event with code %s: a ModelError, retryable %s, after the deltas before it', async (code, retryable) => {
    const { model } = await setup([rawEvents({ type: 'response.output_text.delta', delta: 'Hi' }, { type: 'error', code, message: 'no luck', param: null })]);
    const seen: ModelUpdate[] = [];
    const error = await errorOf(model(ask()).pipe(tap((u) => seen.push(u))));
    expect(seen).toEqual([{ type: 'text-delta', text: 'Hi' }]);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ message: 'no luck', status: undefined, retryable });
  });

  it.each([
    ['server_error', 'rate_limit_exceeded', true],
    ['invalid_request_error', null, false],
    ['insufficient_quota', 'insufficient_quota', false],
  ])(
    'an error event with its fields nested under error (type %s, code %s), from a client of your own: its message, retryable %s',
    async (type, code, retryable) => {
      const own: OpenAIResponsesClient = {
        responses: {
          create: () =>
            (async function* () {
              yield { type: 'response.output_text.delta', delta: 'Hi' };
              yield { type: 'error', error: { type, code, message: 'nested: no luck', param: null } };
            })(),
        },
      };
      const error = await errorOf(openAIResponses({ client: own, model: 'm' })(ask()));
      expect(error).toMatchObject({ message: 'nested: no luck', retryable });
    },
  );

  it('response.failed is a ModelError with its error message; retryable by its code', async () => {
    const failed = (code: string) => ({
      type: 'response.failed',
      response: { model: 'm', status: 'failed', output: [], error: { code, message: `failed: ${code}` } },
    });
    const { model } = await setup([rawEvents(failed('server_error')), rawEvents(failed('invalid_image'))]);
    expect(await errorOf(model(ask()))).toMatchObject({ message: 'failed: server_error', retryable: true });
    expect(await errorOf(model(ask()))).toMatchObject({ message: 'failed: invalid_image', retryable: false });
  });

  it.each([
    ['data that is not JSON', 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":\n\n', /^Malformed model stream: /],
    ['a delta that is not a string', { type: 'response.output_text.delta', delta: 5 }, /response\.output_text\.delta's delta must be a string, got 5/],
    [
      'a function call without a name',
      { type: 'response.output_item.added', output_index: 0, item: { type: 'function_call', id: 'fc', call_id: 'c' } },
      /a function call's name must be a non-empty string/,
    ],
    [
      'arguments of an unknown call',
      { type: 'response.function_call_arguments.delta', item_id: 'nope', output_index: 0, delta: '{' },
      /item_id must be the id of a function call/,
    ],
    ['an event without a type', { delta: 'x' }, /not a Responses API event/],
    [
      'an output that is not an array',
      completed({ output: { type: 'function_call' } }),
      /response\.completed's response\.output must be an array, got \{"type":"function_call"\}/,
    ],
    [
      'a function call of the output without a call_id',
      completed({ output: [{ type: 'function_call', id: 'fc', name: 'a', arguments: '{}' }] }),
      /a function call's call_id must be a non-empty string, got undefined/,
    ],
  ])('%s is a malformed stream, not retryable', async (_what, event, message) => {
    const { model } = await setup([rawEvents(event, completed())]);
    const error = await errorOf(model(ask()));
    expect(error).toBeInstanceOf(ModelError);
    expect(error.message).toMatch(message);
    expect(error.retryable).toBe(false);
  });

  it('a chat completions stream behind the Responses path (a wrong baseURL), or an empty one, is malformed', async () => {
    const chunk = { id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: 'stop' }] };
    const sse = { status: 200, headers: { 'content-type': 'text/event-stream' } };
    const { model } = await setup([
      { ...sse, body: `data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n` },
      { ...sse, body: ': keep-alive\n\n' },
    ]);
    expect(await errorOf(model(ask()))).toMatchObject({
      message: expect.stringMatching(/^Malformed model stream: not a Responses API event: \{"id":"x"/),
      retryable: false,
    });
    expect(await errorOf(model(ask()))).toMatchObject({
      message: 'Malformed model stream: no Responses API event in it (is baseURL a Responses API?)',
      retryable: false,
    });
  });

  it('checks its options: a missing client or model is a TypeError naming it', () => {
    expect(() => openAIResponses({ client: undefined as unknown as OpenAIResponsesClient, model: 'm' })).toThrow(
      new TypeError("openAIResponses: 'client' must be an OpenAI client (with responses.create), e.g. new OpenAI()"),
    );
    expect(() => openAIResponses({ client: { chat: {} } as unknown as OpenAIResponsesClient, model: 'm' })).toThrow(/openAIResponses: 'client'/);
    const client = new OpenAI({ apiKey: 'test' });
    expect(() => openAIResponses({ client, model: '' })).toThrow(new TypeError('openAIResponses: \'model\' must be a non-empty string, got ""'));
    expect(() => openAIResponses(null as never)).toThrow(new TypeError("openAIResponses: options must be an object with 'client' and 'model', got null"));
    const model = openAIResponses({ client, model: 'gpt-test' });
    expect([model.provider, model.model]).toEqual(['openai', 'gpt-test']);
  });
});

describe('openAIResponses cancellation', () => {
  it('unsubscribing mid-stream aborts the HTTP request promptly, without an error', async () => {
    const { server, model } = await setup([{ text: Array.from({ length: 50 }, (_, i) => `w${i} `), delayMs: 100 }]);
    const errors: unknown[] = [];
    const first = new Promise<ModelUpdate>((resolve) => {
      const sub = model(ask()).subscribe({
        next: (u) => {
          resolve(u);
          queueMicrotask(() => sub.unsubscribe());
        },
        error: (e) => errors.push(e),
      });
    });
    expect(await first).toEqual({ type: 'text-delta', text: 'w0 ' });
    const unsubscribedAt = Date.now();
    await server.waitForClose();
    expect(Date.now() - unsubscribedAt).toBeLessThan(90); // before the next event (100 ms) would have come
    expect(server.closedConnections()).toBe(1);
    await new Promise((r) => setTimeout(r, 30));
    expect(errors).toEqual([]);
  });

  it('cancelling a run aborts the request before the response comes; the run ends cancelled', async () => {
    const { server, client } = await setup([{ text: 'late', latencyMs: 2000 }]);
    const agent = createAgent({ model: openAIResponses({ client, model: 'gpt-test' }) });
    const closed = server.waitForClose();
    const handle = agent.start('Hi');
    const end = firstValueFrom(handle.events$.pipe(ofType('run-end')));
    await new Promise((r) => setTimeout(r, 50));
    expect(server.requests).toHaveLength(1);
    handle.cancel();
    expect(await end).toMatchObject({ reason: 'cancelled' });
    await closed;
    expect(server.closedConnections()).toBe(1);
  });

  it('take(1) ends the request', async () => {
    const { server, model } = await setup([{ text: ['a', 'b', 'c'], delayMs: 50 }]);
    const closed = server.waitForClose();
    expect(await firstValueFrom(model(ask()).pipe(take(1)))).toEqual({ type: 'text-delta', text: 'a' });
    await closed;
  });
});

describe('openAIResponses with servers that stream otherwise', () => {
  it('arguments sent only in .done, a call sent only in output_item.done, refusals as text, unknown events skipped', async () => {
    const { model } = await setup([
      rawEvents(
        { type: 'response.created', response: { model: 'gpt-x' } },
        { type: 'response.web_search_call.in_progress', item_id: 'ws', output_index: 0 },
        { type: 'response.refusal.delta', item_id: 'm', output_index: 0, content_index: 0, delta: 'I cannot.' },
        { type: 'response.output_item.added', output_index: 1, item: { type: 'function_call', id: 'fc_1', call_id: 'c1', name: 'a', arguments: '' } },
        { type: 'response.function_call_arguments.done', item_id: 'fc_1', output_index: 1, name: 'a', arguments: '{"x":1}' },
        { type: 'response.output_item.done', output_index: 1, item: { type: 'function_call', id: 'fc_1', call_id: 'c1', name: 'a', arguments: '{"x":1}' } },
        { type: 'response.output_item.done', output_index: 2, item: { type: 'function_call', id: 'fc_2', call_id: 'c2', name: 'b', arguments: '{}' } },
        completed({ model: 'gpt-x', usage: null }),
      ),
    ]);
    expect(await collect(model(ask()))).toEqual([
      { type: 'text-delta', text: 'I cannot.' },
      { type: 'tool-call-delta', index: 0, callId: 'c1', name: 'a', argsDelta: '' },
      { type: 'tool-call-delta', index: 0, argsDelta: '{"x":1}' },
      { type: 'tool-call-delta', index: 1, callId: 'c2', name: 'b', argsDelta: '{}' },
      { type: 'finish', reason: 'tool-calls', model: 'gpt-x' },
    ]);
  });

  it("function calls sent only in response.completed's output: each opened whole, then usage and a tool-calls finish", async () => {
    const { model } = await setup([
      rawEvents(
        { type: 'response.created', response: { model: 'gpt-x' } },
        { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Checking.' },
        completed({
          model: 'gpt-x',
          output: [
            { type: 'message', id: 'msg_1', role: 'assistant', content: [{ type: 'output_text', text: 'Checking.', annotations: [] }] },
            { type: 'function_call', id: 'fc_1', status: 'completed', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
            { type: 'function_call', id: 'fc_2', status: 'completed', call_id: 'c2', name: 'get_time', arguments: '' },
          ],
        }),
      ),
    ]);
    const updates = await collect(model(ask()));
    expect(updates).toEqual([
      { type: 'text-delta', text: 'Checking.' },
      { type: 'tool-call-delta', index: 0, callId: 'c1', name: 'get_weather', argsDelta: '{"city":"Paris"}' },
      { type: 'tool-call-delta', index: 1, callId: 'c2', name: 'get_time', argsDelta: '' },
      { type: 'usage', inputTokens: 7, outputTokens: 2 },
      { type: 'finish', reason: 'tool-calls', model: 'gpt-x' },
    ]);
    const assembler = new ResponseAssembler();
    for (const u of updates) assembler.add(u);
    expect(assembler.message().content).toEqual([
      { type: 'text', text: 'Checking.' },
      { type: 'tool-call', callId: 'c1', name: 'get_weather', args: { city: 'Paris' } },
      { type: 'tool-call', callId: 'c2', name: 'get_time', args: {} },
    ]);
  });

  it("a call that streamed is not sent again from response.completed's output (matched by item id or call id); one that did not is", async () => {
    const { model } = await setup([
      rawEvents(
        // Opened without an item id: only its call id matches the output's item.
        { type: 'response.output_item.added', output_index: 0, item: { type: 'function_call', call_id: 'c1', name: 'a', arguments: '' } },
        { type: 'response.function_call_arguments.delta', item_id: 'output_0', output_index: 0, delta: '{"x":1}' },
        { type: 'response.output_item.added', output_index: 1, item: { type: 'function_call', id: 'fc_2', call_id: 'c2', name: 'b', arguments: '{}' } },
        // Opened, but none of its arguments streamed: they come from the output.
        { type: 'response.output_item.added', output_index: 2, item: { type: 'function_call', id: 'fc_3', call_id: 'c3', name: 'c', arguments: '' } },
        completed({
          model: 'gpt-x',
          usage: null,
          output: [
            { type: 'function_call', id: 'fc_1', call_id: 'c1', name: 'a', arguments: '{"x":1}' },
            { type: 'function_call', id: 'fc_2', call_id: 'c2', name: 'b', arguments: '{}' },
            { type: 'function_call', id: 'fc_3', call_id: 'c3', name: 'c', arguments: '{"z":3}' },
            { type: 'function_call', id: 'fc_4', call_id: 'c4', name: 'd', arguments: '{"y":2}' },
          ],
        }),
      ),
    ]);
    expect(await collect(model(ask()))).toEqual([
      { type: 'tool-call-delta', index: 0, callId: 'c1', name: 'a', argsDelta: '' },
      { type: 'tool-call-delta', index: 0, argsDelta: '{"x":1}' },
      { type: 'tool-call-delta', index: 1, callId: 'c2', name: 'b', argsDelta: '{}' },
      { type: 'tool-call-delta', index: 2, callId: 'c3', name: 'c', argsDelta: '' },
      { type: 'tool-call-delta', index: 2, argsDelta: '{"z":3}' },
      { type: 'tool-call-delta', index: 3, callId: 'c4', name: 'd', argsDelta: '{"y":2}' },
      { type: 'finish', reason: 'tool-calls', model: 'gpt-x' },
    ]);
  });

  it('keeps reasoning summary parts apart with a blank line; reads reasoning_text deltas too', async () => {
    const summary = (item: string, index: number, delta: string) => ({
      type: 'response.reasoning_summary_text.delta',
      item_id: item,
      output_index: 0,
      summary_index: index,
      delta,
    });
    const { model } = await setup([
      rawEvents(
        summary('rs_1', 0, 'First'),
        summary('rs_1', 0, ' part.'),
        summary('rs_1', 1, 'Second.'),
        { type: 'response.reasoning_text.delta', item_id: 'rs_2', output_index: 1, content_index: 0, delta: 'Raw.' },
        completed(),
      ),
    ]);
    const text = (await collect(model(ask())))
      .filter((u) => u.type === 'reasoning-delta')
      .map((u) => (u as { text: string }).text)
      .join('');
    expect(text).toBe('First part.\n\nSecond.\n\nRaw.');
  });
});

describe('OpenAIResponsesClient (checked by tsc: npm run typecheck)', () => {
  it('fits the SDK client and a hand-written one', () => {
    const sdk: OpenAIResponsesClient = new OpenAI({ apiKey: 'test' });
    const own: OpenAIResponsesClient = {
      responses: {
        create: () =>
          (async function* () {
            yield { type: 'response.completed', response: { output: [] } };
          })(),
      },
    };
    // @ts-expect-error a chat completions client is not a Responses client
    const chat: OpenAIResponsesClient = { chat: { completions: { create: () => [] } } };
    expect([sdk, own, chat]).toHaveLength(3);
  });
});
