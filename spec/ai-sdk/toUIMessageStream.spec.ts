import { safeValidateTypes } from '@ai-sdk/provider-utils';
import { readUIMessageStream, uiMessageChunkSchema, type UIMessage, type UIMessageChunk as AiChunk } from 'ai';
import { Subject, from, lastValueFrom, of, toArray, type Observable } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineTool, ModelError, toReadableStream, type AgentEvent } from '../../src/index';
import { modelRetry, permissions } from '../../operators/index';
import { scriptedModel } from '../../src/testing/index';
import { fromUIMessages, toUIMessageStream, type UIMessageChunk } from '../../src/ai-sdk/index';
import { toUIMessageFrames } from '../../src/ai-sdk/toUIMessageStream';
import { unencodableCountTool } from '../support/specTools';

const collect = <T>(events$: Observable<T>) => lastValueFrom(events$.pipe(toArray()));
const usage = { inputTokens: 0, outputTokens: 0 };

/** Each chunk checked with the `ai` package's own chunk schema; the failures. */
export async function chunkFailures(chunks: readonly UIMessageChunk[]): Promise<string[]> {
  const failures: string[] = [];
  for (const chunk of chunks) {
    const result = await safeValidateTypes({ value: chunk, schema: uiMessageChunkSchema });
    if (!result.success) failures.push(`${JSON.stringify(chunk)}: ${result.error.message}`);
  }
  return failures;
}

/** The message `readUIMessageStream` builds from the chunks. */
async function lastMessage(chunks: readonly UIMessageChunk[]): Promise<UIMessage | undefined> {
  let last: UIMessage | undefined;
  for await (const message of readUIMessageStream({ stream: toReadableStream(of(...(chunks as AiChunk[]))) })) last = message;
  return last;
}

const lookup = defineTool({
  name: 'lookup',
  description: 'Looks up',
  parameters: z.object({ q: z.string() }),
  execute: ({ q }, ctx) => (ctx.progress(`finding ${q}`), { found: q }),
});

