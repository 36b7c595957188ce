import { safeValidateTypes } from '@ai-sdk/provider-utils';
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, uiMessageChunkSchema, type UIMessage } from 'ai';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { compileFunction } from 'node:vm';
import { Observable, of } from 'rxjs';
import type Redis from 'ioredis';
import ts from 'typescript';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore, ModelError, type AgentStore, type ModelUpdate } from '../../src/index';
import * as aiSdk from '../../src/ai-sdk/index';
import { aiSdkHandler, approvalsAnswered } from '../../src/ai-sdk/index';
import * as http from '../../src/http/index';
import { continuationPermission, modelRetry, permissions } from '../../operators/index';
import { scriptedModel } from '../../src/testing/index';
import { redisStore } from '../../src/redis/index';
import { serveFetch } from '../support/fetchServer';
import { PlainChat, settled } from '../support/plainChat';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';
import { bookingAgent } from '../ag-ui/agUiKit';
import { unencodableCountTool } from '../support/specTools';

describe('aiSdkHandler', () => {
  let server: Awaited<ReturnType<typeof serveFetch>> | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it("drives the ai package's chat engine over DefaultChatTransport: streamed answer, approval request, approval, the rest in the same message", async () => {
    const { agent, booked, model } = bookingAgent();
    server = await serveFetch(aiSdkHandler(agent));
    const errors: Error[] = [];
    const chat = new PlainChat({
      transport: new DefaultChatTransport({ api: server.url }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      onError: (error) => void errors.push(error),
    });
    await chat.sendMessage({ text: 'A table at 7pm' });
    await settled(chat);
    expect(errors).toEqual([]);
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    const asking = chat.messages[1].parts.find((p) => p.type === 'tool-book_table') as {
      state: string;
      approval: { id: string };
      input: unknown;
      toolCallId: string;
    };
    expect(asking).toMatchObject({ state: 'approval-requested', toolCallId: 'c1', input: { time: '19:00' } });
    expect(booked).toEqual([]);

    await chat.addToolApprovalResponse({ id: asking.approval.id, approved: true });
    await new Promise((r) => setTimeout(r, 20)); // the automatic resend starts
    await settled(chat);
    expect(errors).toEqual([]);
    expect(booked).toEqual(['19:00']);
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant']); // the answer went on in the same message
    const parts = chat.messages[1].parts;
    expect(parts.filter((p) => p.type !== 'step-start').map((p) => [p.type, (p as { state?: string }).state])).toEqual([
      ['reasoning', 'done'],
      ['text', 'done'],
      ['tool-book_table', 'output-available'],
      ['data-tool-progress', undefined],
      ['text', 'done'],
    ]);
    expect(parts.at(-1)).toMatchObject({ type: 'text', text: 'Booked for 19:00.' });
    // The UI message has the id of the run's first answer in its history (the model's next request);
    // the resumed stream kept it.
    const history = model.requests[1].messages;
    expect(history.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(history[0].id).toBe(chat.messages[0].id);
    expect(chat.messages[1].id).toMatch(/^msg_/);
    expect(chat.messages[1].id).toBe(history[1].id);

    // The next message sends the whole conversation: the model reads it as history, the ids kept.
    await chat.sendMessage({ text: 'Thanks' });
    await settled(chat);
    expect(chat.messages.at(-1)!.parts.at(-1)).toMatchObject({ type: 'text', text: 'You are welcome.' });
    const sent = model.requests[2].messages;
    expect([sent[0].id, sent[1].id, sent[4].id]).toEqual([chat.messages[0].id, chat.messages[1].id, chat.messages[2].id]);
    expect(chat.messages[3].id).toMatch(/^msg_/);
    expect(model.requests[2].messages).toMatchObject([
      { role: 'user', content: [{ type: 'text', text: 'A table at 7pm' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Booking.' },
          { type: 'tool-call', callId: 'c1', name: 'book_table', args: { time: '19:00' } },
        ],
      },
      { role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'book_table', result: { booked: '19:00' } }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Booked for 19:00.' }] },
      { role: 'user', content: [{ type: 'text', text: 'Thanks' }] },
    ]);
  });

  it('a denial: the call does not run, the part ends output-denied, the model reads the refusal', async () => {
    const { agent, booked, model } = bookingAgent();
    server = await serveFetch(aiSdkHandler(agent));
    const chat = new PlainChat({
      transport: new DefaultChatTransport({ api: server.url }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: 'A table at 7pm' });
    await settled(chat);
    const asking = chat.messages[1].parts.find((p) => p.type === 'tool-book_table') as { approval: { id: string } };
    await chat.addToolApprovalResponse({ id: asking.approval.id, approved: false, reason: 'too late' });
    await new Promise((r) => setTimeout(r, 20));
    await settled(chat);
    expect(booked).toEqual([]);
    expect(model.requests[1].messages.at(-1)).toMatchObject({
      role: 'tool',
      content: [{ type: 'tool-result', callId: 'c1', name: 'book_table', result: "Permission denied for 'book_table': too late", isError: true }],
    });
    expect(chat.messages[1].parts.find((p) => p.type === 'tool-book_table')).toMatchObject({
      state: 'output-denied',
      approval: { id: asking.approval.id, approved: false, reason: 'too late' },
    });
  });

  it('a denial reads the same on the next turn: the chat sends it back in the words the model read', async () => {
    for (const reason of ['too late', undefined]) {
      const { agent, model } = bookingAgent();
      server = await serveFetch(aiSdkHandler(agent));
      const chat = new PlainChat({ transport: new DefaultChatTransport({ api: server.url }), sendAutomaticallyWhen: approvalsAnswered });
      await chat.sendMessage({ text: 'A table at 7pm' });
      await settled(chat);
      const asking = chat.messages[1].parts.find((p) => p.type === 'tool-book_table') as { approval: { id: string } };
      await chat.addToolApprovalResponse({ id: asking.approval.id, approved: false, reason });
      await new Promise((r) => setTimeout(r, 20));
      await settled(chat);
      await chat.sendMessage({ text: 'Never mind' });
      await settled(chat);
      const results = (i: number) => model.requests[i].messages.filter((m) => m.role === 'tool');
      expect(results(1)).toMatchObject([{ content: [{ result: `Permission denied for 'book_table': ${reason ?? 'denied by user'}`, isError: true }] }]);
      expect(results(2).map((m) => m.content)).toEqual(results(1).map((m) => m.content));
      await server.close();
      server = undefined;
    }
  });

  it('answers with the protocol header; bad requests get a status and a JSON error; a client that goes away cancels the run', async () => {
    let aborted = 0;
    const model = () => new Observable<ModelUpdate>(() => () => aborted++);
    const handle = aiSdkHandler(createAgent({ model }));
    const post = (body: string, type = 'application/json') => handle(new Request('http://x/', { method: 'POST', headers: { 'content-type': type }, body }));
    const response = await post(JSON.stringify({ id: 'chat', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] }));
    expect(response.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    const reader = response.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toMatch(/^data: \{"type":"start","messageId":"msg_[0-9a-f-]+"\}\n\n$/);
    await reader.cancel();
    await new Promise((r) => setTimeout(r, 10)); // the cancel travels up the piped streams
    expect(aborted).toBe(1);

    const statusOf = async (r: Promise<Response>) => {
      const res = await r;
      return [res.status, ((await res.json()) as { error: string }).error];
    };
    expect(await statusOf(handle(new Request('http://x/', { method: 'PUT' })))).toEqual([405, 'Method PUT not allowed: POST a chat request']);
    expect(await statusOf(post('{}', 'text/plain'))).toEqual([415, 'Expected content-type application/json, got text/plain']);
    expect(await statusOf(post('nope'))).toEqual([400, expect.stringMatching(/^Body is not JSON: /)]);
    expect(await statusOf(post('{"messages":[]}'))).toEqual([400, expect.stringMatching(/^Not a chat request: messages: /)]);
    const approval = {
      id: 'a',
      role: 'assistant',
      parts: [{ type: 'tool-x', toolCallId: 'c', state: 'approval-responded', input: {}, approval: { id: 'q-gone', approved: true } }],
    };
    expect(await statusOf(post(JSON.stringify({ messages: [approval] })))).toEqual([409, expect.stringMatching(/^No run waits for an answer to 'q-gone'/)]);
    expect(() => aiSdkHandler(null as never)).toThrow('aiSdkHandler: expected an agent (createAgent(...))');
  });
});

describe('aiSdkHandler across servers', () => {
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
   * Server one runs until the approval; the chat's resend goes to server two, whose agent is
   * another object of the same app on `storeTwo` (the same store, or another connection to it).
   */
  async function approvedOnAnotherServer(storeOne: AgentStore, storeTwo: AgentStore) {
    const { agent, another, booked } = bookingAgent({ store: storeOne });
    const one = await serve(aiSdkHandler(agent));
    const two = await serve(aiSdkHandler(another(storeTwo)));
    let target = one.url;
    const posted: string[] = [];
    const chat = new PlainChat({
      // The load balancer: each request goes where `target` says.
      transport: new DefaultChatTransport({ api: one.url, fetch: (_url, init) => (posted.push(target), fetch(target, init)) }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: 'A table at 7pm' });
    await settled(chat);
    const asking = chat.messages[1].parts.find((p) => p.type === 'tool-book_table') as { state: string; approval: { id: string } };
    expect(asking.state).toBe('approval-requested');
    const [runId] = asking.approval.id.split(':');
    expect(asking.approval.id).toBe(`${runId}:${runId}.0.c1.permission-request`);
    expect(await agent.runs.get(decodeURIComponent(runId))).toMatchObject({ status: 'suspended', lease: undefined });

    target = two.url;
    await chat.addToolApprovalResponse({ id: asking.approval.id, approved: true });
    await new Promise((r) => setTimeout(r, 20));
    await settled(chat);
    expect(posted).toEqual([one.url, two.url]);
    expect(booked).toEqual(['19:00']);
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(chat.messages[1].parts.find((p) => p.type === 'tool-book_table')).toMatchObject({ state: 'output-available', output: { booked: '19:00' } });
    expect(chat.messages[1].parts.at(-1)).toMatchObject({ type: 'text', text: 'Booked for 19:00.' });
    return { agent, runId: decodeURIComponent(runId) };
  }

  it('an approval answered by a second server whose agent shares the memoryStore', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const { agent, runId } = await approvedOnAnotherServer(store, store);
    expect(await agent.runs.get(runId)).toMatchObject({ status: 'finished', reason: 'completed' });
  });

  describe('on redisStore', () => {
    let clients: Redis[] = [];
    let prefix: string;
    beforeAll(async () => {
      clients = [await connectRedis(), await connectRedis()];
      prefix = uniquePrefix('aiSdkHandler');
    });
    afterAll(async () => {
      await deleteKeys(clients[0], prefix);
      await Promise.all(clients.map((c) => c.quit()));
    });

    it('two agents, each with its own connection: one asks, the other takes the approval and finishes the run', async () => {
      const [a, b] = clients.map((client) => redisStore({ client, prefix, retainMs: 60_000 }));
      const { agent, runId } = await approvedOnAnotherServer(a, b);
      expect(await agent.runs.get(runId)).toMatchObject({ status: 'finished', reason: 'completed' });
    });
  });

  it('a client that goes away from a journaled run cancels it: the journal says so', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const model = () => new Observable<ModelUpdate>(() => undefined);
    const handle = aiSdkHandler(createAgent({ model, store }), { runOptions: () => ({ runId: 'gone' }) });
    const response = await handle(
      new Request('http://x/', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] }),
      }),
    );
    const reader = response.body!.getReader();
    await reader.read();
    expect(await createAgent({ model, store }).runs.get('gone')).toMatchObject({ status: 'running' });
    await reader.cancel();
    await new Promise((r) => setTimeout(r, 10));
    expect(await createAgent({ model, store }).runs.get('gone')).toMatchObject({ status: 'finished', reason: 'cancelled' });
  });

  it("an approval past the request's deadline is not taken, but the run goes on with the safe default: a refusal", async () => {
    const { agent, booked } = bookingAgent({ permissionTimeout: 30 });
    const server = await serve(aiSdkHandler(agent));
    const chat = new PlainChat({
      transport: new DefaultChatTransport({ api: server.url }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: 'A table at 7pm' });
    await settled(chat);
    const asking = chat.messages[1].parts.find((p) => p.type === 'tool-book_table') as { approval: { id: string } };
    await new Promise((r) => setTimeout(r, 50));
    await chat.addToolApprovalResponse({ id: asking.approval.id, approved: true });
    await new Promise((r) => setTimeout(r, 20));
    await settled(chat);
    expect(booked).toEqual([]);
    expect(chat.messages[1].parts.find((p) => p.type === 'tool-book_table')).toMatchObject({ state: 'output-denied' });
    expect(chat.messages[1].parts.at(-1)).toMatchObject({ type: 'text', text: 'Booked for 19:00.' }); // the script's next answer
  });
});

