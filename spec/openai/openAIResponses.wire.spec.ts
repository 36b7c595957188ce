import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import OpenAI from 'openai';
import { VirtualTimeScheduler } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent } from '../../src/index';
import { textMessage } from '../../src/messages/message';
import { ModelError } from '../../src/model/errors';
import type { ModelRequest, ModelUpdate } from '../../src/model/types';
import { openAIResponses } from '../../src/openai/openAIResponses';
import { collect, errorOf } from '../support/streamError';

/** What the raw server does with one request: the SSE events to write, and whether to end the response after them. */
interface Answer {
  events: Array<Record<string, unknown>>;
  end?: boolean;
  /** Ends the response this long after its events (default: with them). */
  endAfterMs?: number;
  status?: number;
}

/** A loopback server streaming Responses API events as given (sequence numbers added), one answer per request. */
async function rawServer(answers: Answer[]) {
  const bodies: Array<Record<string, unknown>> = [];
  const sockets = new Set<Socket>();
  let closedByClient = 0;
  let connections = 0;
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => {
      bodies.push(JSON.parse(Buffer.concat(parts).toString('utf8')) as Record<string, unknown>);
      const answer = answers[bodies.length - 1] ?? { status: 500, events: [] };
      res.on('close', () => {
        if (!res.writableFinished) closedByClient++;
      });
      if (answer.status !== undefined) {
        res.writeHead(answer.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `HTTP ${answer.status}`, type: 'server_error', code: null, param: null } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      answer.events.forEach((event, i) => res.write(`event: ${String(event.type)}\ndata: ${JSON.stringify({ ...event, sequence_number: i })}\n\n`));
      if (answer.end === false) return;
      if (answer.endAfterMs === undefined) res.end();
      else setTimeout(() => res.end(), answer.endAfterMs);
    });
  });
  server.on('connection', (socket: Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    client: new OpenAI({ apiKey: 'test', baseURL: `http://127.0.0.1:${port}/v1` }),
    bodies,
    sockets,
    closedByClient: () => closedByClient,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

let opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(opened.map((s) => s.close()));
  opened = [];
});
async function start(answers: Answer[]) {
  const server = await rawServer(answers);
  opened.push(server);
  return server;
}