describe('toUIMessageStream', () => {
  it('maps a run to UI message stream v1 chunks the ai package reads into one assistant message', async () => {
    const model = scriptedModel([{ reasoning: 'hmm', text: 'Looking.', toolCalls: [{ name: 'lookup', args: { q: 'x' }, callId: 'c1' }] }, 'Found x.']);
    const chunks = await collect(
      createAgent({ model, tools: [lookup] })
        .run('go', { runId: 'r' })
        .pipe(toUIMessageStream({ messageId: 'm1' })),
    );
    expect(await chunkFailures(chunks)).toEqual([]);
    expect(chunks.map((c) => c.type)).toEqual([
      'start',
      'start-step',
      'reasoning-start',
      'reasoning-delta',
      'reasoning-end',
      'text-start',
      'text-delta',
      'text-end',
      'tool-input-start',
      'tool-input-delta',
      'tool-input-delta',
      'tool-input-available',
      'data-tool-progress',
      'tool-output-available',
      'finish-step',
      'start-step',
      'text-start',
      'text-delta',
      'text-end',
      'finish-step',
      'finish',
    ]);
    const message = await lastMessage(chunks);
    expect(message).toMatchObject({ id: 'm1', role: 'assistant' });
    expect(message!.parts).toMatchObject([
      { type: 'step-start' },
      { type: 'reasoning', text: 'hmm', state: 'done' },
      { type: 'text', text: 'Looking.', state: 'done' },
      { type: 'tool-lookup', toolCallId: 'c1', state: 'output-available', input: { q: 'x' }, output: { found: 'x' } },
      { type: 'data-tool-progress', id: 'c1', data: { callId: 'c1', value: 'finding x' } },
      { type: 'step-start' },
      { type: 'text', text: 'Found x.', state: 'done' },
    ]);
  });

  it('an approval request, a refusal, an error result, a failed and a cancelled run', async () => {
    const run = (end: AgentEvent): AgentEvent[] => [
      { type: 'run-start', runId: 'r' },
      { type: 'iteration-start', runId: 'r', iteration: 0 },
      { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c1', name: 'rm', args: { path: '/' } },
      { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c2', name: 'ls', args: {} },
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
      { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c2', name: 'ls', result: 'Error: EACCES', isError: true },
      end,
    ];
    const done = await collect(of(...run({ type: 'run-end', runId: 'r', reason: 'max-iterations', text: '', usage })).pipe(toUIMessageStream()));
    expect(await chunkFailures(done)).toEqual([]);
    expect(done.slice(2)).toEqual([
      { type: 'tool-input-start', toolCallId: 'c1', toolName: 'rm' },
      { type: 'tool-input-available', toolCallId: 'c1', toolName: 'rm', input: { path: '/' } },
      { type: 'tool-input-start', toolCallId: 'c2', toolName: 'ls' },
      { type: 'tool-input-available', toolCallId: 'c2', toolName: 'ls', input: {} },
      { type: 'tool-approval-request', approvalId: 'q1', toolCallId: 'c1' },
      { type: 'tool-output-denied', toolCallId: 'c1' },
      { type: 'tool-output-error', toolCallId: 'c2', errorText: 'Error: EACCES' },
      { type: 'finish-step' },
      { type: 'finish', finishReason: 'length' },
    ]);
    const parts = (await lastMessage(done))!.parts;
    expect(parts.map((p) => [p.type, (p as { state?: string }).state])).toEqual([
      ['step-start', undefined],
      ['tool-rm', 'output-denied'],
      ['tool-ls', 'output-error'],
    ]);
    expect(parts[1]).toMatchObject({ approval: { id: 'q1' } });

    const failed = await collect(of(...run({ type: 'run-end', runId: 'r', reason: 'error', text: '', usage })).pipe(toUIMessageStream()));
    expect(failed.at(-1)).toEqual({ type: 'error', errorText: 'An error occurred.' });
    const told = await collect(
      of(...run({ type: 'run-end', runId: 'r', reason: 'error', text: '', usage })).pipe(toUIMessageStream({ onError: (e) => e.message })),
    );
    expect(told.at(-1)).toEqual({ type: 'error', errorText: 'The run failed' });
    const errored = await collect(
      of(
        ...([
          { type: 'run-start', runId: 'r' },
          { type: 'error', runId: 'r', error: { name: 'ModelError', message: '503' }, source: 'model' },
          { type: 'run-end', runId: 'r', reason: 'error', text: '', usage },
        ] as AgentEvent[]),
      ).pipe(toUIMessageStream({ onError: (e) => `The model failed (${e.message})` })),
    );
    expect(await chunkFailures(errored)).toEqual([]);
    expect(errored).toEqual([
      { type: 'start' },
      { type: 'data-error', data: { error: { name: 'ModelError', message: 'The model failed (503)' }, source: 'model' }, transient: true },
      { type: 'error', errorText: 'The model failed (503)' },
    ]);
    const cancelled = await collect(of(...run({ type: 'run-end', runId: 'r', reason: 'cancelled', text: '', usage })).pipe(toUIMessageStream()));
    expect(cancelled.at(-1)).toEqual({ type: 'abort', reason: 'cancelled' });
  });

  it('a suspended run finishes with reason tool-calls: the stream waits for approvals', async () => {
    const suspended = {
      type: 'run-end',
      runId: 'r',
      reason: 'suspended',
      text: '',
      usage,
      pendingRequests: [{ requestId: 'q1', type: 'permission-request' }],
    } as unknown as AgentEvent;
    const chunks = await collect(
      of(
        ...([
          { type: 'run-start', runId: 'r' },
          { type: 'iteration-start', runId: 'r', iteration: 0 },
          { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hi' },
          suspended,
        ] as AgentEvent[]),
      ).pipe(toUIMessageStream()),
    );
    expect(await chunkFailures(chunks)).toEqual([]);
    expect(chunks.slice(-3)).toEqual([{ type: 'text-end', id: 'r-text-0' }, { type: 'finish-step' }, { type: 'finish', finishReason: 'tool-calls' }]);
  });
});

describe('toUIMessageStream: errors, requests, resumed steps', () => {
  it("onError sets the text of every error a chunk carries: data-error, data-model-retry, data-model-fallback, a threshold's last error", async () => {
    const error = { name: 'ModelError', message: 'secret 503', status: 503 };
    const events: AgentEvent[] = [
      { type: 'run-start', runId: 'r' },
      { type: 'iteration-start', runId: 'r', iteration: 0 },
      { type: 'model-retry', runId: 'r', iteration: 0, attempt: 1, error, delayMs: 0 },
      { type: 'model-fallback', runId: 'r', from: 0, to: 1, error },
      { type: 'error-threshold-exceeded', runId: 'r', consecutiveErrors: 3, maxAllowed: 3, lastError: 'Error: secret path /etc' },
      // A sub-agent's error (agent.asTool()), as its parent's progress.
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c1', value: { type: 'error', runId: 'child', error, source: 'model' } },
      { type: 'error', runId: 'r', error, source: 'model' },
      { type: 'run-end', runId: 'r', reason: 'error', text: '', usage },
    ];
    const masked = await collect(of(...events).pipe(toUIMessageStream({ onError: () => 'An error occurred.' })));
    expect(await chunkFailures(masked)).toEqual([]);
    expect(JSON.stringify(masked)).not.toContain('secret');
    const hidden = { name: 'ModelError', message: 'An error occurred.', status: 503 };
    expect(masked.slice(2)).toEqual([
      { type: 'data-model-retry', data: { iteration: 0, attempt: 1, error: hidden, delayMs: 0 }, transient: true },
      { type: 'data-model-fallback', data: { from: 0, to: 1, error: hidden }, transient: true },
      { type: 'data-error-threshold-exceeded', data: { consecutiveErrors: 3, maxAllowed: 3, lastError: 'An error occurred.' }, transient: true },
      { type: 'data-tool-progress', id: 'c1', data: { callId: 'c1', value: { type: 'error', runId: 'child', error: hidden, source: 'model' } } },
      { type: 'data-error', data: { error: hidden, source: 'model' }, transient: true },
      { type: 'finish-step' },
      { type: 'error', errorText: 'An error occurred.' },
    ]);
    // An onError that throws tells 'An error occurred.' instead, and the stream goes on to its end.
    const throwing = () => {
      throw new Error('the masking failed');
    };
    expect(await collect(of(...events).pipe(toUIMessageStream({ onError: throwing })))).toEqual(masked);
    // So does one that returns no string (it only logged).
    const silent = (() => undefined) as unknown as () => string;
    expect(await collect(of(...events).pipe(toUIMessageStream({ onError: silent })))).toEqual(masked);
    // Without onError, every error is masked so, as the AI SDK's own toUIMessageStream does by default.
    expect(await collect(of(...events).pipe(toUIMessageStream()))).toEqual(masked);
    // An onError that says the error's text sends them as they are.
    const plain = await collect(of(...events).pipe(toUIMessageStream({ onError: (e) => e.message })));
    expect(plain.at(-1)).toEqual({ type: 'error', errorText: 'secret 503' });
    expect(plain[2]).toMatchObject({ data: { error } });
  });

  it('the data chunk of a request other than an approval has the id to answer it with (aiSdkHandler: <runId>:<requestId>)', async () => {
    const events: AgentEvent[] = [
      { type: 'run-start', runId: 'r' },
      { type: 'iteration-start', runId: 'r', iteration: 0 },
      { type: 'continuation-request', runId: 'r', requestId: 'q1', iteration: 0, limit: 1 },
      { type: 'request-expired', runId: 'r', requestId: 'q1', reason: 'timeout' },
    ];
    const chunks = await collect(from(events).pipe(toUIMessageFrames({ approvalId: (runId, requestId) => `${runId}:${requestId}` })));
    expect(chunks.slice(2)).toEqual([
      `data: ${JSON.stringify({ type: 'data-continuation-request', id: 'r:q1', data: { requestId: 'q1', iteration: 0, limit: 1 }, transient: true })}\n\n`,
      `data: ${JSON.stringify({ type: 'data-request-expired', id: 'r:q1', data: { requestId: 'q1', reason: 'timeout' }, transient: true })}\n\n`,
    ]);
    const plain = await collect(from(events).pipe(toUIMessageStream()));
    expect(await chunkFailures(plain)).toEqual([]);
    expect(plain[2]).toMatchObject({ type: 'data-continuation-request', id: 'q1' });
  });

  it("a resumed run's stream finishes the step the client's message has open and opens no empty one", async () => {
    const resumed: AgentEvent[] = [
      { type: 'run-start', runId: 'r', resumed: true },
      { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c1', name: 'book', result: { booked: '19:00' }, isError: false },
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      { type: 'iteration-start', runId: 'r', iteration: 1, messageId: 'msg_2' },
      { type: 'text-delta', runId: 'r', iteration: 1, text: 'Booked.' },
      { type: 'iteration-end', runId: 'r', iteration: 1 },
      { type: 'run-end', runId: 'r', reason: 'completed', text: 'Booked.', usage },
    ];
    const chunks = await collect(from(resumed).pipe(toUIMessageStream()));
    expect(await chunkFailures(chunks)).toEqual([]);
    expect(chunks.map((c) => c.type)).toEqual([
      'start',
      'tool-output-available',
      'finish-step',
      'start-step',
      'text-start',
      'text-delta',
      'text-end',
      'finish-step',
      'finish',
    ]);
    // Read into the message the first stream left (one step, the call waiting for its approval).
    const first = await lastMessage([
      { type: 'start', messageId: 'm' },
      { type: 'start-step' },
      { type: 'tool-input-available', toolCallId: 'c1', toolName: 'book', input: { time: '19:00' } },
      { type: 'tool-approval-request', approvalId: 'q', toolCallId: 'c1' },
      { type: 'finish-step' },
      { type: 'finish', finishReason: 'tool-calls' },
    ]);
    let message: UIMessage | undefined;
    for await (const m of readUIMessageStream({ message: first, stream: toReadableStream(of(...(chunks as AiChunk[]))) })) message = m;
    expect(message!.parts.map((p) => [p.type, (p as { state?: string }).state])).toEqual([
      ['step-start', undefined],
      ['tool-book', 'output-available'],
      ['step-start', undefined],
      ['text', 'done'],
    ]);
  });
});

describe('toUIMessageStream: values JSON cannot hold (a BigInt, a cycle)', () => {
  /** A chunk's JSON, or what its JSON.stringify threw. */
  const json = (chunk: unknown): string => {
    try {
      return JSON.stringify(chunk);
    } catch (error) {
      return `JSON.stringify threw: ${(error as Error).message}`;
    }
  };
  const cannot = 'The value could not be sent: Do not know how to serialize a BigInt';

  it('the chunks carry what the frames send (any encoder takes them): a tool output JSON cannot hold is a tool-output-error; values JSON holds are the same objects', async () => {
    const count = unencodableCountTool();
    const counted = await collect(
      createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'count', args: { what: 'sheep' }, callId: 'c1' }] }, 'Counted.']), tools: [count] }).run('go', {
        runId: 'r',
      }),
    );
    const child = createAgent({ name: 'researcher', model: scriptedModel([{ reasoning: ['hm', 'm'], text: ['Tides ', 'are high.'] }]) });
    const researched = await collect(
      createAgent({
        model: scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'tides' }, callId: 'c9' }] }, 'Done.']),
        tools: [child.asTool({ name: 'research', description: 'Looks things up' })],
      }).run('go', { runId: 'p' }),
    );
    const loop: Record<string, unknown> = { name: 'loop' };
    loop.self = loop;
    const cart = { items: [{ sku: 'a', n: 2 }] };
    const found = { found: 'x', at: new Date(0) };
    const failing = {
      get n(): number {
        throw new Error('not now');
      },
    };
    const odd = [
      { type: 'run-start', runId: 'r', resumed: true },
      { type: 'state-changed', runId: 'r', key: 'counter', value: { n: 1n, label: 'big' } },
      { type: 'continuation-request', runId: 'r', requestId: 'q1', iteration: 0, limit: 5n },
      { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c2', name: 'count', args: { n: 2n } },
      { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c3', name: 'count', args: cart },
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c3', value: loop },
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c3', value: cart },
      { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c2', name: 'count', result: loop, isError: false },
      { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c3', name: 'count', result: found, isError: false },
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c4', value: { boxed: Object(1n) as object } },
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c4', value: failing },
      { type: 'run-end', runId: 'r', reason: 'completed', text: '', usage, output: { total: 3n } },
    ] as unknown as AgentEvent[];
    for (const run of [counted, researched, odd]) {
      const chunks = await collect(from(run).pipe(toUIMessageStream()));
      const frames = await collect(from(run).pipe(toUIMessageFrames()));
      expect(chunks.map((chunk) => `data: ${json(chunk)}\n\n`)).toEqual(frames);
      expect(await chunkFailures(chunks)).toEqual([]);
    }

    const chunks = await collect(from(counted).pipe(toUIMessageStream()));
    expect(chunks.filter((c) => c.type === 'data-tool-progress' || c.type.startsWith('tool-output'))).toEqual([
      { type: 'data-tool-progress', id: 'c1', data: { callId: 'c1', value: cannot } },
      {
        type: 'data-tool-progress',
        id: 'c1',
        data: { callId: 'c1', value: expect.stringMatching(/^The value could not be sent: Converting circular structure/) },
      },
      { type: 'tool-output-error', toolCallId: 'c1', errorText: 'The tool result could not be sent: Do not know how to serialize a BigInt' },
    ]);
    const oddChunks = await collect(from(odd).pipe(toUIMessageStream()));
    expect(oddChunks).toEqual([
      { type: 'start' },
      { type: 'data-state-changed', data: { key: 'counter', value: cannot }, transient: true },
      { type: 'data-continuation-request', id: 'q1', data: { requestId: 'q1', iteration: 0, limit: cannot }, transient: true },
      { type: 'tool-input-start', toolCallId: 'c2', toolName: 'count' },
      { type: 'tool-input-available', toolCallId: 'c2', toolName: 'count', input: 'The arguments could not be sent: Do not know how to serialize a BigInt' },
      { type: 'tool-input-start', toolCallId: 'c3', toolName: 'count' },
      { type: 'tool-input-available', toolCallId: 'c3', toolName: 'count', input: cart },
      {
        type: 'data-tool-progress',
        id: 'c3',
        data: { callId: 'c3', value: expect.stringMatching(/^The value could not be sent: Converting circular structure/) },
      },
      { type: 'data-tool-progress', id: 'c3', data: { callId: 'c3', value: cart } },
      { type: 'tool-output-error', toolCallId: 'c2', errorText: expect.stringMatching(/^The tool result could not be sent: Converting circular structure/) },
      { type: 'tool-output-available', toolCallId: 'c3', output: found },
      { type: 'data-tool-progress', id: 'c4', data: { callId: 'c4', value: cannot } },
      { type: 'data-tool-progress', id: 'c4', data: { callId: 'c4', value: 'The value could not be sent: not now' } },
      { type: 'finish', finishReason: 'stop' },
    ]);
    // What JSON holds goes out as it is: the same objects, not copies.
    const same = oddChunks as Array<{ input?: unknown; output?: unknown; data?: { value?: unknown } }>;
    expect(same[6].input).toBe(cart);
    expect(same[8].data!.value).toBe(cart);
    expect(same[10].output).toBe(found);
  });

  it("looks at a sub-agent's deltas (preliminary outputs, reasoning as progress) and the run's text without writing any JSON", async () => {
    const child = createAgent({ name: 'researcher', model: scriptedModel([{ reasoning: ['hm', 'm'], text: ['Tides ', 'are ', 'high.'] }]) });
    const run = await collect(
      createAgent({
        model: scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'tides' }, callId: 'c1' }] }, { text: ['Do', 'ne.'] }]),
        tools: [child.asTool({ name: 'research', description: 'Looks things up' })],
      }).run('go', { runId: 'p' }),
    );
    const stringify = jest.spyOn(JSON, 'stringify');
    try {
      const chunks = await collect(from(run).pipe(toUIMessageStream()));
      expect(stringify).not.toHaveBeenCalled();
      const outputs = chunks.filter((c) => c.type === 'tool-output-available' || c.type === 'data-tool-progress');
      expect(outputs.map((c) => ('data' in c ? (c.data as { value: AgentEvent }).value.type : 'output' in c ? c.output : c))).toEqual([
        'run-start',
        'reasoning-delta',
        'reasoning-delta',
        'Tides ',
        'Tides are ',
        'Tides are high.',
        'iteration-end',
        'run-end',
        'Tides are high.',
      ]);
    } finally {
      stringify.mockRestore();
    }
  });
});

