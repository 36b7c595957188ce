import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI, { AzureOpenAI } from 'openai';
import { Stream } from 'openai/streaming';
import { config, firstValueFrom, take, tap } from 'rxjs';
import { textMessage, type Message } from '../../src/messages/message';
import { ResponseAssembler } from '../../src/model/assembleResponse';
import { UnparsedArguments } from '../../src/messages/unparsedArguments';
import { ModelError } from '../../src/model/errors';
import { openAIChat, type OpenAIChatClient } from '../../src/openai/openAIChat';
import type { ModelRequest, ModelUpdate } from '../../src/model/types';
import { startFakeOpenAIServer, type FakeOpenAIServer, type FakeOpenAITurn } from '../../src/testing/openAIServer';
import { collect, errorOf } from '../support/streamError';

let server: FakeOpenAIServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function setup(script: FakeOpenAITurn[], settings: Record<string, unknown> = {}) {
  server = await startFakeOpenAIServer(script);
  const client = new OpenAI({ apiKey: 'test', baseURL: server.url });
  return { server, model: openAIChat({ client, model: 'gpt-test', ...settings }) };
}

const ask = (text = 'Hi', extra: Partial<ModelRequest> = {}): ModelRequest => ({
  messages: [textMessage('user', text)],
  tools: [],
  settings: {},
  ...extra,
});

describe('openAIChat streaming', () => {
  it('streams text deltas, then usage, then finish', async () => {
    const { model } = await setup([{ text: ['Hel', 'lo', ' world'], usage: { prompt_tokens: 11, completion_tokens: 3 } }]);
    expect(await collect(model(ask()))).toEqual([
      { type: 'text-delta', text: 'Hel' },
      { type: 'text-delta', text: 'lo' },
      { type: 'text-delta', text: ' world' },
      { type: 'usage', inputTokens: 11, outputTokens: 3 },
      { type: 'finish', reason: 'stop', model: 'gpt-test' },
    ]);
  });

  it('maps reasoning_content to reasoning deltas', async () => {
    const { model } = await setup([{ reasoning: ['Think', 'ing'], text: 'Done' }]);
    const updates = await collect(model(ask()));
    expect(updates.filter((u) => u.type === 'reasoning-delta')).toEqual([
      { type: 'reasoning-delta', text: 'Think' },
      { type: 'reasoning-delta', text: 'ing' },
    ]);
  });

  it.each([
    ['stop', 'stop'],
    ['length', 'length'],
    ['content_filter', 'content-filter'],
    ['tool_calls', 'tool-calls'],
    ['function_call', 'tool-calls'],
  ] as const)('maps finish_reason %s to %s', async (finish, reason) => {
    const { model } = await setup([{ text: 'x', finish }]);
    const updates = await collect(model(ask()));
    expect(updates[updates.length - 1]).toEqual({ type: 'finish', reason, model: 'gpt-test' });
  });

  it('reassembles two interleaved parallel tool calls', async () => {
    const { model } = await setup([
      {
        toolCalls: [
          { id: 'call_a', name: 'get_weather', args: { city: 'Paris', unit: 'celsius' }, chunks: 4 },
          { id: 'call_b', name: 'get_time', args: '{"zone":"Europe/Paris"}', chunks: 3 },
        ],
      },
    ]);
    const updates = await collect(model(ask()));
    const deltas = updates.filter((u) => u.type === 'tool-call-delta');
    // The pieces really interleave: index 0, 1, 0, 1, ...
    const argIndexes = deltas.filter((d) => d.argsDelta !== '').map((d) => d.index);
    expect(argIndexes.slice(0, 4)).toEqual([0, 1, 0, 1]);
    expect(deltas[0]).toEqual({ type: 'tool-call-delta', index: 0, callId: 'call_a', name: 'get_weather', argsDelta: '' });

    const assembler = new ResponseAssembler();
    for (const u of updates) assembler.add(u);
    expect(assembler.message()).toMatchObject({
      role: 'assistant',
      content: [
        { type: 'tool-call', callId: 'call_a', name: 'get_weather', args: { city: 'Paris', unit: 'celsius' } },
        { type: 'tool-call', callId: 'call_b', name: 'get_time', args: { zone: 'Europe/Paris' } },
      ],
    });
    expect(assembler.finishReason).toBe('tool-calls');
    expect(assembler.usage?.outputTokens).toBeGreaterThan(0);
  });
});

