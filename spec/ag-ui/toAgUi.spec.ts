import { AbstractAgent, EventType, HttpAgent, type BaseEvent, type RunAgentInput } from '@ag-ui/client';
import { from, lastValueFrom, Observable, of, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineTool, toReadableStream, type AgentEvent } from '../../src/index';
import { modelRetry } from '../../operators/index';
import { scriptedModel } from '../../src/testing/index';
import { AgUiAgent, toAgUi } from '../../src/ag-ui/index';
import { toAgUiFrames } from '../../src/ag-ui/toAgUi';
import { serveFetch } from '../support/fetchServer';
import { schemaFailures } from './agUiKit';

const collect = <T>(events$: Observable<T>) => lastValueFrom(events$.pipe(toArray()));
const lookup = defineTool({ name: 'lookup', description: 'Looks up', parameters: z.object({ q: z.string() }), execute: ({ q }) => ({ found: q }) });
const usage = { inputTokens: 0, outputTokens: 0 };
const change = (runId: string, key: string, value: unknown) => ({ type: 'state-changed', runId, key, value }) as unknown as AgentEvent;

describe('toAgUi', () => {
  it('maps a run with reasoning, text, a streamed tool call and its result to valid AG-UI 1.0 events, in order', async () => {
    const model = scriptedModel([
      { reasoning: 'hmm', text: 'Looking.', toolCalls: [{ name: 'lookup', args: { q: 'x' }, callId: 'c1' }], usage: { inputTokens: 3, outputTokens: 2 } },
      'Found x.',
    ]);
    const session = createSession({ id: 's1' });
    const events = await collect(
      createAgent({ model, tools: [lookup] })
        .run('go', { runId: 'r1', session })
        .pipe(toAgUi({ threadId: 't1' })),
    );
    expect(schemaFailures(events)).toEqual([]);
    // The assistant messages stream under the ids their answers have in the session's history.
    const history = session.snapshot().messages;
    expect(history.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    const [first, second] = [history[1].id, history[3].id];
    expect(first).toMatch(/^msg_/);
    expect(events.map((e) => e.type)).toEqual([
      'RUN_STARTED',
      'STEP_STARTED',
      'REASONING_START',
      'REASONING_MESSAGE_START',
      'REASONING_MESSAGE_CONTENT',
      'REASONING_MESSAGE_END',
      'REASONING_END',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_END',
      'TOOL_CALL_START',
      'TOOL_CALL_ARGS',
      'TOOL_CALL_ARGS',
      'TOOL_CALL_END',
      'TOOL_CALL_RESULT',
      'STEP_FINISHED',
      'STEP_STARTED',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_END',
      'STEP_FINISHED',
      'RUN_FINISHED',
    ]);
    const byType = (type: keyof typeof EventType) => events.filter((e) => e.type === EventType[type]) as unknown as Array<Record<string, unknown>>;
    expect(byType('RUN_STARTED')[0]).toEqual({ type: 'RUN_STARTED', threadId: 't1', runId: 'r1' });
    expect(byType('TOOL_CALL_START')[0]).toEqual({ type: 'TOOL_CALL_START', toolCallId: 'c1', toolCallName: 'lookup', parentMessageId: first });
    expect(byType('REASONING_MESSAGE_START')[0]).toMatchObject({ messageId: `${first}-reasoning` });
    expect(
      byType('TOOL_CALL_ARGS')
        .map((e) => e.delta)
        .join(''),
    ).toBe('{"q":"x"}');
    expect(byType('TOOL_CALL_RESULT')[0]).toEqual({
      type: 'TOOL_CALL_RESULT',
      messageId: 'r1-result-c1',
      toolCallId: 'c1',
      content: '{"found":"x"}',
      role: 'tool',
    });
    expect(byType('TEXT_MESSAGE_CONTENT').map((e) => [e.messageId, e.delta])).toEqual([
      [first, 'Looking.'],
      [second, 'Found x.'],
    ]);
    expect(byType('RUN_FINISHED')[0]).toEqual({
      type: 'RUN_FINISHED',
      threadId: 't1',
      runId: 'r1',
      result: { text: 'Found x.', reason: 'completed' },
      outcome: { type: 'success' },
      usage: [{ inputTokens: 3, outputTokens: 2, totalTokens: 5 }],
    });
  });

  it('sends a call that did not stream whole; a refusal is told in metadata; other events are CUSTOM', async () => {
    const run: AgentEvent[] = [
      { type: 'run-start', runId: 'r', sessionId: 's1' },
      { type: 'iteration-start', runId: 'r', iteration: 0 },
      { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c1', name: 'rm', args: { path: '/' } },
      { type: 'permission-request', runId: 'r', requestId: 'q1', callId: 'c1', toolName: 'rm', args: { path: '/' } },
      {
        type: 'tool-result',
        runId: 'r',
        iteration: 0,
        callId: 'c1',
        name: 'rm',
        result: "Permission denied for 'rm': no",
        isError: true,
        denied: true,
        reason: 'no',
      },
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      { type: 'run-end', runId: 'r', reason: 'terminated', text: '', usage, terminationReason: 'enough' },
    ];
    const events = (await collect(of(...run).pipe(toAgUi()))) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(events)).toEqual([]);
    expect(events.map((e) => e.type)).toEqual([
      'RUN_STARTED',
      'STEP_STARTED',
      'TOOL_CALL_START',
      'TOOL_CALL_ARGS',
      'TOOL_CALL_END',
      'CUSTOM',
      'TOOL_CALL_RESULT',
      'STEP_FINISHED',
      'RUN_FINISHED',
    ]);
    expect(events[0]).toEqual({ type: 'RUN_STARTED', threadId: 's1', runId: 'r' }); // the session is the thread
    expect(events[3]).toEqual({ type: 'TOOL_CALL_ARGS', toolCallId: 'c1', delta: '{"path":"/"}' });
    expect(events[5]).toEqual({ type: 'CUSTOM', name: 'permission-request', value: { requestId: 'q1', callId: 'c1', toolName: 'rm', args: { path: '/' } } });
    expect(events[6].metadata).toEqual({ 'rx-agent': { isError: true, denied: true, reason: 'no' } });
    expect(events[8]).toMatchObject({ result: { text: '', reason: 'terminated', terminationReason: 'enough' }, outcome: { type: 'success' } });
  });

  it('a suspended run finishes with an interrupt per pending request; a cancelled one with outcome cancelled; a failed one with RUN_ERROR', async () => {
    const open: AgentEvent[] = [
      { type: 'run-start', runId: 'r' },
      { type: 'iteration-start', runId: 'r', iteration: 0 },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hi' },
      { type: 'permission-request', runId: 'r', requestId: 'q1', callId: 'c1', toolName: 'rm', args: {}, description: 'Deletes' },
    ];
    const suspended = {
      type: 'run-end',
      runId: 'r',
      reason: 'suspended',
      text: '',
      usage,
      pendingRequests: [{ requestId: 'q1', type: 'permission-request', deadline: Date.UTC(2030, 0, 1) }],
    } as unknown as AgentEvent;
    const interrupted = await collect(of(...open, suspended).pipe(toAgUi()));
    expect(schemaFailures(interrupted)).toEqual([]);
    expect(interrupted.map((e) => e.type).slice(-4)).toEqual(['CUSTOM', 'TEXT_MESSAGE_END', 'STEP_FINISHED', 'RUN_FINISHED']);
    expect((interrupted.at(-1) as unknown as { outcome: unknown }).outcome).toEqual({
      type: 'interrupt',
      interrupts: [
        {
          id: 'q1',
          reason: 'permission-request',
          toolCallId: 'c1',
          message: 'Allow rm? (Deletes)',
          expiresAt: '2030-01-01T00:00:00.000Z',
          responseSchema: expect.objectContaining({ required: ['approved'] }),
          metadata: { 'rx-agent': { request: { requestId: 'q1', callId: 'c1', toolName: 'rm', args: {}, description: 'Deletes' } } },
        },
      ],
    });

    const cancelled = await collect(
      of(...open.slice(0, 3), { type: 'run-end', runId: 'r', reason: 'cancelled', text: '', usage } as AgentEvent).pipe(toAgUi()),
    );
    expect(schemaFailures(cancelled)).toEqual([]);
    expect(cancelled.at(-1)).toMatchObject({ type: 'RUN_FINISHED', outcome: { type: 'cancelled' } });

    const failing = createAgent({ model: scriptedModel([{ text: 'par', error: new Error('socket hang up') }]) });
    const failed = await collect(failing.run('go').pipe(toAgUi()));
    expect(schemaFailures(failed)).toEqual([]);
    expect(failed.map((e) => e.type).slice(-4)).toEqual(['CUSTOM', 'TEXT_MESSAGE_END', 'STEP_FINISHED', 'RUN_ERROR']);
    // By default no error's text goes out (it may hold server details), as in the AI SDK binding.
    expect(failed.at(-1)).toEqual({ type: 'RUN_ERROR', message: 'An error occurred.', code: 'Error' });
    expect(JSON.stringify(failed)).not.toContain('socket hang up');
    const failingAgain = createAgent({ model: scriptedModel([{ text: 'par', error: new Error('socket hang up') }]) });
    const told = await collect(failingAgain.run('go').pipe(toAgUi({ onError: (e) => e.message })));
    expect(told.at(-1)).toEqual({ type: 'RUN_ERROR', message: 'socket hang up', code: 'Error' });
  });

  it('a retried model call closes its partial message; the next attempt streams under the id its event gives', async () => {
    const run: AgentEvent[] = [
      { type: 'run-start', runId: 'r' },
      { type: 'iteration-start', runId: 'r', iteration: 0, messageId: 'msg_a' },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hel' },
      { type: 'model-retry', runId: 'r', iteration: 0, attempt: 1, error: { name: 'ModelError', message: '503' }, delayMs: 10, messageId: 'msg_b' },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hello' },
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      { type: 'run-end', runId: 'r', reason: 'completed', text: 'Hello', usage },
    ];
    const events = (await collect(of(...run).pipe(toAgUi()))) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(events)).toEqual([]);
    expect(events.filter((e) => String(e.type).startsWith('TEXT_MESSAGE')).map((e) => `${String(e.type)} ${String(e.messageId)}`)).toEqual([
      'TEXT_MESSAGE_START msg_a',
      'TEXT_MESSAGE_CONTENT msg_a',
      'TEXT_MESSAGE_END msg_a',
      'TEXT_MESSAGE_START msg_b',
      'TEXT_MESSAGE_CONTENT msg_b',
      'TEXT_MESSAGE_END msg_b',
    ]);
  });

  it('events that do not name the answer (journaled before ids) stream under ids of the run and iteration', async () => {
    const run: AgentEvent[] = [
      { type: 'run-start', runId: 'r' },
      { type: 'iteration-start', runId: 'r', iteration: 0 },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hel' },
      { type: 'model-retry', runId: 'r', iteration: 0, attempt: 1, error: { name: 'ModelError', message: '503' }, delayMs: 10 },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hello' },
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      { type: 'run-end', runId: 'r', reason: 'completed', text: 'Hello', usage },
    ];
    const events = (await collect(of(...run).pipe(toAgUi()))) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(events)).toEqual([]);
    expect(events.filter((e) => String(e.type).startsWith('TEXT_MESSAGE')).map((e) => `${String(e.type)} ${String(e.messageId)}`)).toEqual([
      'TEXT_MESSAGE_START r-0',
      'TEXT_MESSAGE_CONTENT r-0',
      'TEXT_MESSAGE_END r-0',
      'TEXT_MESSAGE_START r-0-1',
      'TEXT_MESSAGE_CONTENT r-0-1',
      'TEXT_MESSAGE_END r-0-1',
    ]);
  });

  it('shared state changes become STATE_DELTA patches that add the key', async () => {
    const run: AgentEvent[] = [{ type: 'run-start', runId: 'r' }, change('r', 'cart', { items: 1 }), change('r', 'cart', { items: 2 }), change('r', 'a/b~', 3)];
    const events = (await collect(of(...run).pipe(toAgUi()))) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(events)).toEqual([]);
    expect(events.slice(1)).toEqual([
      { type: 'STATE_DELTA', delta: [{ op: 'add', path: '/cart', value: { items: 1 } }] },
      { type: 'STATE_DELTA', delta: [{ op: 'add', path: '/cart', value: { items: 2 } }] },
      { type: 'STATE_DELTA', delta: [{ op: 'add', path: '/a~1b~0', value: 3 }] },
    ]);
  });

  it('a tool result JSON cannot hold is a content saying so, told as an error; the run goes on', async () => {
    const count = defineTool({ name: 'count', description: 'Counts', parameters: z.object({}), execute: () => ({ n: 7n }) });
    const model = scriptedModel([{ toolCalls: [{ name: 'count', args: {}, callId: 'c1' }] }, 'Counted.']);
    const events = (await collect(
      createAgent({ model, tools: [count] })
        .run('go', { runId: 'r' })
        .pipe(toAgUi()),
    )) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(events)).toEqual([]);
    expect(events.find((e) => e.type === EventType.TOOL_CALL_RESULT)).toEqual({
      type: 'TOOL_CALL_RESULT',
      messageId: 'r-result-c1',
      toolCallId: 'c1',
      content: 'The tool result could not be sent: Do not know how to serialize a BigInt',
      role: 'tool',
      metadata: { 'rx-agent': { isError: true } },
    });
    expect(events.at(-1)).toMatchObject({ type: 'RUN_FINISHED', result: { text: 'Counted.', reason: 'completed' }, outcome: { type: 'success' } });
  });

  it('events carry the strings the frames send for what JSON cannot hold, so any encoder takes them; other values go out as they are', async () => {
    const loop: Record<string, unknown> = { name: 'loop' };
    loop.self = loop;
    const cart = { items: 2 };
    const completed = [
      { type: 'run-start', runId: 'r' },
      change('r', 'counter', { n: 1n, label: 'big' }),
      change('r', 'cart', cart),
      { type: 'iteration-start', runId: 'r', iteration: 0, messageId: 'msg_a' },
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c1', value: loop },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Three.' },
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      { type: 'run-end', runId: 'r', reason: 'completed', text: 'Three.', usage, output: { total: 3n } },
    ] as unknown as AgentEvent[];
    const suspended = [
      { type: 'run-start', runId: 's' },
      { type: 'continuation-request', runId: 's', requestId: 'q1', limit: 5n },
      { type: 'run-end', runId: 's', reason: 'suspended', text: '', usage, pendingRequests: [{ requestId: 'q1', type: 'continuation-request' }] },
    ] as unknown as AgentEvent[];
    const cannot = 'The value could not be sent: Do not know how to serialize a BigInt';
    for (const run of [completed, suspended]) {
      const events = await collect(from(run).pipe(toAgUi({ threadId: 't' })));
      const frames = await collect(from(run).pipe(toAgUiFrames({ threadId: 't' })));
      expect(events.map((e) => `data: ${JSON.stringify(e)}\n\n`)).toEqual(frames);
      expect(schemaFailures(events)).toEqual([]);
    }
    const events = await collect(from(completed).pipe(toAgUi()));
    const deltas = events.filter((e) => e.type === EventType.STATE_DELTA) as unknown as Array<{ delta: Array<{ value: unknown }> }>;
    expect(deltas[0].delta).toEqual([{ op: 'add', path: '/counter', value: { n: cannot, label: 'big' } }]);
    expect(deltas[1].delta[0].value).toBe(cart);
    expect(events.find((e) => e.type === EventType.CUSTOM)).toMatchObject({
      value: { value: { name: 'loop', self: expect.stringMatching(/^The value could not be sent: Converting circular/) } },
    });
    expect(events.at(-1)).toMatchObject({ result: { output: { total: cannot } } });
    const interrupted = await collect(from(suspended).pipe(toAgUi()));
    expect(interrupted[1]).toEqual({ type: 'CUSTOM', name: 'continuation-request', value: { requestId: 'q1', limit: cannot } });
    expect(interrupted.at(-1)).toMatchObject({ outcome: { interrupts: [{ metadata: { 'rx-agent': { request: { requestId: 'q1', limit: cannot } } } }] } });
  });

  it('onError says what the client is told of an error, wherever one is: RUN_ERROR, error, model-retry, a sub-agent', async () => {
    const onError = (error: { name: string; message: string }) => `${error.name} (hidden)`;
    const failing = createAgent({
      model: scriptedModel([{ error: new Error('10.0.0.3 refused') }, { text: 'par', error: new Error('10.0.0.3 hung up') }]),
      middleware: [modelRetry({ maxRetries: 1, initialDelayMs: 0, retryOn: () => true })],
    });
    const events = (await collect(failing.run('go').pipe(toAgUi({ onError })))) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(events)).toEqual([]);
    expect(JSON.stringify(events)).not.toContain('10.0.0.3');
    expect(events.filter((e) => e.type === EventType.CUSTOM).map((e) => [e.name, (e.value as { error: unknown }).error])).toEqual([
      ['model-retry', { name: 'Error', message: 'Error (hidden)' }],
      ['error', { name: 'Error', message: 'Error (hidden)' }],
    ]);
    expect(events.at(-1)).toEqual({ type: 'RUN_ERROR', message: 'Error (hidden)', code: 'Error' });

    const child = createAgent({ name: 'researcher', model: scriptedModel([{ error: new Error('quota of key sk-1 exceeded') }]) });
    const parent = createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'x' }, callId: 'c1' }] }, 'Done.']),
      tools: [child.asTool({ name: 'research', description: 'Looks things up' })],
    });
    const withChild = await collect(parent.run('go').pipe(toAgUi({ onError })));
    expect(schemaFailures(withChild)).toEqual([]);
    expect(JSON.stringify(withChild.filter((e) => e.type !== EventType.TOOL_CALL_RESULT))).not.toContain('sk-1'); // the result is the model's to read
    expect(withChild.find((e) => e.type === EventType.SUBAGENT_ERROR)).toMatchObject({ message: 'Error (hidden)', code: 'Error' });
    const threshold = { type: 'error-threshold-exceeded', runId: 'r', consecutiveErrors: 3, maxAllowed: 3, lastError: 'db 10.0.0.3 down' } as AgentEvent;
    expect((await collect(of(threshold).pipe(toAgUi({ onError }))))[1]).toMatchObject({
      name: 'error-threshold-exceeded',
      value: { lastError: 'Error (hidden)' },
    });
    expect(() => toAgUi({ onError: 'x' as never })).toThrow('toAgUi: onError must be a function (error) => string');

    // An onError that throws tells 'An error occurred.' instead, and the stream goes on to the run's end.
    const error = { name: 'ModelError', message: '10.0.0.3 refused' };
    const childEvent = (event: Record<string, unknown>) => ({
      type: 'tool-progress',
      runId: 'r',
      iteration: 0,
      callId: 'c1',
      value: { runId: 'child', ...event },
    });
    const failed = [
      { type: 'run-start', runId: 'r' },
      childEvent({ type: 'error', error, source: 'model' }),
      childEvent({ type: 'run-end', reason: 'error', text: '', usage }),
      threshold,
      { type: 'error', runId: 'r', error, source: 'model' },
      { type: 'run-end', runId: 'r', reason: 'error', text: '', usage },
    ] as unknown as AgentEvent[];
    const throwing = () => {
      throw new Error('the masking failed');
    };
    const told = (await collect(from(failed).pipe(toAgUi({ onError: throwing })))) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(told)).toEqual([]);
    expect(told.slice(1)).toEqual([
      { type: 'SUBAGENT_STARTED', subagentRunId: 'child', name: 'agent', parentToolCallId: 'c1' },
      { type: 'CUSTOM', name: 'error', value: { error: { name: 'ModelError', message: 'An error occurred.' }, source: 'model' }, subagentRunId: 'child' },
      { type: 'SUBAGENT_ERROR', subagentRunId: 'child', message: 'An error occurred.', code: 'ModelError' },
      { type: 'CUSTOM', name: 'error-threshold-exceeded', value: { consecutiveErrors: 3, maxAllowed: 3, lastError: 'An error occurred.' } },
      { type: 'CUSTOM', name: 'error', value: { error: { name: 'ModelError', message: 'An error occurred.' }, source: 'model' } },
      { type: 'RUN_ERROR', message: 'An error occurred.', code: 'ModelError' },
    ]);
    // So does one that returns no string (it only logged).
    const silent = (() => undefined) as unknown as () => string;
    expect(await collect(from(failed).pipe(toAgUi({ onError: silent })))).toEqual(told);
  });

  it("keeps the client's state: its initial state and what earlier runs set stay (the AG-UI client applies the events)", async () => {
    const runs = [
      [{ type: 'run-start', runId: 'r1' }, change('r1', 'cart', { items: 1 }), { type: 'run-end', runId: 'r1', reason: 'completed', text: '' }],
      [
        { type: 'run-start', runId: 'r2' },
        change('r2', 'prefs', { lang: 'en' }),
        change('r2', 'cart', { items: 2 }),
        { type: 'run-end', runId: 'r2', reason: 'completed', text: '' },
      ],
    ] as unknown as AgentEvent[][];
    class Scripted extends AbstractAgent {
      run(input: RunAgentInput) {
        return from(runs.shift() ?? []).pipe(toAgUi({ threadId: input.threadId, runId: input.runId })) as unknown as ReturnType<AbstractAgent['run']>;
      }
    }
    const client = new Scripted({ initialState: { theme: 'dark' } });
    await client.runAgent();
    expect(client.state).toEqual({ theme: 'dark', cart: { items: 1 } });
    await client.runAgent();
    expect(client.state).toEqual({ theme: 'dark', cart: { items: 2 }, prefs: { lang: 'en' } });
  });

  it("takes the ids of the input it echoes: RUN_STARTED and RUN_FINISHED say the input's threadId and runId", async () => {
    const run = [
      { type: 'run-start', runId: 'run_internal' },
      { type: 'run-end', runId: 'run_internal', reason: 'completed', text: '', usage },
    ] as AgentEvent[];
    const input: RunAgentInput = { threadId: 't', runId: 'r1', messages: [], tools: [], context: [], state: {}, forwardedProps: {} };
    const events = (await collect(of(...run).pipe(toAgUi({ input })))) as unknown as Array<Record<string, unknown>>;
    expect(schemaFailures(events)).toEqual([]);
    expect(events.map((e) => [e.type, e.threadId, e.runId])).toEqual([
      ['RUN_STARTED', 't', 'r1'],
      ['RUN_FINISHED', 't', 'r1'],
    ]);
    expect(events[0].input).toBe(input);
    // Options given still win.
    const named = (await collect(of(...run).pipe(toAgUi({ input, threadId: 'other', runId: 'mine' })))) as unknown as Array<Record<string, unknown>>;
    expect(named.map((e) => [e.threadId, e.runId])).toEqual([
      ['other', 'mine'],
      ['other', 'mine'],
    ]);
  });
});