describe('toUIMessageFrames (what aiSdkHandler sends)', () => {
  it('values JSON cannot hold (a BigInt, a cycle) go out as strings saying so, the tool result as an error; the run and its chunks go on', async () => {
    const count = unencodableCountTool();
    const model = scriptedModel([{ toolCalls: [{ name: 'count', args: { what: 'sheep' }, callId: 'c1' }] }, 'Counted.']);
    const frames = await collect(
      createAgent({ model, tools: [count] })
        .run('go', { runId: 'r' })
        .pipe(toUIMessageFrames({ messageId: 'm1' })),
    );
    const chunks = frames.map((frame) => JSON.parse(frame.slice('data: '.length)) as UIMessageChunk);
    expect(await chunkFailures(chunks)).toEqual([]);
    expect(chunks.filter((c) => c.type === 'data-tool-progress' || c.type.startsWith('tool-output'))).toEqual([
      { type: 'data-tool-progress', id: 'c1', data: { callId: 'c1', value: 'The value could not be sent: Do not know how to serialize a BigInt' } },
      {
        type: 'data-tool-progress',
        id: 'c1',
        data: { callId: 'c1', value: expect.stringMatching(/^The value could not be sent: Converting circular structure to JSON/) },
      },
      { type: 'tool-output-error', toolCallId: 'c1', errorText: 'The tool result could not be sent: Do not know how to serialize a BigInt' },
    ]);
    expect(chunks.at(-1)).toEqual({ type: 'finish', finishReason: 'stop' });
    const message = await lastMessage(chunks);
    expect(message!.parts.at(-1)).toMatchObject({ type: 'text', text: 'Counted.' });
    // ctx.progress() did not throw, and the model read the result as an error result saying why (runTools).
    expect(model.requests[1].messages.at(-1)).toMatchObject({
      role: 'tool',
      content: [{ callId: 'c1', result: 'The tool result could not be sent: Do not know how to serialize a BigInt', isError: true }],
    });

    // A tool's call input and an error result JSON cannot hold.
    const odd = await collect(
      from([
        { type: 'run-start', runId: 'r', resumed: true },
        { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c2', name: 'count', args: { n: 1n } },
        { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c2', name: 'count', result: { n: 1n }, isError: true },
      ] as AgentEvent[]).pipe(toUIMessageFrames()),
    );
    expect(odd.slice(2).map((frame) => JSON.parse(frame.slice('data: '.length)) as unknown)).toEqual([
      { type: 'tool-input-available', toolCallId: 'c2', toolName: 'count', input: 'The arguments could not be sent: Do not know how to serialize a BigInt' },
      { type: 'tool-output-error', toolCallId: 'c2', errorText: 'The tool result could not be sent: Do not know how to serialize a BigInt' },
    ]);
  });

  it('a mapping that fails errors the stream instead of throwing into the code that emitted the event', () => {
    const events = new Subject<AgentEvent>();
    const seen: unknown[] = [];
    events
      .pipe(
        toUIMessageFrames({
          approvalId: () =>
            ((): string => {
              throw new Error('boom');
            })(),
        }),
      )
      .subscribe({ next: (f) => seen.push(f), error: (e: Error) => seen.push(e.message) });
    events.next({ type: 'run-start', runId: 'r', resumed: true });
    expect(() => events.next({ type: 'permission-request', runId: 'r', requestId: 'q', callId: 'c', toolName: 't', args: {} })).not.toThrow();
    expect(seen).toEqual(['data: {"type":"start"}\n\n', 'boom']);
    expect(events.observed).toBe(false); // the run's events are let go of
  });

  it('writes each chunk as data: <JSON>\\n\\n, the text deltas made from their text alone, byte for byte the same', async () => {
    const agent = createAgent({
      model: scriptedModel([{ text: ['He said "hi"\n', '</script>\u2028😀'], toolCalls: [{ name: 'lookup', args: { q: 'x' }, callId: 'c1' }] }, 'ok']),
      tools: [lookup],
    });
    // One run's events, mapped both ways (another run would have other message ids).
    const run = await collect(agent.run('go', { runId: 'r' }));
    const chunks = await collect(from(run).pipe(toUIMessageStream()));
    const frames = await collect(from(run).pipe(toUIMessageFrames()));
    expect(frames).toEqual(chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`));
    expect(frames.filter((f) => f.includes('"text-delta"'))).toHaveLength(3);
  });
});

describe('toUIMessageStream message ids', () => {
  it("starts the UI message with the id of the run's first answer in the session's history; fromUIMessages keeps it", async () => {
    const session = createSession();
    const model = scriptedModel([{ toolCalls: [{ name: 'lookup', args: { q: 'x' }, callId: 'c1' }] }, 'Found x.']);
    const chunks = await collect(
      createAgent({ model, tools: [lookup] })
        .run('go', { session })
        .pipe(toUIMessageStream()),
    );
    expect(await chunkFailures(chunks)).toEqual([]);
    const history = session.snapshot().messages;
    expect(history.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(chunks[0]).toEqual({ type: 'start', messageId: history[1].id });
    let message: UIMessage | undefined;
    for await (const m of readUIMessageStream({ stream: toReadableStream(of(...chunks)) })) message = m;
    expect(message?.id).toBe(history[1].id);
    // Sent back, the UI message's id is its first message's again.
    const back = fromUIMessages([{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'go' }] }, message!]);
    expect(back.map((m) => [m.role, m.id])).toEqual([
      ['user', 'u1'],
      ['assistant', history[1].id],
      ['tool', undefined],
      ['assistant', undefined],
    ]);
  });

  it("holds the events before the first iteration until start; a resumed run's stream starts without an id", async () => {
    const events: AgentEvent[] = [
      { type: 'run-start', runId: 'r' },
      { type: 'skill-activated', runId: 'r', skill: 's' },
      { type: 'iteration-start', runId: 'r', iteration: 0, messageId: 'msg_1' },
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hi' },
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      { type: 'run-end', runId: 'r', reason: 'completed', text: 'Hi', usage },
    ];
    const chunks = await collect(of(...events).pipe(toUIMessageStream()));
    expect(chunks.slice(0, 3)).toEqual([
      { type: 'start', messageId: 'msg_1' },
      { type: 'data-skill-activated', data: { skill: 's' }, transient: true },
      { type: 'start-step' },
    ]);
    expect(await chunkFailures(chunks)).toEqual([]);
    const resumedRun: AgentEvent[] = [{ type: 'run-start', runId: 'r', resumed: true }, ...events.slice(2)];
    const resumed = await collect(from(resumedRun).pipe(toUIMessageStream()));
    expect(resumed[0]).toEqual({ type: 'start' });
    const given = await collect(of(...events).pipe(toUIMessageStream({ messageId: 'mine' })));
    expect(given[0]).toEqual({ type: 'start', messageId: 'mine' });
    // A run that ends before any iteration still starts its message.
    const early = await collect(of(events[0], events[1], events[5]).pipe(toUIMessageStream()));
    expect(early.map((c) => c.type)).toEqual(['start', 'data-skill-activated', 'finish']);
  });
});

describe('toUIMessageStream with a sub-agent (agent.asTool)', () => {
  it("streams the sub-agent's text as the call's preliminary output, which the ai package shows until the result replaces it", async () => {
    const child = createAgent({ name: 'researcher', model: scriptedModel([{ text: ['Tides ', 'are ', 'high.'] }]) });
    const model = scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'tides' }, callId: 'c1' }] }, 'Done.']);
    const parent = createAgent({ model, tools: [child.asTool({ name: 'research', description: 'Looks things up' })] });
    const chunks = await collect(parent.run('go').pipe(toUIMessageStream()));
    expect(await chunkFailures(chunks)).toEqual([]);
    expect(chunks.filter((c) => c.type === 'tool-output-available')).toEqual([
      { type: 'tool-output-available', toolCallId: 'c1', output: 'Tides ', preliminary: true },
      { type: 'tool-output-available', toolCallId: 'c1', output: 'Tides are ', preliminary: true },
      { type: 'tool-output-available', toolCallId: 'c1', output: 'Tides are high.', preliminary: true },
      { type: 'tool-output-available', toolCallId: 'c1', output: 'Tides are high.' },
    ]);
    // What the ai package builds as the chunks come: the part grows, then holds the result.
    const states: unknown[] = [];
    for await (const message of readUIMessageStream({ stream: toReadableStream(of(...(chunks as AiChunk[]))) })) {
      const part = message.parts.find((p) => p.type === 'tool-research') as { state: string; output?: unknown; preliminary?: boolean } | undefined;
      if (part?.state === 'output-available') states.push([part.output, part.preliminary === true]);
    }
    expect(states.at(0)).toEqual(['Tides ', true]);
    expect(states.at(-1)).toEqual(['Tides are high.', false]);
    // A resend of the chat before the result (a preliminary output) is no outcome: the call is left out.
    expect(
      fromUIMessages([
        {
          id: 'a',
          role: 'assistant',
          parts: [{ type: 'tool-research', toolCallId: 'c1', state: 'output-available', input: {}, output: 'Tid', preliminary: true }],
        },
      ]),
    ).toEqual([]);
  });
});

describe('toUIMessageStream and fromUIMessages: the next turn gives the model back what it read', () => {
  const book = defineTool({ name: 'book', description: 'Books', parameters: z.object({ time: z.string() }), needsApproval: true, execute: () => 'booked' });
  const noop = defineTool({ name: 'noop', description: 'Does nothing', parameters: z.object({ a: z.number().optional() }), execute: () => 'ok' });
  /** The calls and results of a history, as the model API takes them (JSON: an UnparsedArguments is its text). */
  const callsAndResults = (messages: ReadonlyArray<{ content: readonly object[] }>) =>
    JSON.parse(JSON.stringify(messages.flatMap((m) => m.content).filter((part) => (part as { type: string }).type !== 'text'))) as unknown[];

  /** Runs `agent` on 'go', reads its chunks with the `ai` package, and sends the message back through fromUIMessages. */
  async function roundTrip(agent: ReturnType<typeof createAgent>, options: Parameters<ReturnType<typeof createAgent>['run']>[1] = {}) {
    const chunks = await collect(agent.run('go', options).pipe(toUIMessageStream()));
    expect(await chunkFailures(chunks)).toEqual([]);
    const message = (await lastMessage(chunks))!;
    return { chunks, message, history: fromUIMessages([{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'go' }] }, message]) };
  }

  it("a refusal in permissions()'s words: by policy, and a question that timed out", async () => {
    const policy = scriptedModel([{ toolCalls: [{ name: 'book', args: { time: '7' }, callId: 'c1' }] }, 'Not booked.']);
    const refused = await roundTrip(createAgent({ model: policy, tools: [book], middleware: [permissions({ tools: { book: 'deny' } })] }));
    expect(refused.message.parts.find((p) => p.type === 'tool-book')).toMatchObject({ state: 'output-denied' });
    expect(callsAndResults(refused.history)).toEqual(callsAndResults(policy.requests[1].messages));
    expect(callsAndResults(refused.history)).toContainEqual(expect.objectContaining({ result: "Permission denied for 'book': denied by policy" }));

    const unanswered = scriptedModel([{ toolCalls: [{ name: 'book', args: { time: '7' }, callId: 'c1' }] }, 'Not booked.']);
    const late = await roundTrip(createAgent({ model: unanswered, tools: [book], middleware: [permissions({ timeout: 5 })] }));
    expect(late.message.parts.find((p) => p.type === 'tool-book')).toMatchObject({ state: 'output-denied', approval: { id: expect.any(String) } });
    expect(callsAndResults(late.history)).toEqual(callsAndResults(unanswered.requests[1].messages));
    expect(callsAndResults(late.history)).toContainEqual(expect.objectContaining({ result: "Permission denied for 'book': timed out" }));
  });

  it('arguments that were not JSON: the call as the model wrote it, beside the error it read', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'noop', args: '{"a":', callId: 'c1' }] }, 'Done.']);
    const { chunks, message, history } = await roundTrip(createAgent({ model, tools: [noop] }));
    expect(chunks.find((c) => c.type === 'tool-input-error')).toMatchObject({ toolCallId: 'c1', input: '{"a":' });
    expect(message.parts.find((p) => p.type === 'tool-noop')).toMatchObject({ state: 'output-error', input: undefined, rawInput: '{"a":' });
    expect(callsAndResults(history)).toEqual(callsAndResults(model.requests[1].messages));
    expect(callsAndResults(history)[0]).toEqual({ type: 'tool-call', callId: 'c1', name: 'noop', args: '{"a":' });
  });

  it('a call whose answer a model retry dropped ends as an error part, not input-streaming, and stays out of the history', async () => {
    const model = scriptedModel([
      { toolCalls: [{ name: 'noop', args: { a: 1 }, callId: 'cut' }], error: new ModelError('flaky', { retryable: true }), errorAfter: 1 },
      'Answered without tools.',
    ]);
    const agent = createAgent({ model, tools: [noop], middleware: [modelRetry({ maxRetries: 1, initialDelayMs: 0 })] });
    const session = createSession();
    const { chunks, message, history } = await roundTrip(agent, { session });
    expect(chunks.map((c) => c.type)).toEqual([
      'start',
      'start-step',
      'tool-input-start',
      'tool-input-delta',
      'tool-input-error',
      'data-model-retry',
      'text-start',
      'text-delta',
      'text-end',
      'finish-step',
      'finish',
    ]);
    expect(message.parts.find((p) => p.type === 'tool-noop')).toMatchObject({
      state: 'output-error',
      rawInput: chunks
        .filter((c) => c.type === 'tool-input-delta')
        .map((c) => (c as { inputTextDelta: string }).inputTextDelta)
        .join(''),
      errorText: "The call was not made: the model's answer was cut off before its arguments were complete.",
    });
    // The run's own history has no such call: the one sent back is the same.
    expect(session.snapshot().messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(history.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(callsAndResults(history)).toEqual([]);
  });

  it('a call still streaming when the run fails is settled too', async () => {
    const model = scriptedModel([
      { toolCalls: [{ name: 'noop', args: { a: 1 }, callId: 'cut' }], error: new ModelError('down', { retryable: false }), errorAfter: 1 },
    ]);
    const { chunks, message, history } = await roundTrip(createAgent({ model, tools: [noop] }));
    expect(chunks.map((c) => c.type).slice(-4)).toEqual(['data-error', 'tool-input-error', 'finish-step', 'error']);
    expect(message.parts.find((p) => p.type === 'tool-noop')).toMatchObject({ state: 'output-error' });
    expect(callsAndResults(history)).toEqual([]);
  });
});