describe('openAIChat reading the event stream', () => {
  it('parses the SSE body itself, in one pass, with many events per network read', async () => {
    const n = 20_000;
    const frame = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt-test', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    let body = '';
    for (let i = 0; i < n; i++) body += frame({ content: i % 3 === 0 ? `${i}@ ` : 'tok ' });
    body += frame({}, 'stop') + 'data: [DONE]\n\ndata: {"ignored": true}\n\n';
    const raw = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(body); // a few large network reads, each holding thousands of events
    });
    raw.listen(0, '127.0.0.1');
    await once(raw, 'listening');
    const parsedBySdk = jest.spyOn(Stream, 'fromSSEResponse');
    try {
      const client = new OpenAI({ apiKey: 'test', baseURL: `http://127.0.0.1:${(raw.address() as AddressInfo).port}/v1` });
      const updates = await collect(openAIChat({ client, model: 'gpt-test' })(ask()));
      expect(updates).toHaveLength(n + 1);
      expect(updates.filter((u) => u.type === 'text-delta').map((u) => (u as { text: string }).text)).toEqual(
        Array.from({ length: n }, (_, i) => (i % 3 === 0 ? `${i}@ ` : 'tok ')),
      );
      expect(updates[n]).toEqual({ type: 'finish', reason: 'stop', model: 'gpt-test' });
      expect(parsedBySdk).not.toHaveBeenCalled();
    } finally {
      parsedBySdk.mockRestore();
      raw.close();
    }
  });

  it("an error frame is the SDK's APIError, mapped as documented; bad JSON is a malformed stream", async () => {
    const frames = [
      'data: {"error":{"message":"context too long","type":"invalid_request_error","code":"context_length_exceeded"}}\n\n',
      'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n',
      'data: {not json\n\n',
    ];
    let next = 0;
    const raw = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(frames[next++]);
    });
    raw.listen(0, '127.0.0.1');
    await once(raw, 'listening');
    try {
      const client = new OpenAI({ apiKey: 'test', baseURL: `http://127.0.0.1:${(raw.address() as AddressInfo).port}/v1` });
      const model = openAIChat({ client, model: 'gpt-test' });
      const invalid = await errorOf(model(ask()));
      expect(invalid).toBeInstanceOf(ModelError);
      expect(invalid.message).toBe('context too long');
      expect(invalid.retryable).toBe(false);
      expect(invalid.cause).toBeInstanceOf(OpenAI.APIError);
      expect((invalid.cause as InstanceType<typeof OpenAI.APIError>).code).toBe('context_length_exceeded');
      const overloaded = await errorOf(model(ask()));
      expect(overloaded.retryable).toBe(true);
      expect(overloaded.status).toBeUndefined();
      const malformed = await errorOf(model(ask()));
      expect(malformed.message).toMatch(/^Malformed model stream: /);
      expect(malformed.retryable).toBe(false);
      expect(malformed.cause).toBeInstanceOf(SyntaxError);
    } finally {
      raw.close();
    }
  });
});

