import { EventType, HttpAgent, type BaseEvent } from '@ag-ui/client';
import { Observable } from 'rxjs';
import { createAgent, type ModelUpdate } from '../../src/index';
import { agUiHandler } from '../../src/ag-ui/index';
import { serveFetch } from '../support/fetchServer';
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
      { id: 'run-2-1', role: 'assistant', content: 'Booked for 19:00.' },
    ]);
    expect(ui.messages.map((m) => m.role)).toEqual(['user', 'reasoning', 'assistant', 'tool', 'assistant']);
    expect(ui.messages[2]).toMatchObject({ content: 'Booking.', toolCalls: [{ id: 'c1', function: { name: 'book_table', arguments: '{"time":"19:00"}' } }] });

    // The next turn sends the whole conversation back: the model sees it as history.
    ui.messages.push({ id: 'u2', role: 'user', content: 'Thanks' });
    const third = await ui.runAgent({ runId: 'run-3' });
    expect(third.newMessages).toEqual([{ id: 'run-3-0', role: 'assistant', content: 'You are welcome.' }]);
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
