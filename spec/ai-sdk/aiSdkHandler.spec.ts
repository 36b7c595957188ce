import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, type ChatState, type UIMessage } from 'ai';
import { Observable } from 'rxjs';
import type Redis from 'ioredis';
import { createAgent, memoryStore, type AgentStore, type ModelUpdate } from '../../src/index';
import { aiSdkHandler } from '../../src/ai-sdk/index';
import { redisStore } from '../../src/redis/index';
import { serveFetch } from '../support/fetchServer';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';
import { bookingAgent } from '../ag-ui/agUiKit';

/** The AI SDK's chat engine (what `useChat` runs) with its state in plain fields. */
class PlainChat extends AbstractChat<UIMessage> {
  constructor(options: ConstructorParameters<typeof AbstractChat<UIMessage>>[0] extends infer O ? Omit<O, 'state'> : never) {
    const state: ChatState<UIMessage> = {
      status: 'ready',
      error: undefined,
      messages: [],
      pushMessage: (message) => void state.messages.push(message),
      popMessage: () => void state.messages.pop(),
      replaceMessage: (index, message) => void (state.messages[index] = message),
      snapshot: (thing) => structuredClone(thing),
    };
    super({ ...options, state });
  }
}

/** Resolves when the chat is back to `ready` (or failed). */
async function settled(chat: PlainChat): Promise<void> {
  for (let i = 0; i < 500 && (chat.status === 'submitted' || chat.status === 'streaming'); i++) await new Promise((r) => setTimeout(r, 10));
}

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

    // The next message sends the whole conversation: the model reads it as history.
    await chat.sendMessage({ text: 'Thanks' });
    await settled(chat);
    expect(chat.messages.at(-1)!.parts.at(-1)).toMatchObject({ type: 'text', text: 'You are welcome.' });
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

  it('answers with the protocol header; bad requests get a status and a JSON error; a client that goes away cancels the run', async () => {
    let aborted = 0;
    const model = () => new Observable<ModelUpdate>(() => () => aborted++);
    const handle = aiSdkHandler(createAgent({ model }));
    const post = (body: string, type = 'application/json') => handle(new Request('http://x/', { method: 'POST', headers: { 'content-type': type }, body }));
    const response = await post(JSON.stringify({ id: 'chat', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] }));
    expect(response.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    const reader = response.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: {"type":"start"}\n\n');
    await reader.cancel();
    await new Promise((r) => setTimeout(r, 10)); // the cancel travels up the piped streams
    expect(aborted).toBe(1);

    const statusOf = async (r: Promise<Response>) => {
      const res = await r;
      return [res.status, ((await res.json()) as { error: string }).error];
    };
    expect(await statusOf(handle(new Request('http://x/')))).toEqual([405, 'Method GET not allowed: POST a chat request']);
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