describe('toAgUiFrames (what agUiHandler sends)', () => {
  it('writes each event as data: <JSON>\\n\\n, the text deltas made from their text alone, byte for byte the same', async () => {
    const agent = createAgent({
      model: scriptedModel([
        { reasoning: 'r', text: ['He said "hi"\n', '</script>\u2028😀'], toolCalls: [{ name: 'lookup', args: { q: 'x' }, callId: 'c1' }] },
        'ok',
      ]),
      tools: [lookup],
    });
    // One run's events, mapped both ways (another run would have other message ids).
    const run = await collect(agent.run('go', { runId: 'r' }));
    const events = await collect(from(run).pipe(toAgUi({ threadId: 't' })));
    const frames = await collect(from(run).pipe(toAgUiFrames({ threadId: 't' })));
    expect(frames).toEqual(events.map((e) => `data: ${JSON.stringify(e)}\n\n`));
    expect(frames.filter((f) => f.includes('TEXT_MESSAGE_CONTENT'))).toHaveLength(3);
  });

  it('sends what JSON cannot hold as strings saying so, and the rest of the run: the real client takes every frame', async () => {
    const loop: Record<string, unknown> = { name: 'loop' };
    loop.self = loop;
    const run = [
      { type: 'run-start', runId: 'r' },
      change('r', 'counter', { n: 1n, label: 'big' }),
      { type: 'iteration-start', runId: 'r', iteration: 0, messageId: 'msg_a' },
      { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c1', name: 'add', args: { n: 2n } },
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c1', value: loop },
      { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c1', name: 'add', result: 3n, isError: false },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Three.' },
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      { type: 'run-end', runId: 'r', reason: 'completed', text: 'Three.', usage, output: { total: 3n } },
    ] as unknown as AgentEvent[];
    const server = await serveFetch(
      async () =>
        new Response(toReadableStream(from(run).pipe(toAgUiFrames({ threadId: 't' }))).pipeThrough(new TextEncoderStream()), {
          headers: { 'content-type': 'text/event-stream' },
        }),
    );
    try {
      const ui = new HttpAgent({ url: server.url, threadId: 't' });
      ui.messages.push({ id: 'u1', role: 'user', content: 'Add' });
      const seen: BaseEvent[] = [];
      const { result } = await ui.runAgent({ runId: 'r' }, { onEvent: ({ event }) => void seen.push(event) });
      expect(schemaFailures(seen)).toEqual([]);
      const cannot = 'The value could not be sent: Do not know how to serialize a BigInt';
      expect(ui.state).toEqual({ counter: { n: cannot, label: 'big' } });
      expect(seen.find((e) => e.type === EventType.TOOL_CALL_ARGS)).toMatchObject({
        delta: 'The arguments could not be sent: Do not know how to serialize a BigInt',
      });
      expect(seen.find((e) => e.type === EventType.CUSTOM)).toMatchObject({
        name: 'tool-progress',
        value: { callId: 'c1', value: { name: 'loop', self: expect.stringMatching(/^The value could not be sent: Converting circular structure/) } },
      });
      expect(seen.find((e) => e.type === EventType.TOOL_CALL_RESULT)).toMatchObject({
        content: 'The tool result could not be sent: Do not know how to serialize a BigInt',
        metadata: { 'rx-agent': { isError: true } },
      });
      expect(ui.messages.find((m) => m.id === 'msg_a')).toMatchObject({ role: 'assistant', content: 'Three.' });
      expect(result).toEqual({ text: 'Three.', reason: 'completed', output: { total: cannot } });
    } finally {
      await server.close();
    }
  });
});

describe('toAgUi with a sub-agent (agent.asTool)', () => {
  const researchAgents = (childTurn: Parameters<typeof scriptedModel>[0][number]) => {
    const child = createAgent({ name: 'researcher', model: scriptedModel([childTurn]), idGenerator: (p) => `kid-${p}` });
    const model = scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'tides' }, callId: 'c1' }] }, 'Done.', 'Bye.']);
    return { model, parent: createAgent({ model, tools: [child.asTool({ name: 'research', description: 'Looks things up' })] }) };
  };

  it('gives the sub-agent its segment: SUBAGENT_STARTED, its text under its subagentRunId, SUBAGENT_FINISHED with its answer', async () => {
    const { parent } = researchAgents({ text: ['Tides ', 'are high.'] });
    const events = await collect(parent.run('go', { runId: 'p' }).pipe(toAgUi()));
    expect(schemaFailures(events)).toEqual([]);
    const segment = events.filter((e) => (e as { subagentRunId?: string }).subagentRunId === 'kid-run');
    expect(segment.map((e) => e.type)).toEqual([
      'SUBAGENT_STARTED',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_END',
      'SUBAGENT_FINISHED',
    ]);
    expect(segment[0]).toMatchObject({ name: 'research', parentToolCallId: 'c1' });
    expect(segment.at(-1)).toEqual({ type: 'SUBAGENT_FINISHED', subagentRunId: 'kid-run', outcome: { type: 'success' }, result: 'Tides are high.' });
    // Between the call's end and its result.
    const types: string[] = events.map((e) => e.type);
    expect(types.indexOf('TOOL_CALL_END')).toBeLessThan(types.indexOf('SUBAGENT_STARTED'));
    expect(types.indexOf('SUBAGENT_FINISHED')).toBeLessThan(types.indexOf('TOOL_CALL_RESULT'));
  });

  it("the real client takes the segment: the sub-agent's message carries its subagentRunId and stays out of the next turn's history", async () => {
    const { parent, model } = researchAgents({ text: 'Tides are high.' });
    const ui = new AgUiAgent(parent, { threadId: 't' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'Tides?' });
    await ui.runAgent({ runId: 'one' });
    expect(ui.messages.map((m) => [m.role, m.content, (m as { subagentRunId?: string }).subagentRunId])).toEqual([
      ['user', 'Tides?', undefined],
      ['assistant', undefined, undefined],
      ['tool', 'Tides are high.', undefined], // the client puts a result next to its call
      ['assistant', 'Tides are high.', 'kid-run'],
      ['assistant', 'Done.', undefined],
    ]);
    ui.messages.push({ id: 'u2', role: 'user', content: 'Thanks' });
    await ui.runAgent({ runId: 'two' });
    expect(model.requests[2].messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant', 'user']);
  });

  it('a sub-agent that fails ends with SUBAGENT_ERROR naming the error (its text masked unless onError tells it)', async () => {
    const { parent } = researchAgents({ error: new Error('quota exceeded') });
    const events = await collect(parent.run('go').pipe(toAgUi({ onError: (e) => e.message })));
    expect(schemaFailures(events)).toEqual([]);
    expect(events.find((e) => e.type === EventType.SUBAGENT_ERROR)).toEqual({
      type: 'SUBAGENT_ERROR',
      subagentRunId: 'kid-run',
      message: 'quota exceeded',
      code: 'Error',
    });
    const { parent: again } = researchAgents({ error: new Error('quota exceeded') });
    const masked = await collect(again.run('go').pipe(toAgUi()));
    expect(masked.find((e) => e.type === EventType.SUBAGENT_ERROR)).toEqual({
      type: 'SUBAGENT_ERROR',
      subagentRunId: 'kid-run',
      message: 'An error occurred.',
      code: 'Error',
    });
    // The call's result is the text the parent's model read: it goes out as it is; no error event tells the error's text.
    expect(JSON.stringify(masked.filter((e) => e.type !== EventType.TOOL_CALL_RESULT))).not.toContain('quota exceeded');
  });
});