/** The frames of a UI message stream body, each chunk parsed (the `[DONE]` marker left out). */
function chunksOf(body: string): Record<string, unknown>[] {
  return body
    .split('\n\n')
    .filter((frame) => frame.startsWith('data: ') && frame !== 'data: [DONE]')
    .map((frame) => JSON.parse(frame.slice(6)) as Record<string, unknown>);
}

/** Each chunk checked with the `ai` package's own chunk schema; the failures. */
async function invalidChunks(chunks: readonly unknown[]): Promise<string[]> {
  const failures: string[] = [];
  for (const chunk of chunks) {
    const result = await safeValidateTypes({ value: chunk, schema: uiMessageChunkSchema });
    if (!result.success) failures.push(`${JSON.stringify(chunk)}: ${result.error.message}`);
  }
  return failures;
}

const chatBody = (text: string) => JSON.stringify({ id: 'chat', messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text }] }] });

describe('aiSdkHandler: what the chat client meets', () => {
  let server: Awaited<ReturnType<typeof serveFetch>> | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('a tool result and a progress value JSON cannot hold (a BigInt, a cycle) go out as strings saying so: the process, the stream and the run go on', async () => {
    const count = unencodableCountTool();
    const model = scriptedModel([{ toolCalls: [{ name: 'count', args: { what: 'sheep' }, callId: 'c1' }] }, 'Counted.']);
    server = await serveFetch(aiSdkHandler(createAgent({ model, tools: [count] })));
    const response = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody('Count the sheep') });
    const body = await response.text();
    expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
    const chunks = chunksOf(body);
    expect(await invalidChunks(chunks)).toEqual([]);
    expect(chunks.filter((c) => c.type === 'data-tool-progress' || (c.type as string).startsWith('tool-output'))).toEqual([
      { type: 'data-tool-progress', id: 'c1', data: { callId: 'c1', value: 'The value could not be sent: Do not know how to serialize a BigInt' } },
      {
        type: 'data-tool-progress',
        id: 'c1',
        data: { callId: 'c1', value: expect.stringMatching(/^The value could not be sent: Converting circular structure to JSON/) },
      },
      { type: 'tool-output-error', toolCallId: 'c1', errorText: 'The tool result could not be sent: Do not know how to serialize a BigInt' },
    ]);
    // The run goes on to its answer: the result is an error result where the run makes it, the journal keeps the progress as strings.
    expect(chunks.filter((c) => c.type === 'text-delta').map((c) => (c as { delta: string }).delta)).toEqual(['Counted.']);
    expect(chunks.at(-1)!.type).toBe('finish');
  });

  /** Two calls of one step that both need an approval, and a booking per approved call. */
  function twoBookings() {
    const booked: string[] = [];
    const book = defineTool({
      name: 'book',
      description: 'Books',
      parameters: z.object({ time: z.string() }),
      needsApproval: true,
      execute: async ({ time }) => (booked.push(time), { booked: time }),
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'book', args: { time: '19:00' }, callId: 'a' },
          { name: 'book', args: { time: '20:00' }, callId: 'b' },
        ],
      },
      'Both booked.',
    ]);
    return { booked, model, agent: createAgent({ model, tools: [book], middleware: [permissions()] }) };
  }

  const partOf = (chat: PlainChat, callId: string) =>
    chat.messages.at(-1)!.parts.find((p) => (p as { toolCallId?: string }).toolCallId === callId) as { state: string; approval?: { id: string } };

  it("two calls of one step that need approvals, with the AI SDK's own resend: a resend with a response the run took already goes on", async () => {
    const { agent, booked } = twoBookings();
    server = await serveFetch(aiSdkHandler(agent));
    const statuses: number[] = [];
    const errors: Error[] = [];
    const chat = new PlainChat({
      transport: new DefaultChatTransport({
        api: server.url,
        fetch: async (url, init) => {
          const response = await fetch(url, init);
          statuses.push(response.status);
          return response;
        },
      }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      onError: (error) => void errors.push(error),
    });
    await chat.sendMessage({ text: 'Book 7pm and 8pm' });
    await settled(chat);
    expect([partOf(chat, 'a').state, partOf(chat, 'b').state]).toEqual(['approval-requested', 'input-available']);
    await chat.addToolApprovalResponse({ id: partOf(chat, 'a').approval!.id, approved: true });
    await settled(chat);
    // The run asks the second approval only once it has the first: the resend is the app's here.
    await chat.sendMessage();
    await settled(chat);
    expect([partOf(chat, 'a').state, partOf(chat, 'b').state]).toEqual(['approval-responded', 'approval-requested']);
    await chat.addToolApprovalResponse({ id: partOf(chat, 'b').approval!.id, approved: true });
    await new Promise((r) => setTimeout(r, 20)); // the automatic resend carries both responses
    await settled(chat);
    expect(errors).toEqual([]);
    expect(statuses).toEqual([200, 200, 200]);
    expect(chat.status).toBe('ready');
    expect(booked).toEqual(['19:00', '20:00']);
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(chat.messages[1].parts.at(-1)).toMatchObject({ type: 'text', text: 'Both booked.' });
  });

  it('two calls of one step that need approvals, with approvalsAnswered: each approval resends by itself, the run books both', async () => {
    const { agent, booked, model } = twoBookings();
    server = await serveFetch(aiSdkHandler(agent));
    const errors: Error[] = [];
    let posts = 0;
    const chat = new PlainChat({
      transport: new DefaultChatTransport({ api: server.url, fetch: (url, init) => (posts++, fetch(url, init)) }),
      sendAutomaticallyWhen: approvalsAnswered,
      onError: (error) => void errors.push(error),
    });
    await chat.sendMessage({ text: 'Book 7pm and 8pm' });
    await settled(chat);
    await chat.addToolApprovalResponse({ id: partOf(chat, 'a').approval!.id, approved: true });
    await new Promise((r) => setTimeout(r, 20));
    await settled(chat);
    expect([partOf(chat, 'a').state, partOf(chat, 'b').state]).toEqual(['approval-responded', 'approval-requested']);
    await chat.addToolApprovalResponse({ id: partOf(chat, 'b').approval!.id, approved: false, reason: 'too late' });
    await new Promise((r) => setTimeout(r, 20));
    await settled(chat);
    expect(errors).toEqual([]);
    expect(posts).toBe(3);
    expect(chat.status).toBe('ready');
    expect(booked).toEqual(['19:00']);
    expect([partOf(chat, 'a').state, partOf(chat, 'b').state]).toEqual(['output-available', 'output-denied']);
    expect(model.requests[1].messages.at(-1)).toMatchObject({
      role: 'tool',
      content: [
        { callId: 'a', result: { booked: '19:00' } },
        { callId: 'b', result: "Permission denied for 'book': too late", isError: true },
      ],
    });
    // One step per iteration: the resumed stream finished the open one and opened no empty one.
    expect(chat.messages[1].parts.map((p) => p.type)).toEqual(['step-start', 'tool-book', 'tool-book', 'step-start', 'text']);
    expect(chat.messages[1].parts.at(-1)).toMatchObject({ type: 'text', text: 'Both booked.' });
  });

  it("approvalsAnswered: an approval response in the last step and no approval still asked (the AI SDK's sendAutomaticallyWhen shape)", () => {
    const tool = (state: string) => ({ type: 'tool-book', toolCallId: state, state, input: {} });
    const of = (...parts: object[]): { messages: UIMessage[] } => ({
      messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'step-start' }, ...parts] } as UIMessage],
    });
    expect(approvalsAnswered(of(tool('approval-responded'), tool('input-available')))).toBe(true);
    expect(approvalsAnswered(of(tool('approval-responded'), tool('approval-requested')))).toBe(false);
    expect(approvalsAnswered(of(tool('output-available'), tool('input-available')))).toBe(false);
    expect(approvalsAnswered(of(tool('approval-responded'), { type: 'step-start' }, { type: 'text', text: 'x' }))).toBe(false);
    expect(approvalsAnswered({ messages: [{ id: 'u', role: 'user', parts: [] }] })).toBe(false);
    expect(approvalsAnswered({ messages: [] })).toBe(false);
  });

  it("a continuation request goes out as data-continuation-request with the id to answer it with; the body's answers resume the run", async () => {
    const model = scriptedModel([{ text: 'Looking.', toolCalls: [{ name: 'look', args: {}, callId: 'c1' }] }, 'Found it.']);
    const look = defineTool({ name: 'look', description: 'Looks', parameters: z.object({}), execute: () => 'seen' });
    const agent = createAgent({ model, tools: [look], maxIterations: Infinity, middleware: [continuationPermission({ maxIterations: 1 })] });
    server = await serveFetch(aiSdkHandler(agent));
    const asked: { type: string; id?: string; data: unknown }[] = [];
    const errors: Error[] = [];
    const chat = new PlainChat({
      transport: new DefaultChatTransport({ api: server.url }),
      onData: (part) => void asked.push(part),
      onError: (error) => void errors.push(error),
    });
    await chat.sendMessage({ text: 'Find it' });
    await settled(chat);
    const request = asked.find((p) => p.type === 'data-continuation-request')!;
    expect(request).toMatchObject({ id: expect.stringMatching(/^[^:]+:.+continuation-request$/), data: { iteration: 1, limit: 1 } });
    expect(chat.messages[1].parts.find((p) => p.type === 'tool-look')).toMatchObject({ state: 'output-available', output: 'seen' });

    await chat.sendMessage(undefined, { body: { answers: [{ id: request.id, approved: true, extension: 2 }] } });
    await settled(chat);
    expect(errors).toEqual([]);
    expect(chat.status).toBe('ready');
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant']); // the run went on in the same message
    expect(chat.messages[1].parts.map((p) => p.type)).toEqual(['step-start', 'text', 'tool-look', 'step-start', 'text']);
    expect(chat.messages[1].parts.at(-1)).toMatchObject({ type: 'text', text: 'Found it.' });
    expect(model.requests).toHaveLength(2);

    // An answer no run waits for, or one that is not an answer, is refused.
    const post = (body: unknown) => fetch(server!.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const messages = chat.messages;
    expect((await post({ messages, answers: [{ id: request.id, approved: true }] })).status).toBe(409);
    expect((await post({ messages, answers: [{ id: request.id }] })).status).toBe(400);
  });

  it("by default every error goes out as 'An error occurred.', as the AI SDK's own stream masks them: the chat is told no server detail", async () => {
    const model = scriptedModel([{ text: ['partial'], error: new ModelError('upstream 500 secret-host', { retryable: false }), errorAfter: 1 }]);
    server = await serveFetch(aiSdkHandler(createAgent({ model })));
    const response = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody('Hi') });
    const body = await response.text();
    expect(body).not.toContain('secret-host');
    const chunks = chunksOf(body);
    expect(await invalidChunks(chunks)).toEqual([]);
    expect(chunks.find((c) => c.type === 'data-error')).toMatchObject({ data: { error: { name: 'ModelError', message: 'An error occurred.' } } });
    expect(chunks.at(-1)).toEqual({ type: 'error', errorText: 'An error occurred.' });
    // The chat engine's error is that text.
    const again = scriptedModel([{ error: new ModelError('upstream 500 secret-host', { retryable: false }) }]);
    await server.close();
    server = await serveFetch(aiSdkHandler(createAgent({ model: again })));
    const errors: Error[] = [];
    const chat = new PlainChat({ transport: new DefaultChatTransport({ api: server.url }), onError: (error) => void errors.push(error) });
    await chat.sendMessage({ text: 'Hi' });
    await settled(chat);
    expect(errors.map((e) => e.message)).toEqual(['An error occurred.']);
  });

  it("onError sets the text of every error that goes out, the data chunks' included", async () => {
    const secret = new ModelError('upstream said: key sk-secret is over quota', { status: 503 });
    const model = scriptedModel([{ error: secret }, { error: secret }]);
    const agent = createAgent({ model, middleware: [modelRetry({ maxRetries: 1, initialDelayMs: 1, jitter: 0 })] });
    server = await serveFetch(aiSdkHandler(agent, { onError: () => 'An error occurred.' }));
    const response = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody('Hi') });
    const body = await response.text();
    expect(body).not.toContain('sk-secret');
    const chunks = chunksOf(body);
    expect(await invalidChunks(chunks)).toEqual([]);
    expect(chunks.filter((c) => c.type !== 'start' && c.type !== 'start-step' && c.type !== 'finish-step')).toEqual([
      expect.objectContaining({
        type: 'data-model-retry',
        data: expect.objectContaining({ error: { name: 'ModelError', message: 'An error occurred.', status: 503 } }),
      }),
      expect.objectContaining({
        type: 'data-error',
        data: expect.objectContaining({ error: { name: 'ModelError', message: 'An error occurred.', status: 503 } }),
      }),
      { type: 'error', errorText: 'An error occurred.' },
    ]);
  });

  it("an onError that throws: every error goes out as 'An error occurred.', the stream ends with the error chunk and [DONE], the run with its end", async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const model = scriptedModel([{ text: 'par', error: new ModelError('upstream said: key sk-secret is over quota', { status: 503 }) }]);
    const onError = () => {
      throw new Error('the masking failed');
    };
    server = await serveFetch(aiSdkHandler(createAgent({ model, store }), { onError, runOptions: () => ({ runId: 'masking-1' }) }));
    const response = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody('Hi') });
    const body = await response.text();
    expect(body).not.toMatch(/sk-secret|the masking failed/);
    expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
    const chunks = chunksOf(body);
    expect(await invalidChunks(chunks)).toEqual([]);
    expect(chunks.find((c) => c.type === 'data-error')).toMatchObject({ data: { error: { name: 'ModelError', message: 'An error occurred.', status: 503 } } });
    expect(chunks.slice(-3)).toEqual([
      { type: 'text-end', id: expect.any(String) },
      { type: 'finish-step' },
      { type: 'error', errorText: 'An error occurred.' },
    ]);
    expect(await createAgent({ model, store }).runs.get('masking-1')).toMatchObject({ status: 'finished', reason: 'error' });
  });

  it("useChat({ resume: true })'s reconnect, a GET, is a 204: no active stream, the chat stays ready", async () => {
    const gets: string[] = [];
    const handle = aiSdkHandler(createAgent({ model: scriptedModel(['Hi']) }));
    server = await serveFetch((request) => (request.method === 'GET' && gets.push(new URL(request.url).pathname), handle(request)));
    const errors: Error[] = [];
    const chat = new PlainChat({
      id: 'chat-1',
      transport: new DefaultChatTransport({ api: `${server.url}/api/chat` }),
      onError: (error) => void errors.push(error),
    });
    await chat.resumeStream();
    await settled(chat);
    expect(gets).toEqual(['/api/chat/chat-1/stream']);
    expect(errors).toEqual([]);
    expect(chat.status).toBe('ready');
    expect(chat.messages).toEqual([]);
    const response = await fetch(`${server.url}/api/chat/chat-1/stream`);
    expect([response.status, await response.text()]).toEqual([204, '']);
  });
});

