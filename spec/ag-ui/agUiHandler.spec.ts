import { EventType, HttpAgent, type BaseEvent } from '@ag-ui/client';
import { Observable } from 'rxjs';
import type Redis from 'ioredis';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore, ModelError, type AgentStore, type ModelUpdate } from '../../src/index';
import { modelRetry } from '../../operators/index';
import { scriptedModel } from '../../src/testing/index';
import { agUiHandler } from '../../src/ag-ui/index';
import { redisStore } from '../../src/redis/index';
import { serveFetch } from '../support/fetchServer';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';
import { bookingAgent, schemaFailures } from './agUiKit';

describe('agUiHandler', () => {
  let server: Awaited<ReturnType<typeof serveFetch>> | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('drives a conversation with an approval through the real HttpAgent: interrupt, resume, the rest of the run', async () => {
    const { agent, booked, model } = bookingAgent();
    server = await serveFetch(agUiHandler(agent));
    const ui = new HttpAgent({ url: server.url, threadId: 't1' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    const seen: BaseEvent[] = [];
    const onEvent = ({ event }: { event: BaseEvent }) => void seen.push(event);

    const first = await ui.runAgent({ runId: 'run-1' }, { onEvent });
    expect(schemaFailures(seen)).toEqual([]);
    expect(seen.at(-1)).toMatchObject({ type: 'RUN_FINISHED', outcome: { type: 'interrupt' } });
    expect(booked).toEqual([]); // waiting for the person
    expect(first.newMessages.map((m) => m.role)).toEqual(['reasoning', 'assistant']);
    expect(ui.pendingInterrupts).toHaveLength(1);
    const [interrupt] = ui.pendingInterrupts;
    expect(interrupt).toMatchObject({ reason: 'permission-request', toolCallId: 'c1', message: 'Allow book_table? (Books a table)' });

    seen.length = 0;
    const second = await ui.runAgent({ runId: 'run-2', resume: [{ interruptId: interrupt.id, status: 'resolved', payload: { approved: true } }] }, { onEvent });
    expect(schemaFailures(seen)).toEqual([]);
    expect(booked).toEqual(['19:00']);
    expect(seen.find((e) => e.type === EventType.CUSTOM)).toMatchObject({
      name: 'tool-progress',
      value: { callId: 'c1', value: { step: 'calling the restaurant' } },
    });
    expect(seen.at(-1)).toMatchObject({ type: 'RUN_FINISHED', runId: 'run-2', outcome: { type: 'success' } });
    expect(second.newMessages).toEqual([
      { id: 'run-2-result-c1', role: 'tool', toolCallId: 'c1', content: '{"booked":"19:00"}' },
      { id: expect.stringMatching(/^msg_/), role: 'assistant', content: 'Booked for 19:00.' },
    ]);
    expect(ui.messages.map((m) => m.role)).toEqual(['user', 'reasoning', 'assistant', 'tool', 'assistant']);
    expect(ui.messages[2]).toMatchObject({ content: 'Booking.', toolCalls: [{ id: 'c1', function: { name: 'book_table', arguments: '{"time":"19:00"}' } }] });
    // The client's assistant message has the id the answer has in the run's history (the model's next request).
    const history = model.requests[1].messages;
    expect(history.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(history[0].id).toBe('u1');
    expect(ui.messages[2].id).toBe(history[1].id);
    expect(ui.messages[1].id).toBe(`${history[1].id}-reasoning`);

    // The next turn sends the whole conversation back: the model sees it as history, under the same ids.
    ui.messages.push({ id: 'u2', role: 'user', content: 'Thanks' });
    const third = await ui.runAgent({ runId: 'run-3' });
    expect(third.newMessages).toEqual([{ id: expect.stringMatching(/^msg_/), role: 'assistant', content: 'You are welcome.' }]);
    expect(model.requests[2].messages.map((m) => m.id)).toEqual(['u1', history[1].id, 'run-2-result-c1', second.newMessages[1].id, 'u2']);
    expect(model.requests[2].messages).toMatchObject([
      { role: 'user', content: [{ type: 'text', text: 'A table at 7pm' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Booking.' },
          { type: 'tool-call', callId: 'c1', name: 'book_table', args: { time: '19:00' } },
        ],
      },
      { role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'book_table', result: '{"booked":"19:00"}' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Booked for 19:00.' }] },
      { role: 'user', content: [{ type: 'text', text: 'Thanks' }] },
    ]);
  });

  it('a refusal: the call does not run, the model reads it, the client sees the denial', async () => {
    const { agent, booked } = bookingAgent();
    server = await serveFetch(agUiHandler(agent));
    const ui = new HttpAgent({ url: server.url, threadId: 't2' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    await ui.runAgent({ runId: 'a' });
    const seen: BaseEvent[] = [];
    await ui.runAgent(
      { runId: 'b', resume: [{ interruptId: ui.pendingInterrupts[0].id, status: 'cancelled' }] },
      { onEvent: ({ event }) => void seen.push(event) },
    );
    expect(booked).toEqual([]);
    expect(seen.find((e) => e.type === EventType.TOOL_CALL_RESULT)).toMatchObject({
      content: "Permission denied for 'book_table': cancelled",
      metadata: { 'rx-agent': { isError: true, denied: true, reason: 'cancelled' } },
    });
  });

  it('a value JSON cannot hold (a BigInt, a cycle) goes out as a string saying so: no unhandled error, the stream goes on to its end', async () => {
    const count = defineTool({
      name: 'count',
      description: 'Counts',
      parameters: z.object({}),
      execute: (_args, ctx) => {
        const loop: Record<string, unknown> = { step: 'looping' };
        loop.self = loop;
        ctx.progress({ n: 5n });
        ctx.progress(loop);
        return { n: 7n };
      },
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'count', args: {}, callId: 'c1' }] }, 'Counted.']);
    server = await serveFetch(agUiHandler(createAgent({ model, tools: [count] })));
    const ui = new HttpAgent({ url: server.url, threadId: 'big' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'Count' });
    const seen: BaseEvent[] = [];
    await ui.runAgent({ runId: 'big-1' }, { onEvent: ({ event }) => void seen.push(event) });
    expect(schemaFailures(seen)).toEqual([]);
    const progress = seen.filter((e) => e.type === EventType.CUSTOM && (e as unknown as { name: string }).name === 'tool-progress');
    expect(progress.map((e) => (e as unknown as { value: { value: unknown } }).value.value)).toEqual([
      { n: 'The value could not be sent: Do not know how to serialize a BigInt' },
      { step: 'looping', self: expect.stringMatching(/^The value could not be sent: Converting circular structure to JSON/) },
    ]);
    expect(seen.find((e) => e.type === EventType.TOOL_CALL_RESULT)).toMatchObject({
      content: 'The tool result could not be sent: Do not know how to serialize a BigInt',
      metadata: { 'rx-agent': { isError: true } },
    });
    // The stream ends with the run's end. (The run itself fails here: the agent's journal, which
    // agUiHandler always keeps, cannot hold a BigInt either.)
    expect(['RUN_FINISHED', 'RUN_ERROR']).toContain(seen.at(-1)?.type);
  });

  it('a failed or refused call stays one on the next turn: the model reads its result as an error', async () => {
    const flaky = defineTool({
      name: 'flaky',
      description: 'Fails',
      parameters: z.object({}),
      execute: () => {
        throw new Error('disk full');
      },
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'flaky', args: {}, callId: 'c1' }] }, 'It failed.', 'Still no.']);
    server = await serveFetch(agUiHandler(createAgent({ model, tools: [flaky] })));
    const ui = new HttpAgent({ url: server.url, threadId: 'fail' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'Try' });
    await ui.runAgent({ runId: 'fail-1' });
    const stored = ui.messages.find((m) => m.role === 'tool');
    expect(stored).toMatchObject({ toolCallId: 'c1', metadata: { 'rx-agent': { isError: true } } });
    const [sameRun] = model.requests[1].messages.filter((m) => m.role === 'tool').map((m) => m.content[0]);
    expect(sameRun).toMatchObject({ type: 'tool-result', callId: 'c1', isError: true });

    ui.messages.push({ id: 'u2', role: 'user', content: 'Again?' });
    await ui.runAgent({ runId: 'fail-2' });
    const [nextTurn] = model.requests[2].messages.filter((m) => m.role === 'tool').map((m) => m.content[0]);
    expect(nextTurn).toEqual({ ...sameRun, isError: true });
  });

  it('a refused call is told as an error on the next turn too', async () => {
    const { agent, model } = bookingAgent();
    server = await serveFetch(agUiHandler(agent));
    const ui = new HttpAgent({ url: server.url, threadId: 'refused' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    await ui.runAgent({ runId: 'ref-1' });
    await ui.runAgent({ runId: 'ref-2', resume: [{ interruptId: ui.pendingInterrupts[0].id, status: 'cancelled' }] });
    ui.messages.push({ id: 'u2', role: 'user', content: 'Thanks' });
    await ui.runAgent({ runId: 'ref-3' });
    const results = model.requests[2].messages.filter((m) => m.role === 'tool').map((m) => m.content[0]);
    expect(results).toEqual([
      { type: 'tool-result', callId: 'c1', name: 'book_table', result: "Permission denied for 'book_table': cancelled", isError: true },
    ]);
  });

  describe("a call the client keeps without a result is left out of the next turn's history (a model API refuses a call with no result)", () => {
    const noop = defineTool({ name: 'noop', description: 'Does nothing', parameters: z.object({}), execute: () => 'ok' });
    const calls = (messages: ReadonlyArray<{ content: ReadonlyArray<{ type: string }> }>) =>
      messages.flatMap((m) => m.content).filter((part) => part.type !== 'text');

    it('after a model retry dropped the attempt that had started streaming it', async () => {
      const model = scriptedModel([
        { toolCalls: [{ name: 'noop', args: { x: 1 }, callId: 'cut' }], error: new ModelError('flaky', { retryable: true }), errorAfter: 1 },
        'Answered without tools.',
        'Next.',
      ]);
      const agent = createAgent({ model, tools: [noop], middleware: [modelRetry({ maxRetries: 1, initialDelayMs: 0 })] });
      server = await serveFetch(agUiHandler(agent));
      const ui = new HttpAgent({ url: server.url, threadId: 'retry' });
      ui.messages.push({ id: 'u1', role: 'user', content: 'go' });
      let pending: unknown;
      await ui.runAgent(
        { runId: 'retry-1' },
        { onRunFinishedEvent: (finished) => void (pending = 'pendingToolCallIds' in finished && finished.pendingToolCallIds) },
      );
      // The client keeps the cut-off call, with no result, and takes it for one still to answer.
      expect(ui.messages.find((m) => m.role === 'assistant' && m.toolCalls?.length)).toMatchObject({ toolCalls: [{ id: 'cut' }] });
      expect(pending).toEqual(['cut']);

      ui.messages.push({ id: 'u2', role: 'user', content: 'next' });
      await ui.runAgent({ runId: 'retry-2' });
      expect(model.requests[2].messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
      expect(calls(model.requests[2].messages)).toEqual([]);
    });

    it('after HttpAgent.abortRun() stopped the run while the call ran, and after a RUN_ERROR between a call and its result', async () => {
      const slow = defineTool({
        name: 'slow',
        description: 'Slow',
        parameters: z.object({}),
        execute: () => new Promise((resolve) => setTimeout(() => resolve('done'), 300)),
      });
      const model = scriptedModel([
        { toolCalls: [{ name: 'slow', args: {}, callId: 's1' }] },
        { toolCalls: [{ name: 'noop', args: {}, callId: 'n1' }], error: new ModelError('upstream 500', { retryable: false }), errorAfter: 1 },
        'Fine.',
      ]);
      server = await serveFetch(agUiHandler(createAgent({ model, tools: [slow, noop] })));
      const ui = new HttpAgent({ url: server.url, threadId: 'stop' });
      ui.messages.push({ id: 'u1', role: 'user', content: 'go' });
      await ui.runAgent({ runId: 'stop-1' }, { onToolCallEndEvent: () => void setTimeout(() => ui.abortRun(), 20) });
      expect(ui.messages.find((m) => m.role === 'tool')).toBeUndefined();

      ui.messages.push({ id: 'u2', role: 'user', content: 'again' });
      const seen: BaseEvent[] = [];
      await ui.runAgent({ runId: 'stop-2' }, { onEvent: ({ event }) => void seen.push(event) });
      expect(seen.at(-1)?.type).toBe(EventType.RUN_ERROR);
      expect(calls(model.requests[1].messages)).toEqual([]);

      ui.messages.push({ id: 'u3', role: 'user', content: 'and again' });
      await ui.runAgent({ runId: 'stop-3' });
      expect(model.requests[2].messages.map((m) => m.role)).toEqual(['user', 'user', 'user']);
      expect(calls(model.requests[2].messages)).toEqual([]);
    });
  });

  it("RUN_FINISHED's result carries the structured output, as the schema checked and transformed it", async () => {
    const output = z.object({ n: z.string().transform(Number) });
    server = await serveFetch(agUiHandler(createAgent({ model: scriptedModel(['{"n":"42"}', 'plain']), output })));
    const ui = new HttpAgent({ url: server.url, threadId: 'out' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A number' });
    const seen: BaseEvent[] = [];
    const { result } = await ui.runAgent({ runId: 'out-1' }, { onEvent: ({ event }) => void seen.push(event) });
    expect(schemaFailures(seen)).toEqual([]);
    expect(result).toEqual({ text: '{"n":"42"}', reason: 'completed', output: { n: 42 } });
  });

  it("by default a client is told 'An error occurred.' of every error, as the AI SDK binding: no server detail reaches it", async () => {
    const model = scriptedModel([{ text: ['partial'], error: new ModelError('upstream 500 secret-host', { retryable: false }), errorAfter: 1 }]);
    server = await serveFetch(agUiHandler(createAgent({ model })));
    const ui = new HttpAgent({ url: server.url, threadId: 'masked' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'Hi' });
    const seen: BaseEvent[] = [];
    await ui.runAgent({ runId: 'masked-1' }, { onEvent: ({ event }) => void seen.push(event) });
    expect(schemaFailures(seen)).toEqual([]);
    expect(JSON.stringify(seen)).not.toContain('secret-host');
    expect(seen.find((e) => e.type === EventType.CUSTOM)).toMatchObject({
      name: 'error',
      value: { error: { name: 'ModelError', message: 'An error occurred.' } },
    });
    expect(seen.at(-1)).toEqual({ type: 'RUN_ERROR', message: 'An error occurred.', code: 'ModelError' });
  });

  it('onError says what a client is told of an error: RUN_ERROR and the error CUSTOM event carry its text, not the server details', async () => {
    const secret = 'connect ECONNREFUSED 10.0.0.3:5432 (user admin)';
    const told: string[] = [];
    const agent = createAgent({ model: scriptedModel([{ text: 'par', error: new Error(secret) }]) });
    const onError = (error: { name: string; message: string }) => (told.push(error.message), 'Something went wrong');
    server = await serveFetch(agUiHandler(agent, { onError }));
    const response = await fetch(server.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ threadId: 't', runId: 'err-1', messages: [{ id: 'u1', role: 'user', content: 'hi' }] }),
    });
    const body = await response.text();
    expect(body).not.toContain('10.0.0.3');
    expect(told).toContain(secret);

    const ui = new HttpAgent({ url: server.url, threadId: 't' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'hi' });
    const seen: BaseEvent[] = [];
    await ui.runAgent({ runId: 'err-2' }, { onEvent: ({ event }) => void seen.push(event) });
    expect(schemaFailures(seen)).toEqual([]);
    expect(seen.find((e) => e.type === EventType.CUSTOM)).toMatchObject({
      name: 'error',
      value: { error: { name: 'ModelError', message: 'Something went wrong' } },
    });
    expect(seen.at(-1)).toEqual({ type: 'RUN_ERROR', message: 'Something went wrong', code: 'ModelError' });
    expect(() => agUiHandler(agent, { onError: 'hidden' as never })).toThrow('agUiHandler: onError must be a function (error) => string');
  });

  it("an onError that throws: the client is told 'An error occurred.', the stream ends with RUN_ERROR and the run with its end", async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const model = scriptedModel([{ text: 'par', error: new Error('connect ECONNREFUSED 10.0.0.3:5432') }]);
    const onError = () => {
      throw new Error('the masking failed');
    };
    server = await serveFetch(agUiHandler(createAgent({ model, store }), { onError }));
    const ui = new HttpAgent({ url: server.url, threadId: 't' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'hi' });
    const seen: BaseEvent[] = [];
    await ui.runAgent({ runId: 'masking-1' }, { onEvent: ({ event }) => void seen.push(event) });
    expect(schemaFailures(seen)).toEqual([]);
    expect(JSON.stringify(seen)).not.toMatch(/10\.0\.0\.3|the masking failed/);
    expect(seen.find((e) => e.type === EventType.CUSTOM)).toMatchObject({ name: 'error', value: { error: { name: 'Error', message: 'An error occurred.' } } });
    expect(seen.at(-1)).toEqual({ type: 'RUN_ERROR', message: 'An error occurred.', code: 'Error' });
    expect(await createAgent({ model, store }).runs.get('masking-1')).toMatchObject({ status: 'finished', reason: 'error' });
  });

  it('answers bad requests with a status and a JSON error that says what was wrong', async () => {
    const { agent } = bookingAgent();
    const handle = agUiHandler(agent, { maxBodyBytes: 2000 });
    const post = (body: string, type = 'application/json') => handle(new Request('http://x/', { method: 'POST', headers: { 'content-type': type }, body }));
    const statusOf = async (response: Promise<Response>) => {
      const r = await response;
      return [r.status, ((await r.json()) as { error: string }).error];
    };
    expect(await statusOf(handle(new Request('http://x/')))).toEqual([405, 'Method GET not allowed: POST a RunAgentInput']);
    expect(await statusOf(post('{}', 'text/plain'))).toEqual([415, 'Expected content-type application/json, got text/plain']);
    expect(await statusOf(post('{'))).toEqual([400, expect.stringMatching(/^Body is not JSON: /)]);
    expect(await statusOf(post('{"threadId":"t","runId":"r"}'))).toEqual([400, expect.stringMatching(/^Not a RunAgentInput: messages: /)]);
    expect(await statusOf(post('{"threadId":"t","runId":"r","messages":[]}'))).toEqual([400, 'Not a RunAgentInput to run: no messages and no resume entries']);
    expect(await statusOf(post(JSON.stringify({ threadId: 't', runId: 'r', messages: [{ id: 'u', role: 'user', content: 'x'.repeat(3000) }] })))).toEqual([
      400 + 13,
      expect.stringMatching(/over the limit of 2000/),
    ]);
    const resume = { threadId: 't', runId: 'r', messages: [], resume: [{ interruptId: 'nope', status: 'resolved', payload: { approved: true } }] };
    expect(await statusOf(post(JSON.stringify(resume)))).toEqual([409, expect.stringMatching(/^No run waits for an answer to 'nope'/)]);
    expect(() => agUiHandler({} as never)).toThrow('agUiHandler: expected an agent (createAgent(...))');
  });

  it('a client that goes away cancels a run that is not waiting for an answer', async () => {
    let modelCalls = 0;
    let aborted = 0;
    // A model that never answers, and says when its call is torn down.
    const model = () =>
      new Observable<ModelUpdate>(() => {
        modelCalls++;
        return () => aborted++;
      });
    const handle = agUiHandler(createAgent({ model }));
    const body = JSON.stringify({ threadId: 't', runId: 'r', messages: [{ id: 'u', role: 'user', content: 'hi' }] });
    const response = await handle(new Request('http://x/', { method: 'POST', headers: { 'content-type': 'application/json' }, body }));
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    const reader = response.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n');
    expect([modelCalls, aborted]).toEqual([1, 0]);
    await reader.cancel();
    expect([modelCalls, aborted]).toEqual([1, 1]);
  });
});

describe('agUiHandler across servers', () => {
  const servers: Awaited<ReturnType<typeof serveFetch>>[] = [];
  afterEach(async () => {
    await Promise.all(servers.map((s) => s.close()));
    servers.length = 0;
  });
  const serve = async (handler: (request: Request) => Promise<Response>) => {
    const server = await serveFetch(handler);
    servers.push(server);
    return server;
  };

  /**
   * Server one runs until the approval; the client's answer goes to server two, whose agent is
   * another object of the same app on `storeTwo` (the same store, or another connection to it).
   */
  async function answeredOnAnotherServer(storeOne: AgentStore, storeTwo: AgentStore, runId: string) {
    const { agent, another, booked } = bookingAgent({ store: storeOne });
    const one = await serve(agUiHandler(agent));
    const two = await serve(agUiHandler(another(storeTwo)));
    const ui = new HttpAgent({ url: one.url, threadId: 'lb' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    await ui.runAgent({ runId });
    const [interrupt] = ui.pendingInterrupts;
    expect(interrupt).toMatchObject({ id: `${runId}:${runId}.0.c1.permission-request`, reason: 'permission-request', toolCallId: 'c1' });
    // Nothing of the run is left in server one's process: it is suspended in the store.
    expect(await agent.runs.get(runId)).toMatchObject({ status: 'suspended', lease: undefined, pendingRequests: [{ type: 'permission-request' }] });

    ui.url = two.url; // the load balancer sends the answer elsewhere
    const seen: BaseEvent[] = [];
    const second = await ui.runAgent(
      { runId: `${runId}-answer`, resume: [{ interruptId: interrupt.id, status: 'resolved', payload: { approved: true } }] },
      { onEvent: ({ event }) => void seen.push(event) },
    );
    expect(schemaFailures(seen)).toEqual([]);
    expect(booked).toEqual(['19:00']);
    expect(seen.at(-1)).toMatchObject({ type: 'RUN_FINISHED', runId: `${runId}-answer`, outcome: { type: 'success' } });
    expect(second.newMessages.map((m) => [m.role, m.content])).toEqual([
      ['tool', '{"booked":"19:00"}'],
      ['assistant', 'Booked for 19:00.'],
    ]);
    expect(ui.pendingInterrupts).toEqual([]);
    // Answered once: the same answer again finds no run waiting.
    const again = await fetch(two.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        threadId: 'lb',
        runId: 'x',
        messages: [],
        resume: [{ interruptId: interrupt.id, status: 'resolved', payload: { approved: true } }],
      }),
    });
    expect(again.status).toBe(409);
    await again.body?.cancel();
    return { agent };
  }

  it('an interrupt answered by a second server whose agent shares the memoryStore: it journals the answer and resumes the run', async () => {
    const store = memoryStore();
    const { agent } = await answeredOnAnotherServer(store, store, 'mem-1');
    expect(await agent.runs.get('mem-1')).toBeUndefined(); // finished: memoryStore keeps no journal
  });

  describe('on redisStore', () => {
    let clients: Redis[] = [];
    let prefix: string;
    beforeAll(async () => {
      clients = [await connectRedis(), await connectRedis()];
      prefix = uniquePrefix('agUiHandler');
    });
    afterAll(async () => {
      await deleteKeys(clients[0], prefix);
      await Promise.all(clients.map((c) => c.quit()));
    });

    it('two agents, each with its own connection: one asks, the other answers and finishes the run', async () => {
      const [a, b] = clients.map((client) => redisStore({ client, prefix, retainMs: 60_000 }));
      const { agent } = await answeredOnAnotherServer(a, b, 'redis-1');
      expect(await agent.runs.get('redis-1')).toMatchObject({ status: 'finished', reason: 'completed' });
    });
  });

  it('an agent without a store suspends in a memoryStore of its own: another process (another agent) cannot answer, this one can', async () => {
    const { agent, another, booked } = bookingAgent();
    const one = await serve(agUiHandler(agent));
    const elsewhere = await serve(agUiHandler(another()));
    const ui = new HttpAgent({ url: one.url, threadId: 'solo' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    await ui.runAgent({ runId: 'solo-1' });
    const resume = [{ interruptId: ui.pendingInterrupts[0].id, status: 'resolved' as const, payload: { approved: true } }];
    const post = (url: string) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ threadId: 'solo', runId: 'r', messages: [], resume }),
      });
    const refused = await post(elsewhere.url);
    expect([refused.status, ((await refused.json()) as { error: string }).error]).toEqual([
      409,
      expect.stringMatching(/^No run waits for an answer to 'solo-1:/),
    ]);
    await ui.runAgent({ runId: 'solo-2', resume });
    expect(booked).toEqual(['19:00']);
  });

  it("past the request's deadline the client cancels the interrupt (it refuses to answer it): the run goes on with the safe default, a refusal", async () => {
    const { agent, booked } = bookingAgent({ permissionTimeout: 30 });
    const server = await serve(agUiHandler(agent));
    const ui = new HttpAgent({ url: server.url, threadId: 'late' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    await ui.runAgent({ runId: 'late-1' });
    const [interrupt] = ui.pendingInterrupts;
    expect(interrupt.expiresAt).toEqual(expect.any(String));
    await new Promise((r) => setTimeout(r, 50));
    const seen: BaseEvent[] = [];
    await ui.runAgent({ runId: 'late-2', resume: [{ interruptId: interrupt.id, status: 'cancelled' }] }, { onEvent: ({ event }) => void seen.push(event) });
    expect(booked).toEqual([]);
    expect(seen.find((e) => e.type === EventType.TOOL_CALL_RESULT)).toMatchObject({ metadata: { 'rx-agent': { isError: true, denied: true } } });
    expect(seen.at(-1)).toMatchObject({ type: 'RUN_FINISHED', outcome: { type: 'success' } });
  });

  it('without a store, a run whose question expired unanswered is cancelled at the next request: it leaves the memory', async () => {
    const { agent } = bookingAgent({ permissionTimeout: 30 });
    const handle = agUiHandler(agent);
    const ui = new HttpAgent({ url: (await serve(handle)).url, threadId: 'gone' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'A table at 7pm' });
    await ui.runAgent({ runId: 'abandoned' });
    const own = agent.withOwnStore!(() => memoryStore()); // the agent over the handler's memoryStore (made by the handler)
    expect(await own.runs.get('abandoned')).toMatchObject({ status: 'suspended' });
    await new Promise((r) => setTimeout(r, 50));
    expect(await own.runs.get('abandoned')).toMatchObject({ status: 'suspended' }); // no timer
    const next = await handle(
      new Request('http://x/', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ threadId: 't', runId: 'next', messages: [{ id: 'u', role: 'user', content: 'hi' }] }),
      }),
    );
    await next.body?.cancel();
    await new Promise((r) => setTimeout(r, 10));
    expect(await own.runs.get('abandoned')).toBeUndefined(); // cancelled, and memoryStore keeps no finished journal
  });
});
