/**
 * Abort latency: time from unsubscribing a run mid-stream to the loopback server (the project's
 * fake OpenAI server) seeing that request's connection closed. Real `openai` client + openAIChat.
 */
import { performance } from 'node:perf_hooks';
import OpenAI from 'openai';
import { createAgent, type AgentMiddleware } from '../../src/index';
import { openAIChat } from '../../src/openai/index';
import { startFakeOpenAIServer } from '../../src/testing/openAIServer';
import { check, deferred, median, withTimeout } from '../lib/harness';

const RUNS = 9; // + 1 warm-up

export interface AbortResult {
  readonly msToClose: number;
  readonly samples: number[];
}

export async function runAbort(middleware: readonly AgentMiddleware[]): Promise<AbortResult> {
  // Each request streams a long answer slowly, so it is surely still streaming when we unsubscribe.
  const turn = { text: Array.from({ length: 2000 }, () => 'tok '), delayMs: 2 };
  const server = await startFakeOpenAIServer(Array.from({ length: RUNS + 1 }, () => turn));
  try {
    const client = new OpenAI({ apiKey: 'test', baseURL: server.url, maxRetries: 0 });
    const agent = createAgent({ model: openAIChat({ client, model: 'fake' }), middleware });
    const samples: number[] = [];
    for (let r = 0; r <= RUNS; r++) {
      const firstDelta = deferred();
      let deltas = 0;
      let ended = false;
      const subscription = agent.run('Stream forever').subscribe({
        next(e) {
          if (e.type === 'text-delta' && ++deltas === 3) firstDelta.resolve();
          if (e.type === 'run-end') ended = true;
        },
      });
      await withTimeout(firstDelta.promise, 10_000, 'abort: the stream starting');
      check(!ended, 'abort: the run ended before it was unsubscribed');
      const closed = server.waitForClose();
      const closesBefore = server.closedConnections();
      const t0 = performance.now();
      subscription.unsubscribe();
      await withTimeout(closed, 5_000, 'abort: the server seeing the connection closed');
      const ms = performance.now() - t0;
      check(server.closedConnections() === closesBefore + 1, 'abort: the server did not count the closed connection');
      if (r > 0) samples.push(ms);
    }
    check(server.requests.length === RUNS + 1, `abort: server saw ${server.requests.length} requests, expected ${RUNS + 1}`);
    return { msToClose: median(samples), samples };
  } finally {
    await server.close();
  }
}