describe('docs/guide/ui-protocols.md, node:http: the same code, run (docs.spec.ts only compiles it)', () => {
  /** The guide's node:http example, transpiled and run with `agent`, its imports from the sources, its server on a free port. */
  async function guideServer(agent: ReturnType<typeof createAgent>): Promise<{ url: string; close(): Promise<void> }> {
    const guide = readFileSync(join(__dirname, '../../docs/guide/ui-protocols.md'), 'utf8');
    const block = /```ts\n([\s\S]*?)```/.exec(guide.slice(guide.indexOf('\n## node:http\n')))![1];
    const js = ts.transpileModule(block, { compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 } }).outputText;
    let server: Server | undefined;
    const createServerOnFreePort = (...args: Parameters<typeof createServer>) => {
      server = createServer(...args);
      const listen = server.listen.bind(server);
      return Object.assign(server, { listen: () => listen(0, '127.0.0.1') });
    };
    const modules: Record<string, unknown> = { 'node:http': { createServer: createServerOnFreePort }, 'rx-agent/ai-sdk': aiSdk, 'rx-agent/http': http };
    compileFunction(js, ['require', 'exports', 'agent'])((name: string) => modules[name], {}, agent);
    const running = server!;
    if (!running.listening) await new Promise((resolve) => running.once('listening', resolve));
    const { port } = running.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}`,
      close: () => new Promise<void>((resolve) => (running.closeAllConnections(), running.close(() => resolve()))),
    };
  }

  it("answers useChat({ resume: true })'s GET with a 204 and goes on serving; a client that goes away cancels its run", async () => {
    let tornDown = 0;
    let calls = 0;
    // The first call answers; the second says one word, then never ends (its teardown is the run's cancellation).
    const model = (): Observable<ModelUpdate> =>
      ++calls === 1
        ? of<ModelUpdate[]>({ type: 'text-delta', text: 'Hi there.' }, { type: 'finish', reason: 'stop' })
        : new Observable<ModelUpdate>((subscriber) => {
            subscriber.next({ type: 'text-delta', text: 'Thinking' });
            return () => tornDown++;
          });
    const served = await guideServer(createAgent({ model }));
    try {
      const get = await fetch(`${served.url}/api/chat/chat-1/stream`, { signal: AbortSignal.timeout(2000) });
      expect([get.status, await get.text()]).toEqual([204, '']);

      const post = await fetch(`${served.url}/api/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody('Hi') });
      expect(post.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
      const body = await post.text();
      expect(chunksOf(body).filter((c) => c.type === 'text-delta')).toEqual([expect.objectContaining({ delta: 'Hi there.' })]);
      expect(body.endsWith('data: [DONE]\n\n')).toBe(true);

      const leaving = new AbortController();
      const stream = await fetch(`${served.url}/api/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: chatBody('Again'),
        signal: leaving.signal,
      });
      const reader = stream.body!.getReader();
      await reader.read();
      leaving.abort();
      for (let i = 0; i < 100 && tornDown === 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(tornDown).toBe(1);
    } finally {
      await served.close();
    }
  });
});
