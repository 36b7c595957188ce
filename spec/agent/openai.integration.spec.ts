import OpenAI from 'openai';
import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineTool, textOf, type AgentEvent } from '../../src/index';
import { openAIChat } from '../../src/openai/index';
import { eventLabel, startFakeOpenAIServer, type FakeOpenAIServer } from '../../src/testing/index';

const weather = defineTool({
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, celsius: city === 'Paris' ? 21 : 14 }),
});

describe('an agent on the real openai client against a loopback SSE server', () => {
  let server: FakeOpenAIServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  const agentFor = (s: FakeOpenAIServer) =>
    createAgent({
      model: openAIChat({ client: new OpenAI({ apiKey: 'test', baseURL: s.url }), model: 'fake-model' }),
      instructions: 'You report the weather.',
      tools: [weather],
    });

  it('streams text, runs parallel tool calls from interleaved deltas, and answers', async () => {
    server = await startFakeOpenAIServer([
      {
        toolCalls: [
          { id: 'call_a', name: 'get_weather', args: { city: 'Paris' }, chunks: 3 },
          { id: 'call_b', name: 'get_weather', args: { city: 'Oslo' }, chunks: 3 },
        ],
        usage: { prompt_tokens: 40, completion_tokens: 12 },
      },
      { text: 'Paris is 21°C and Oslo 14°C.', usage: { prompt_tokens: 80, completion_tokens: 9 } },
    ]);
    const session = createSession();
    const events: AgentEvent[] = await lastValueFrom(agentFor(server).run('Weather in Paris and Oslo?', { session }).pipe(toArray()));
    expect(events.filter((e) => e.type === 'tool-call').map((e) => (e as { args: unknown }).args)).toEqual([{ city: 'Paris' }, { city: 'Oslo' }]);
    expect(events.at(-1)).toMatchObject({
      type: 'run-end',
      reason: 'completed',
      text: 'Paris is 21°C and Oslo 14°C.',
      usage: { inputTokens: 120, outputTokens: 21 },
    });
    expect(events.filter((e) => e.type === 'text-delta').length).toBeGreaterThan(3);
    const second = server.requests[1];
    expect(second.messages).toEqual([
      { role: 'system', content: 'You report the weather.' },
      { role: 'user', content: 'Weather in Paris and Oslo?' },
      expect.objectContaining({ role: 'assistant', tool_calls: [expect.objectContaining({ id: 'call_a' }), expect.objectContaining({ id: 'call_b' })] }),
      { role: 'tool', tool_call_id: 'call_a', content: JSON.stringify({ city: 'Paris', celsius: 21 }) },
      { role: 'tool', tool_call_id: 'call_b', content: JSON.stringify({ city: 'Oslo', celsius: 14 }) },
    ]);
    expect(session.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
  });

  it('cancelling during the stream aborts the HTTP request: the server sees the connection closed', async () => {
    server = await startFakeOpenAIServer([{ text: Array.from({ length: 50 }, (_, i) => `w${i} `), delayMs: 20 }]);
    const handle = agentFor(server).start('Talk slowly.');
    const closed = server.waitForClose();
    const labels: string[] = [];
    const done = new Promise<void>((resolve) => handle.events$.subscribe({ next: (e) => labels.push(eventLabel(e)), complete: resolve }));
    await new Promise<void>((resolve) => {
      const sub = handle.events$.subscribe((e) => {
        if (e.type === 'text-delta') {
          queueMicrotask(() => sub.unsubscribe());
          resolve();
        }
      });
    });
    const cancelledAt = performance.now();
    handle.cancel();
    await closed;
    expect(performance.now() - cancelledAt).toBeLessThan(200);
    await done;
    expect(labels.at(-1)).toBe('run-end:cancelled');
    expect(server.closedConnections()).toBe(1);
  });

  it('a connection dropped mid-stream ends the run with an error, keeping the input in the session', async () => {
    server = await startFakeOpenAIServer([{ text: ['Hello', ' there', ' friend'], dropAfterChunks: 2 }]);
    const session = createSession();
    const events = await lastValueFrom(agentFor(server).run('Hi', { session }).pipe(toArray()));
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:model', 'run-end:error']);
    expect(events.find((e) => e.type === 'error')).toMatchObject({ error: { name: 'ModelError' } });
    expect(session.messages.map(textOf)).toEqual(['Hi']);
  });

  it('an HTTP 400 is a ModelError with its status in the error event', async () => {
    server = await startFakeOpenAIServer([{ status: 400, body: { error: { message: 'Invalid model' } } }]);
    const events = await lastValueFrom(agentFor(server).run('Hi').pipe(toArray()));
    expect(events.find((e) => e.type === 'error')).toMatchObject({ source: 'model', error: { name: 'ModelError', status: 400 } });
  });
});
