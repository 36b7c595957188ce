import OpenAI from 'openai';
import { lastValueFrom, toArray } from 'rxjs';
import { createAgent, createSession, type AgentEvent, type AgentMiddleware, type ModelClient } from '../../src/index';
import { openAIChat } from '../../src/openai/index';
import { startFakeOpenAIServer, type FakeOpenAIServer, type FakeOpenAITurn } from '../../src/testing/openAIServer';
import { modelFallback } from '../../operators/modelFallback';
import { modelRetry } from '../../operators/modelRetry';

/**
 * modelRetry and modelFallback over the real `openai` client and a loopback HTTP server that
 * answers 429 (with `retry-after-ms`), then 500, then cuts the connection mid-stream.
 * Real timers, small delays: the whole file runs well under 2 s.
 */

const servers: FakeOpenAIServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function serve(script: FakeOpenAITurn[]): Promise<{ server: FakeOpenAIServer; model: ModelClient }> {
  const server = await startFakeOpenAIServer(script);
  servers.push(server);
  const client = new OpenAI({ apiKey: 'test', baseURL: server.url });
  return { server, model: openAIChat({ client, model: 'gpt-test' }) };
}

const failingThrice: FakeOpenAITurn[] = [
  { status: 429, headers: { 'retry-after-ms': '40' } },
  { status: 500 },
  { text: ['Partial', ' answer', ' that', ' breaks'], dropAfterChunks: 2 },
];

async function run(model: ModelClient, middleware: AgentMiddleware[]) {
  const session = createSession();
  const started = Date.now();
  const events = await lastValueFrom(createAgent({ model, middleware }).run('Hello?', { runId: 'r', session }).pipe(toArray()));
  return { events, session, elapsed: Date.now() - started, ofType: (type: string) => events.filter((e) => e.type === type) };
}

const texts = (events: AgentEvent[]) => events.filter((e) => e.type === 'text-delta').map((e) => (e as { text: string }).text);

describe('resilience over the real openai client', () => {
  it('modelRetry recovers from 429 (retry-after-ms), 500 and a connection cut mid-stream', async () => {
    const { server, model } = await serve([...failingThrice, { text: ['Recovered', ' answer'] }]);
    const { events, session, elapsed, ofType } = await run(model, [modelRetry({ maxRetries: 3, initialDelayMs: 5, jitter: 0 })]);

    expect(server.requests).toHaveLength(4);
    expect(ofType('model-retry')).toEqual([
      { type: 'model-retry', runId: 'r', iteration: 0, attempt: 1, delayMs: 40, error: expect.objectContaining({ name: 'ModelError', status: 429 }) },
      { type: 'model-retry', runId: 'r', iteration: 0, attempt: 2, delayMs: 10, error: expect.objectContaining({ name: 'ModelError', status: 500 }) },
      { type: 'model-retry', runId: 'r', iteration: 0, attempt: 3, delayMs: 20, error: expect.objectContaining({ name: 'ModelError' }) },
    ]);
    expect((ofType('model-retry')[2] as { error: { status?: number } }).error.status).toBeUndefined(); // a cut: no HTTP status
    // The cut stream's text reached the UI (which drops it on model-retry) but not the turn.
    expect(texts(events)).toEqual(['Partial', ' answer', 'Recovered', ' answer']);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Recovered answer' });
    expect(session.messages.at(-1)).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: 'Recovered answer' }] });
    expect(elapsed).toBeGreaterThanOrEqual(70); // 40 + 10 + 20 ms of backoff really waited
    expect(elapsed).toBeLessThan(2000);
  });

  it('modelRetry with onFailure continue ends the turn with the failure message when retries run out', async () => {
    const { server, model } = await serve(failingThrice);
    const { events, session } = await run(model, [modelRetry({ maxRetries: 2, initialDelayMs: 5, jitter: 0, onFailure: 'continue' })]);
    expect(server.requests).toHaveLength(3);
    const end = events.at(-1) as { reason: string; text: string };
    expect(end.reason).toBe('completed');
    expect(end.text).toMatch(/^Model call failed after 3 attempts: .+/);
    expect(session.messages.at(-1)).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: end.text }] });
  });

  it('modelFallback recovers on a second server once the primary has failed every retry', async () => {
    const primary = await serve(failingThrice);
    const backup = await serve([{ text: ['From', ' the', ' fallback'] }]);
    const { events, session, elapsed, ofType } = await run(primary.model, [
      modelFallback(backup.model),
      modelRetry({ maxRetries: 2, initialDelayMs: 5, jitter: 0 }),
    ]);

    expect(primary.server.requests).toHaveLength(3);
    expect(backup.server.requests).toHaveLength(1);
    expect(backup.server.requests[0].messages).toEqual(primary.server.requests[0].messages);
    expect(ofType('model-retry').map((e) => (e as { delayMs: number }).delayMs)).toEqual([40, 10]);
    expect(ofType('model-fallback')).toEqual([{ type: 'model-fallback', runId: 'r', from: 0, to: 1, error: expect.objectContaining({ name: 'ModelError' }) }]);
    expect(texts(events)).toEqual(['Partial', ' answer', 'From', ' the', ' fallback']);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'From the fallback' });
    expect(session.messages.at(-1)).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: 'From the fallback' }] });
    expect(elapsed).toBeLessThan(2000);
  });

  it('modelFallback alone switches on an HTTP error and raises the last error when all fail', async () => {
    const primary = await serve([{ status: 503 }]);
    const backup = await serve([{ status: 400, body: { error: { message: 'Bad request body', type: 'invalid_request_error' } } }]);
    const { events, ofType } = await run(primary.model, [modelFallback(backup.model)]);
    expect(ofType('model-fallback')).toEqual([
      { type: 'model-fallback', runId: 'r', from: 0, to: 1, error: expect.objectContaining({ name: 'ModelError', status: 503 }) },
    ]);
    expect(ofType('error')).toEqual([{ type: 'error', runId: 'r', source: 'model', error: expect.objectContaining({ name: 'ModelError', status: 400 }) }]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });
});