describe('openAIChat request mapping', () => {
  it('maps messages, tools, tool_choice and settings to the request body', async () => {
    const { server, model } = await setup([{ text: 'ok' }], { temperature: 0.2, maxTokens: 100, top_p: 0.9 });
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
        settings: { temperature: 0.5, maxTokens: undefined, seed: 7 },
      }),
    );

    expect(server.requests).toHaveLength(1);
    expect(server.requests[0]).toEqual({
      model: 'gpt-test',
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.5, // the request's setting overrides the factory's
      max_tokens: 100, // an undefined request setting keeps the factory's
      top_p: 0.9,
      seed: 7,
      messages: [
        { role: 'system', content: 'You are a weather bot.' },
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather and time in Paris?' },
        {
          role: 'assistant',
          content: 'Let me check.',
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            { id: 'c2', type: 'function', function: { name: 'get_time', arguments: '{"zone":' } },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: '{"temp":21}' },
        { role: 'tool', tool_call_id: 'c2', content: 'Bad arguments' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c3', type: 'function', function: { name: 'noop', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'c3', content: '42' },
      ],
      tools: [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'Weather of a city',
            parameters: { type: 'object', properties: { city: { type: 'string' } } },
          },
        },
      ],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
  });

  it('omits tools and tool_choice when there are no tools; string tool choices pass as is', async () => {
    const { server, model } = await setup([{ text: 'a' }, { text: 'b' }]);
    await collect(model(ask('Hi', { toolChoice: 'required' })));
    expect(server.requests[0]).not.toHaveProperty('tools');
    expect(server.requests[0]).not.toHaveProperty('tool_choice');
    await collect(model(ask('Hi', { toolChoice: 'none', tools: [{ name: 't', description: 'd', parameters: {} }], settings: { model: 'other' } })));
    expect(server.requests[1]).toMatchObject({ model: 'other', tool_choice: 'none' });
  });

  it('a history that grows between calls is sent whole each time, its messages converted once', async () => {
    const { server, model } = await setup([{ text: 'a' }, { text: 'b' }, { text: 'c' }]);
    const history: Message[] = [textMessage('user', 'one')];
    await collect(model(ask('', { messages: history, instructions: 'Be brief.' })));
    history.push(textMessage('assistant', 'a'), textMessage('user', 'two'));
    await collect(model(ask('', { messages: history })));
    // Another array whose end differs from what was converted for this one: converted again.
    const other = [history[0], textMessage('user', 'three')];
    await collect(model(ask('', { messages: other })));
    expect(server.requests.map((r) => r.messages)).toEqual([
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'one' },
      ],
      [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'a' },
        { role: 'user', content: 'two' },
      ],
      [
        { role: 'user', content: 'one' },
        { role: 'user', content: 'three' },
      ],
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

describe('openAIChat errors', () => {
  it('429 with retry-after seconds is retryable with retryAfterMs', async () => {
    const { model } = await setup([{ status: 429, headers: { 'retry-after': '2' }, body: { error: { message: 'Rate limit reached', type: 'requests' } } }]);
    const error = await errorOf(model(ask()));
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ status: 429, retryable: true, retryAfterMs: 2000 });
    expect(error.message).toContain('Rate limit reached');
    expect(error.cause).toBeInstanceOf(OpenAI.RateLimitError);
  });

  it('a 429 for an exhausted quota is not retryable: waiting does not pay the bill', async () => {
    const { model } = await setup([
      { status: 429, body: { error: { message: 'You exceeded your current quota', type: 'insufficient_quota', code: 'insufficient_quota' } } },
    ]);
    const error = await errorOf(model(ask()));
    expect(error).toMatchObject({ status: 429, retryable: false });
    expect(error.message).toContain('exceeded your current quota');
  });

  it.each([
    ['its type', { type: 'insufficient_quota', code: null }],
    ['its code', { type: 'requests', code: 'insufficient_quota' }],
  ])('a 429 names an exhausted quota by %s alone: not retryable', async (_by, fields) => {
    const { model } = await setup([{ status: 429, body: { error: { message: 'You exceeded your current quota', ...fields } } }]);
    expect(await errorOf(model(ask()))).toMatchObject({ status: 429, retryable: false });
  });

  it('prefers retry-after-ms', async () => {
    const { model } = await setup([{ status: 503, headers: { 'retry-after-ms': '1500', 'retry-after': '9' } }]);
    expect(await errorOf(model(ask()))).toMatchObject({ status: 503, retryable: true, retryAfterMs: 1500 });
  });

  it('reads retry-after as an HTTP date', async () => {
    const date = new Date(Date.now() + 10_000).toUTCString();
    const { model } = await setup([{ status: 429, headers: { 'retry-after': date } }]);
    const error = await errorOf(model(ask()));
    expect(error.retryAfterMs).toBeGreaterThan(7_000);
    expect(error.retryAfterMs).toBeLessThanOrEqual(10_000);
  });

  it('400 is not retryable', async () => {
    const { model } = await setup([{ status: 400, body: { error: { message: 'Bad tool schema' } } }]);
    const error = await errorOf(model(ask()));
    expect(error).toMatchObject({ status: 400, retryable: false, retryAfterMs: undefined });
    expect(error.message).toContain('Bad tool schema');
  });

  it('500 is retryable and requested exactly once (SDK retries are off)', async () => {
    const { server, model } = await setup([{ status: 500 }, { text: 'should not be reached' }]);
    expect(await errorOf(model(ask()))).toMatchObject({ status: 500, retryable: true });
    expect(server.requests).toHaveLength(1);
  });

  it('a connection dropped mid-stream is a retryable ModelError with no status', async () => {
    const { model } = await setup([{ text: ['a', 'b', 'c', 'd'], dropAfterChunks: 2 }]);
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

  it('a refused connection is a retryable ModelError', async () => {
    const { server: s, model } = await setup([]);
    await s.close();
    const error = await errorOf(model(ask()));
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ status: undefined, retryable: true });
  });
  it('a request that cannot be sent (a BigInt in the settings) is not retryable, and nothing is sent', async () => {
    const { server, model } = await setup([{ text: 'never' }], { metadata: { n: 1n } });
    const error = await errorOf(model(ask()));
    expect(error).toBeInstanceOf(ModelError);
    expect(error.message).toMatch(/^Model request failed: .*BigInt/);
    expect(error.retryable).toBe(false);
    expect(server.requests).toHaveLength(0);
  });

  it('a request that cannot be built (a BigInt in a tool result) is a ModelError that is not retryable', async () => {
    const { server, model } = await setup([{ text: 'never' }]);
    const messages: Message[] = [
      textMessage('user', 'Look it up'),
      { role: 'assistant', content: [{ type: 'tool-call', callId: 'c1', name: 'lookup', args: {} }] },
      { role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'lookup', result: { id: 12345678901234567890n } }] },
    ];
    const error = await errorOf(model(ask('x', { messages })));
    expect(error).toBeInstanceOf(ModelError);
    expect(error.message).toMatch(/^Invalid model request: .*BigInt/);
    expect(error.retryable).toBe(false);
    expect(server.requests).toHaveLength(0);
  });

  it('checks its options: a missing client or model is a TypeError naming it', () => {
    expect(() => openAIChat({ client: undefined as unknown as OpenAIChatClient, model: 'm' })).toThrow(
      new TypeError("openAIChat: 'client' must be an OpenAI client (with chat.completions.create), e.g. new OpenAI()"),
    );
    expect(() => openAIChat({ client: {} as OpenAIChatClient, model: 'm' })).toThrow(/openAIChat: 'client'/);
    const client = new OpenAI({ apiKey: 'test' });
    expect(() => openAIChat({ client, model: '' })).toThrow(new TypeError('openAIChat: \'model\' must be a non-empty string, got ""'));
    expect(() => openAIChat({ client } as never)).toThrow(new TypeError("openAIChat: 'model' must be a non-empty string, got undefined"));
    expect(() => openAIChat(null as never)).toThrow(new TypeError("openAIChat: options must be an object with 'client' and 'model', got null"));
  });
  it.each([
    ['invalid_request_error', false],
    ['insufficient_quota', false],
    ['server_error', true],
  ])('an error event inside the stream of type %s is retryable: %s', async (type, retryable) => {
    const raw: Server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`data: ${JSON.stringify({ error: { message: 'no luck', type, code: null } })}\n\n`);
      });
    });
    raw.listen(0, '127.0.0.1');
    await once(raw, 'listening');
    try {
      const { port } = raw.address() as AddressInfo;
      const model = openAIChat({ client: new OpenAI({ apiKey: 'test', baseURL: `http://127.0.0.1:${port}/v1` }), model: 'm' });
      const error = await errorOf(model(ask()));
      expect(error).toBeInstanceOf(ModelError);
      expect(error.message).toBe('no luck');
      expect(error.status).toBeUndefined();
      expect(error.retryable).toBe(retryable);
    } finally {
      raw.closeAllConnections();
      await new Promise((r) => raw.close(r));
    }
  });
});

