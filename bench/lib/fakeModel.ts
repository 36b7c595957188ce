/**
 * Fake models with the shape of a real SDK stream: an async generator wrapped in the project's own
 * `fromAsyncIterable` (as src/model/openAIChat.ts does). No network.
 */
import type { Observable } from 'rxjs';
import { fromAsyncIterable, type ModelClient, type ModelRequest, type ModelUpdate } from '../../src/index';

/** The S1 delta: ONE shared object, created once, seen by the floor and by rx-agent alike. */
export const TOK: ModelUpdate = { type: 'text-delta', text: 'tok ' };
const FINISH_STOP: ModelUpdate = { type: 'finish', reason: 'stop' };
const FINISH_TOOLS: ModelUpdate = { type: 'finish', reason: 'tool-calls' };
const SMALL_USAGE: ModelUpdate = { type: 'usage', inputTokens: 12, outputTokens: 5 };

/** S1: N text deltas (the shared TOK object), then usage and finish. */
// eslint-disable-next-line @typescript-eslint/require-await -- a model's stream is async; this fake one has nothing to wait for
export async function* s1Stream(n: number, usage: ModelUpdate): AsyncGenerator<ModelUpdate> {
  for (let i = 0; i < n; i++) yield TOK;
  yield usage;
  yield FINISH_STOP;
}

export function s1Usage(n: number): ModelUpdate {
  return { type: 'usage', inputTokens: 10, outputTokens: n };
}

/** S1's model: one turn streaming `n` deltas. */
export function s1Model(n: number): ModelClient {
  const usage = s1Usage(n);
  return () => fromAsyncIterable(() => s1Stream(n, usage));
}

// eslint-disable-next-line @typescript-eslint/require-await -- a model's stream is async; this fake one has nothing to wait for
async function* toolTurn(callId: string, name: string, argsJson: string): AsyncGenerator<ModelUpdate> {
  yield { type: 'tool-call-delta', index: 0, callId, name, argsDelta: argsJson };
  yield SMALL_USAGE;
  yield FINISH_TOOLS;
}

// eslint-disable-next-line @typescript-eslint/require-await -- a model's stream is async; this fake one has nothing to wait for
async function* textTurn(text: string): AsyncGenerator<ModelUpdate> {
  yield { type: 'text-delta', text };
  yield SMALL_USAGE;
  yield FINISH_STOP;
}

export const S2_FINAL_TEXT = 'done';

/** S2's model (one per run): `k` turns each asking for `echo({ i })`, then the final text. */
export function s2Model(k: number): ModelClient & { calls(): number } {
  let i = 0;
  const client = ((_request: ModelRequest): Observable<ModelUpdate> =>
    fromAsyncIterable(() => {
      const n = i++;
      return n < k ? toolTurn(`call_${n}`, 'echo', `{"i":${n}}`) : textTurn(S2_FINAL_TEXT);
    })) as ModelClient & { calls(): number };
  client.calls = () => i;
  return client;
}

export const S3_FINAL_TEXT = 'released';

/**
 * S3's model (shared by every run of the agent): asks for one call of `toolName` and, once the
 * last message is the tool's result, answers with the final text. Reads `request.messages`, as a
 * real adapter does.
 */
export function s3Model(toolName: string): ModelClient {
  return (request: ModelRequest) =>
    fromAsyncIterable(() => {
      const messages = request.messages;
      const last = messages[messages.length - 1];
      return last?.role === 'tool' ? textTurn(S3_FINAL_TEXT) : toolTurn('call_0', toolName, '{}');
    });
}