/** `values`, or a failure saying it did not settle within `ms` (rather than the spec's timeout). */
async function within<T>(ms: number, values: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the stream did not complete within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([values, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once `done()` holds, checking every 5 ms (for at most a second). */
async function until(done: () => boolean): Promise<void> {
  for (let waited = 0; !done() && waited < 1000; waited += 5) await new Promise((r) => setTimeout(r, 5));
}

const ask = (extra: Partial<ModelRequest> = {}): ModelRequest => ({ messages: [textMessage('user', 'Hi')], tools: [], settings: {}, ...extra });

const response = (status: string, extra: Record<string, unknown> = {}) => ({
  id: 'resp_1',
  object: 'response',
  created_at: 1,
  status,
  model: 'gpt-5-mini-2025-08-07',
  output: [],
  error: null,
  incomplete_details: null,
  usage: null,
  ...extra,
});
const usage = {
  input_tokens: 30,
  input_tokens_details: { cached_tokens: 10 },
  output_tokens: 50,
  output_tokens_details: { reasoning_tokens: 40 },
  total_tokens: 80,
};
const created = { type: 'response.created', response: response('in_progress') };

/** A function call item as the API streams it: added, argument deltas, arguments done, item done. */
function functionCall(at: number, callId: string, name: string, args: string) {
  const item = { id: `fc_${callId}`, type: 'function_call', status: 'in_progress', call_id: callId, name, arguments: '' };
  const half = Math.ceil(args.length / 2);
  return [
    { type: 'response.output_item.added', output_index: at, item },
    { type: 'response.function_call_arguments.delta', item_id: item.id, output_index: at, delta: args.slice(0, half) },
    { type: 'response.function_call_arguments.delta', item_id: item.id, output_index: at, delta: args.slice(half) },
    { type: 'response.function_call_arguments.done', item_id: item.id, output_index: at, arguments: args },
    { type: 'response.output_item.done', output_index: at, item: { ...item, status: 'completed', arguments: args } },
  ];
}

describe('openAIResponses against a raw Responses API stream', () => {
  it('reports usage with reasoning tokens inside outputTokens (not added again)', async () => {
    const { client } = await start([
      {
        events: [
          created,
          { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Hi' },
          { type: 'response.completed', response: response('completed', { usage }) },
        ],
      },
    ]);
    const updates = await collect(openAIResponses({ client, model: 'gpt-5-mini' })(ask()));
    expect(updates.slice(-2)).toEqual([
      { type: 'usage', inputTokens: 30, outputTokens: 50 },
      { type: 'finish', reason: 'stop', model: 'gpt-5-mini-2025-08-07' },
    ]);
  });

  it('max_output_tokens reached: response.incomplete finishes with length', async () => {
    const { client, bodies } = await start([
      {
        events: [
          created,
          { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Hi' },
          { type: 'response.incomplete', response: response('incomplete', { incomplete_details: { reason: 'max_output_tokens' }, usage }) },
        ],
      },
    ]);
    const updates = await collect(openAIResponses({ client, model: 'gpt-5-mini', maxTokens: 16 })(ask()));
    expect(updates.at(-1)).toEqual({ type: 'finish', reason: 'length', model: 'gpt-5-mini-2025-08-07' });
    expect(bodies[0].max_output_tokens).toBe(16);
  });

  it.each([
    ['a rate limit', { type: 'tokens', code: 'rate_limit_exceeded', message: 'Rate limit reached' }, true],
    ['a server error', { type: 'server_error', code: 'server_error', message: 'Oops' }, true],
    ['an exhausted quota', { type: 'insufficient_quota', code: 'insufficient_quota', message: 'No credits' }, false],
    ['a bad request', { type: 'invalid_request_error', code: 'context_length_exceeded', message: 'Too long' }, false],
  ])('an error event nested as the live API sends it (%s) is a ModelError with its message', async (_what, error, retryable) => {
    const { client } = await start([
      {
        events: [created, { type: 'response.output_text.delta', item_id: 'm', output_index: 0, content_index: 0, delta: 'Hi' }, { type: 'error', error }],
        end: false,
      },
    ]);
    const failure = await errorOf(openAIResponses({ client, model: 'm' })(ask()));
    expect(failure).toBeInstanceOf(ModelError);
    expect(failure).toMatchObject({ message: error.message, retryable, status: undefined });
  });

  it('response.failed on a connection the server keeps open: the error comes, and the request is aborted', async () => {
    const server = await start([
      {
        events: [created, { type: 'response.failed', response: response('failed', { error: { code: 'server_error', message: 'Boom' } }) }],
        end: false,
      },
    ]);
    const failure = await errorOf(openAIResponses({ client: server.client, model: 'm' })(ask()));
    expect(failure).toMatchObject({ message: 'Boom', retryable: true });
    await new Promise((r) => setTimeout(r, 50));
    expect(server.closedByClient()).toBe(1);
  });

  it.each([
    ['response.completed', { type: 'response.completed', response: response('completed', { usage }) }, 'stop'],
    [
      'response.incomplete',
      { type: 'response.incomplete', response: response('incomplete', { incomplete_details: { reason: 'max_output_tokens' }, usage }) },
      'length',
    ],
  ])(
    '%s on a connection the server keeps open: the finish comes at once, the stream completes, the request is aborted a second on',
    async (_what, last, reason) => {
      const server = await start([
        { events: [created, { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Hi' }, last], end: false },
      ]);
      const scheduler = new VirtualTimeScheduler();
      const updates = await within(1000, collect(openAIResponses({ client: server.client, model: 'm', scheduler })(ask())));
      expect(updates).toEqual([
        { type: 'text-delta', text: 'Hi' },
        { type: 'usage', inputTokens: 30, outputTokens: 50 },
        { type: 'finish', reason, model: 'gpt-5-mini-2025-08-07' },
      ]);
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(server.closedByClient()).toBe(0); // the body is read on for its end, a second
      scheduler.flush();
      // The response was cut by the client, not ended: the request's connection is gone.
      await until(() => server.closedByClient() === 1);
      expect(server.closedByClient()).toBe(1);
    },
  );

  it('a body that ends just after the final event is read to its end: the connection is kept for the next request', async () => {
    const answer = (text: string): Answer => ({
      events: [
        created,
        { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: text },
        { type: 'response.completed', response: response('completed', { usage }) },
      ],
      endAfterMs: 30,
    });
    const server = await start([answer('a'), answer('b'), answer('c')]);
    const model = openAIResponses({ client: server.client, model: 'm' });
    for (const text of ['a', 'b', 'c']) {
      const updates = await collect(model(ask()));
      expect(updates[0]).toEqual({ type: 'text-delta', text });
      await new Promise((resolve) => setTimeout(resolve, 50)); // the body has ended
    }
    expect(server.closedByClient()).toBe(0);
    expect(server.connections()).toBe(1);
  });

  it('an agent loop with two calls in one response: the second request sends them back with their results', async () => {
    const { client, bodies } = await start([
      {
        events: [
          created,
          { type: 'response.reasoning_summary_text.delta', item_id: 'rs_1', output_index: 0, summary_index: 0, delta: 'Two cities.' },
          { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 1, content_index: 0, delta: 'Checking both.' },
          ...functionCall(2, 'call_p', 'get_weather', '{"city":"Paris"}'),
          ...functionCall(3, 'call_l', 'get_weather', '{"city":"Lyon"}'),
          { type: 'response.completed', response: response('completed', { usage }) },
        ],
      },
      {
        events: [
          created,
          { type: 'response.output_text.delta', item_id: 'msg_2', output_index: 0, content_index: 0, delta: 'Both sunny.' },
          { type: 'response.completed', response: response('completed', { usage }) },
        ],
      },
    ]);
    const weather = defineTool({
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: z.object({ city: z.string() }),
      execute: ({ city }) => `${city}: sunny`,
    });
    const agent = createAgent({
      model: openAIResponses({ client, model: 'gpt-5-mini', reasoning: { effort: 'low', summary: 'auto' } }),
      instructions: 'Be terse.',
      tools: [weather],
    });
    const events: AgentEvent[] = await collect(agent.run('Weather in Paris and Lyon?'));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Both sunny.' });
    expect(bodies).toHaveLength(2);
    expect(bodies[0]).toMatchObject({
      model: 'gpt-5-mini',
      instructions: 'Be terse.',
      reasoning: { effort: 'low', summary: 'auto' },
      tools: [{ type: 'function', name: 'get_weather', description: 'Weather of a city', strict: false }],
      stream: true,
    });
    expect(bodies[1].input).toEqual([
      { role: 'user', content: 'Weather in Paris and Lyon?' },
      { role: 'assistant', content: 'Checking both.' },
      { type: 'function_call', call_id: 'call_p', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call', call_id: 'call_l', name: 'get_weather', arguments: '{"city":"Lyon"}' },
      { type: 'function_call_output', call_id: 'call_p', output: 'Paris: sunny' },
      { type: 'function_call_output', call_id: 'call_l', output: 'Lyon: sunny' },
    ]);
  });

  it('a refusal streams as text', async () => {
    const { client } = await start([
      {
        events: [
          created,
          { type: 'response.content_part.added', item_id: 'msg_1', output_index: 0, content_index: 0, part: { type: 'refusal', refusal: '' } },
          { type: 'response.refusal.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'I cannot help.' },
          { type: 'response.refusal.done', item_id: 'msg_1', output_index: 0, content_index: 0, refusal: 'I cannot help.' },
          { type: 'response.completed', response: response('completed', { usage }) },
        ],
      },
    ]);
    const updates: ModelUpdate[] = await collect(openAIResponses({ client, model: 'm' })(ask()));
    expect(updates[0]).toEqual({ type: 'text-delta', text: 'I cannot help.' });
  });

  it("keeps the settings' built-in tools (web search) next to the request's function tools", async () => {
    const answer = { events: [created, { type: 'response.completed', response: response('completed', { usage }) }] };
    const { client, bodies } = await start([answer, answer]);
    const model = openAIResponses({ client, model: 'm', tools: [{ type: 'web_search' }] });
    const tool = { name: 'get_weather', description: 'Weather', parameters: { type: 'object' } };
    await collect(model(ask({ tools: [tool] })));
    expect(bodies[0].tools).toEqual([
      { type: 'web_search' },
      { type: 'function', name: 'get_weather', description: 'Weather', parameters: { type: 'object' }, strict: false },
    ]);
    await collect(model(ask()));
    expect(bodies[1].tools).toEqual([{ type: 'web_search' }]);
  });
});