describe('openAIChat cancellation', () => {
  it('unsubscribing mid-stream aborts the HTTP request promptly, without an error', async () => {
    const { server, model } = await setup([{ text: Array.from({ length: 50 }, (_, i) => `w${i} `), delayMs: 200 }]);
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
    const elapsed = Date.now() - unsubscribedAt;
    expect(elapsed).toBeLessThan(150); // well before the next chunk (200 ms) would have come
    expect(server.closedConnections()).toBe(1);
    await new Promise((r) => setTimeout(r, 50));
    expect(errors).toEqual([]);
  });

  it('take(1) ends the request, and unsubscribing before the response arrives aborts it too', async () => {
    const { server, model } = await setup([
      { text: ['a', 'b', 'c'], delayMs: 100 },
      { text: 'late', latencyMs: 1000 },
    ]);
    const closed = server.waitForClose();
    expect(await firstValueFrom(model(ask()).pipe(take(1)))).toEqual({ type: 'text-delta', text: 'a' });
    await closed;

    const closedAgain = server.waitForClose();
    const sub = model(ask()).subscribe({ error: (e) => fail(e) });
    await new Promise((r) => setTimeout(r, 50)); // the request is in, no response yet
    expect(server.requests).toHaveLength(2);
    sub.unsubscribe();
    await closedAgain;
    expect(server.closedConnections()).toBe(2);
  });
});

describe('openAIChat with a stub client', () => {
  const stub = (chunks: unknown[]) =>
    ({
      chat: {
        completions: {
          create: async () =>
            (async function* () {
              yield* chunks;
            })(),
        },
      },
    }) as unknown as OpenAI;
  const chunk = (delta: Record<string, unknown>, finish: string | null = null, usage: unknown = null) => ({
    choices: [{ index: 0, delta, finish_reason: finish }],
    usage,
  });

  it('reports the last usage once, before finish, and reads delta.reasoning', async () => {
    const model = openAIChat({
      client: stub([
        chunk({ reasoning: 'hmm' }, null, { prompt_tokens: 3, completion_tokens: 1 }),
        chunk({ content: 'ok' }, 'stop', { prompt_tokens: 3, completion_tokens: 2 }),
      ]),
      model: 'm',
    });
    expect(await collect(model(ask()))).toEqual([
      { type: 'reasoning-delta', text: 'hmm' },
      { type: 'text-delta', text: 'ok' },
      { type: 'usage', inputTokens: 3, outputTokens: 2 },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('a stream that ends without a finish reason is a retryable error', async () => {
    const model = openAIChat({ client: stub([chunk({ content: 'par' })]), model: 'm' });
    const error = await errorOf(model(ask()));
    expect(error).toBeInstanceOf(ModelError);
    expect(error.retryable).toBe(true);
  });
  it.each([
    ['a null chunk', null],
    ['a null tool call', { choices: [{ index: 0, delta: { tool_calls: [null] }, finish_reason: null }] }],
    ['a number', 42],
    ['choices that is not an array', { choices: 'none' }],
  ])('%s errors the stream with a ModelError that is not retryable, and nothing escapes', async (_, bad) => {
    const escaped: unknown[] = [];
    const saved = config.onUnhandledError;
    config.onUnhandledError = (error) => escaped.push(error);
    try {
      const model = openAIChat({ client: stub([chunk({ content: 'a' }), bad, chunk({ content: 'b' }), chunk({}, 'stop')]), model: 'm' });
      const updates: ModelUpdate[] = [];
      let failure: unknown;
      await new Promise<void>((resolve) =>
        model(ask()).subscribe({ next: (u) => updates.push(u), error: (e) => ((failure = e), resolve()), complete: resolve }),
      );
      await new Promise((r) => setTimeout(r, 10));
      expect(updates).toEqual([{ type: 'text-delta', text: 'a' }]);
      expect(failure).toBeInstanceOf(ModelError);
      expect((failure as ModelError).message).toMatch(/^Malformed model stream: /);
      expect((failure as ModelError).retryable).toBe(false);
      expect(escaped).toEqual([]);
    } finally {
      config.onUnhandledError = saved;
    }
  });

  it('objects without choices are skipped: a keep-alive, a metadata chunk', async () => {
    const model = openAIChat({
      client: stub([{ type: 'ping' }, chunk({ content: 'ok' }), { id: 'x', object: 'chat.completion.chunk', usage: null }, chunk({}, 'stop')]),
      model: 'm',
    });
    expect(await collect(model(ask()))).toEqual([
      { type: 'text-delta', text: 'ok' },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('a stream with no chat completion chunk at all (another API behind a wrong baseURL) is malformed, not a cut connection', async () => {
    const model = openAIChat({ client: stub([{ message: 'hello from some other SSE API' }, { message: 'bye' }]), model: 'm' });
    const error = await errorOf(model(ask()));
    expect(error).toMatchObject({ retryable: false, message: 'Malformed model stream: no chat completion chunk in it (is baseURL a chat completions API?)' });
  });

  it('a chunk with usage and no choices is one (some servers send the usage so)', async () => {
    const model = openAIChat({
      client: stub([chunk({ content: 'ok' }), chunk({}, 'stop'), { usage: { prompt_tokens: 3, completion_tokens: 1 } }]),
      model: 'm',
    });
    expect(await collect(model(ask()))).toEqual([
      { type: 'text-delta', text: 'ok' },
      { type: 'usage', inputTokens: 3, outputTokens: 1 },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('streams a refusal as text', async () => {
    const model = openAIChat({
      client: stub([
        chunk({ role: 'assistant', content: null, refusal: '' }),
        chunk({ refusal: "I'm sorry, " }),
        chunk({ refusal: "I can't help with that." }),
        chunk({}, 'stop'),
      ]),
      model: 'm',
    });
    expect(await collect(model(ask()))).toEqual([
      { type: 'text-delta', text: "I'm sorry, " },
      { type: 'text-delta', text: "I can't help with that." },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  const PARIS_AND_UTC = [
    { type: 'tool-call', callId: 'call_a', name: 'get_weather', args: { city: 'Paris' } },
    { type: 'tool-call', callId: 'call_b', name: 'get_time', args: { zone: 'UTC' } },
  ];
  const assembledCalls = async (model: ReturnType<typeof openAIChat>) => {
    const assembler = new ResponseAssembler();
    for (const update of await collect(model(ask()))) assembler.add(update);
    return assembler.message().content;
  };

  it('calls sent without an index and interleaved are told apart by their ids', async () => {
    const piece = (id: string, name: string | undefined, args: string) => ({ id, type: 'function', function: { name, arguments: args } });
    const model = openAIChat({
      client: stub([
        chunk({ tool_calls: [piece('call_a', 'get_weather', '{"city":')] }),
        chunk({ tool_calls: [piece('call_b', 'get_time', '{"zone":')] }),
        chunk({ tool_calls: [piece('call_a', undefined, '"Paris"}')] }),
        chunk({ tool_calls: [piece('call_b', undefined, '"UTC"}')] }),
        chunk({}, 'tool_calls'),
      ]),
      model: 'm',
    });
    expect(await assembledCalls(model)).toEqual(PARIS_AND_UTC);
  });

  it('a piece with neither index nor id continues the last call that had an id', async () => {
    const piece = (id: string | undefined, name: string | undefined, args: string) => ({ id, type: 'function', function: { name, arguments: args } });
    const model = openAIChat({
      client: stub([
        chunk({ tool_calls: [piece('call_a', 'get_weather', '{"city":"Paris"}')] }),
        chunk({ tool_calls: [piece('call_b', 'get_time', '{"zone":')] }),
        chunk({ tool_calls: [piece(undefined, undefined, '"UTC"}')] }),
        chunk({}, 'tool_calls'),
      ]),
      model: 'm',
    });
    expect(await assembledCalls(model)).toEqual(PARIS_AND_UTC);
  });

  it('keeps parallel calls apart when the server sends no index (one whole call per chunk)', async () => {
    const call = (id: string, name: string, args: string) => ({ id, type: 'function', function: { name, arguments: args } });
    const model = openAIChat({
      client: stub([
        chunk({ tool_calls: [call('call_a', 'get_weather', '{"city":"Paris"}')] }),
        chunk({ tool_calls: [call('call_b', 'get_time', '{"zone":"UTC"}')] }),
        chunk({}, 'tool_calls'),
      ]),
      model: 'm',
    });
    expect(await assembledCalls(model)).toEqual(PARIS_AND_UTC);
  });
});

describe('openAIChat with fields of the wrong type (the real client, a loopback server)', () => {
  /** Serves each request the given chunks as SSE, then `[DONE]`; counts the requests. */
  async function serveChunks(chunks: unknown[]) {
    let requests = 0;
    const raw: Server = createServer((req, res) => {
      requests++;
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n');
      });
    });
    raw.listen(0, '127.0.0.1');
    await once(raw, 'listening');
    const { port } = raw.address() as AddressInfo;
    return {
      client: new OpenAI({ apiKey: 'test', baseURL: `http://127.0.0.1:${port}/v1` }),
      requests: () => requests,
      close: async () => {
        raw.closeAllConnections();
        await new Promise((r) => raw.close(r));
      },
    };
  }
  const chunk = (delta: unknown, finish: unknown = null) => ({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] });
  const call = (fn: Record<string, unknown>, extra: Record<string, unknown> = { index: 0, id: 'call_1' }) => ({ ...extra, type: 'function', function: fn });

  it.each([
    ['tool_calls that is a string', { tool_calls: 'zz' }, 'delta.tool_calls must be an array, got "zz"'],
    ['tool_calls that is an object', { tool_calls: { 0: call({ name: 'f', arguments: '{}' }) } }, 'delta.tool_calls must be an array'],
    ['a tool call that is a string', { tool_calls: ['zz'] }, 'a tool call must be an object, got "zz"'],
    [
      'function.arguments that is an object',
      { tool_calls: [call({ name: 'f', arguments: { city: 'Paris' } })] },
      'a tool call\'s function.arguments must be a string, got {"city":"Paris"}',
    ],
    ['a numeric function.name', { tool_calls: [call({ name: 42, arguments: '{}' })] }, "a tool call's function.name must be a string, got 42"],
    ['a function that is a string', { tool_calls: [call('f' as never)] }, 'a tool call\'s function must be an object, got "f"'],
    ['a numeric tool call id', { tool_calls: [call({ name: 'f', arguments: '{}' }, { index: 0, id: 7 })] }, "a tool call's id must be a string, got 7"],
    [
      'a string tool call index',
      { tool_calls: [call({ name: 'f', arguments: '{}' }, { index: '0', id: 'call_1' })] },
      'a tool call\'s index must be an integer >= 0, got "0"',
    ],
    [
      'legacy function_call arguments that are an object',
      { function_call: { name: 'f', arguments: {} } },
      "a tool call's function.arguments must be a string, got {}",
    ],
    ['delta.content that is a number', { content: 42 }, 'delta.content must be a string, got 42'],
    [
      'delta.content that is an array of parts',
      { content: [{ type: 'text', text: 'hi' }] },
      'delta.content must be a string, got [{"type":"text","text":"hi"}]',
    ],
    ['delta.reasoning_content that is an object', { reasoning_content: { text: 'hmm' } }, 'delta.reasoning_content must be a string, got {"text":"hmm"}'],
    ['delta.reasoning that is a number', { reasoning: 1 }, 'delta.reasoning must be a string, got 1'],
    ['delta.refusal that is a boolean', { refusal: true }, 'delta.refusal must be a string, got true'],
    ['a delta that is a string', 'hello', 'delta must be an object, got "hello"'],
  ])('%s is a malformed stream: a ModelError, not retryable, after the updates before it', async (_, bad, message) => {
    const served = await serveChunks([chunk({ role: 'assistant', content: 'a' }), chunk(bad), chunk({ content: 'b' }), chunk({}, 'tool_calls')]);
    try {
      const model = openAIChat({ client: served.client, model: 'm' });
      const updates: ModelUpdate[] = [];
      const error = await errorOf(model(ask()).pipe(tap((u) => updates.push(u))));
      expect(updates).toEqual([{ type: 'text-delta', text: 'a' }]);
      expect(error).toBeInstanceOf(ModelError);
      const expected = `Malformed model stream: ${message}`;
      expect(error.message.slice(0, expected.length)).toBe(expected);
      expect(error.retryable).toBe(false);
      expect(served.requests()).toBe(1);
    } finally {
      await served.close();
    }
  });

  it('a finish_reason that is not a string is a malformed stream', async () => {
    const served = await serveChunks([chunk({ content: 'a' }), chunk({}, 1)]);
    try {
      const error = await errorOf(openAIChat({ client: served.client, model: 'm' })(ask()));
      expect(error).toMatchObject({ message: 'Malformed model stream: finish_reason must be a string, got 1', retryable: false });
    } finally {
      await served.close();
    }
  });

  it('null and absent fields are no fault: nothing is dropped or invented', async () => {
    const served = await serveChunks([
      chunk({ role: 'assistant', content: null, refusal: null, reasoning_content: null, tool_calls: null, function_call: null }),
      chunk(null),
      chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: null } }] }),
      chunk({ tool_calls: [{ index: 0, id: null, function: { name: null, arguments: '{"a":1}' } }] }),
      chunk({ tool_calls: [{ index: 0, function: null }] }),
      chunk({ content: 'done' }, 'tool_calls'),
    ]);
    try {
      expect(await collect(openAIChat({ client: served.client, model: 'm' })(ask()))).toEqual([
        { type: 'tool-call-delta', index: 0, callId: 'call_1', name: 'f', argsDelta: '' },
        { type: 'tool-call-delta', index: 0, callId: undefined, name: undefined, argsDelta: '{"a":1}' },
        { type: 'tool-call-delta', index: 0, callId: undefined, name: undefined, argsDelta: '' },
        { type: 'text-delta', text: 'done' },
        { type: 'finish', reason: 'tool-calls' },
      ]);
    } finally {
      await served.close();
    }
  });
});

describe('OpenAIChatClient (checked by tsc: npm run typecheck)', () => {
  it('fits the SDK clients and a hand-written one, and refuses what is not a streaming chat completions client', () => {
    const clients: OpenAIChatClient[] = [
      new OpenAI({ apiKey: 'x' }),
      new AzureOpenAI({ apiKey: 'x', endpoint: 'https://example.invalid', apiVersion: '2024-10-21' }),
      {
        chat: {
          completions: {
            create: async function* () {
              yield { choices: [] };
            },
          },
        },
      },
    ];
    // @ts-expect-error a create that takes a string
    const takesString: OpenAIChatClient = { chat: { completions: { create: (body: string) => body.length } } };
    // @ts-expect-error a create that returns no stream
    const noStream: OpenAIChatClient = { chat: { completions: { create: () => 42 } } };
    // @ts-expect-error the legacy completions API
    const legacy: OpenAIChatClient = { chat: { completions: new OpenAI({ apiKey: 'x' }).completions } };
    // @ts-expect-error the embeddings API
    const embeddings: OpenAIChatClient = { chat: { completions: new OpenAI({ apiKey: 'x' }).embeddings } };
    expect([...clients, takesString, noStream, legacy, embeddings].every((c) => typeof c.chat.completions.create === 'function')).toBe(true);
  });
});
