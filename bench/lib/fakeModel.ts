/**
 * Fake models with the shape of a real SDK stream: an async generator wrapped in the project's own
 * `fromAsyncIterable` (as src/model/openAIChat.ts does). No network.
 */
import type { Observable } from 'rxjs';
import { fromAsyncIterable, type ModelClient, type ModelRequest, type ModelUpdate } from '../../src/index';

const FINISH_STOP: ModelUpdate = { type: 'finish', reason: 'stop' };
const FINISH_TOOLS: ModelUpdate = { type: 'finish', reason: 'tool-calls' };
const SMALL_USAGE: ModelUpdate = { type: 'usage', inputTokens: 12, outputTokens: 5 };

/**
 * S1's deltas, in a cycle: mostly `tok `, with digits and an `@` that make piiRedaction (on
 * output) look closer, none of them personal data, so the text comes out as it went in. Shared
 * objects, created once.
 */
export const S1_DELTAS: readonly ModelUpdate[] = ['tok ', 'tok ', 'v2 ', 'tok ', 'a@b ', 'tok ', '42 ', 'tok '].map((text): ModelUpdate => ({
  type: 'text-delta',
  text,
}));

/** The text S1 streams in `n` deltas. */
export function s1Text(n: number): string {
  let text = '';
  for (let i = 0; i < n; i++) text += (S1_DELTAS[i % S1_DELTAS.length] as { text: string }).text;
  return text;
}

/**
 * `BENCH_SKIP_READS=1` (profiling only, never in `npm run bench`): the fake models read nothing, to
 * tell the framework's own growth with K from the reading's effects on it (caches).
 */
const SKIP_READS = process.env.BENCH_SKIP_READS === '1';

/** Where {@link readRequest} leaves what it read, so that the reads are not optimised away. */
export let requestSink = 0;

/**
 * Reads a request the way an adapter with a conversion cache (openAIChat) does before encoding it:
 * every message, whose role and parts it looks at, every field of the newest message (the one it
 * has not converted yet), every tool and the instructions. What a loop pays here grows with the
 * history for any framework: it is the model's share, timed inside every S2 run (`s2Model`'s
 * `readingMs`), not the framework's.
 */
export function readRequest(request: ModelRequest): number {
  if (SKIP_READS) return 0;
  let sum = request.instructions?.length ?? 0;
  const messages = request.messages;
  const count = messages.length;
  for (let i = 0; i < count; i++) {
    const message = messages[i];
    sum += message.role.length + message.content.length;
  }
  const newest = count > 0 ? messages[count - 1] : undefined;
  if (newest) {
    for (const part of newest.content) {
      switch (part.type) {
        case 'text':
        case 'reasoning':
          sum += part.text.length;
          break;
        case 'tool-call':
          sum += part.callId.length + part.name.length + (typeof part.args === 'object' ? 1 : 0);
          break;
        case 'tool-result':
          sum += part.callId.length + part.name.length + (typeof part.result === 'object' ? 1 : 0) + (part.isError ? 1 : 0);
          break;
      }
    }
  }
  for (const tool of request.tools) sum += tool.name.length + tool.description.length + Object.keys(tool.parameters).length;
  requestSink = (requestSink + sum) | 0;
  return sum;
}

/** S1: N text deltas (the shared {@link S1_DELTAS} objects, in turn), then usage and finish. */
// eslint-disable-next-line @typescript-eslint/require-await -- a model's stream is async; this fake one has nothing to wait for
export async function* s1Stream(n: number, usage: ModelUpdate): AsyncGenerator<ModelUpdate> {
  const deltas = S1_DELTAS;
  for (let i = 0, d = 0; i < n; i++, d = d === deltas.length - 1 ? 0 : d + 1) yield deltas[d];
  yield usage;
  yield FINISH_STOP;
}

export function s1Usage(n: number): ModelUpdate {
  return { type: 'usage', inputTokens: 10, outputTokens: n };
}

/** S1's model: reads its request, then streams `n` deltas in one turn. */
export function s1Model(n: number): ModelClient {
  const usage = s1Usage(n);
  return (request) => {
    readRequest(request);
    return fromAsyncIterable(() => s1Stream(n, usage));
  };
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

/** S2's model, with what it tells about its own work. */
export type S2Model = ModelClient & {
  /** The requests it answered. */
  calls(): number;
  /** The last request. */
  last(): ModelRequest | undefined;
  /** Milliseconds spent reading requests (wall time, `performance.now()`), since it was made. */
  readingMs(): number;
};

/**
 * S2's model, one for every run of an agent (as an app keeps its model client): reads its whole
 * request and decides from it, as a real model does: `echo({ i })` while the history holds fewer
 * than `k` calls, then the final text. It times its reading, so that S2 can tell the loop's own
 * work from the model's inside the same run (the reading costs more there than alone: the history
 * is spread among the run's other objects, and reading it evicts the loop's from the caches).
 */
export function s2Model(k: number): S2Model {
  let calls = 0;
  let last: ModelRequest | undefined;
  let readingMs = 0;
  const client = ((request: ModelRequest): Observable<ModelUpdate> =>
    fromAsyncIterable(() => {
      const start = performance.now();
      readRequest(request);
      readingMs += performance.now() - start;
      last = request;
      calls++;
      // The question, then an assistant call and its tool result per iteration so far.
      const n = (request.messages.length - 1) >> 1;
      return n < k ? toolTurn(`call_${n}`, 'echo', `{"i":${n}}`) : textTurn(S2_FINAL_TEXT);
    })) as S2Model;
  client.calls = () => calls;
  client.last = () => last;
  client.readingMs = () => readingMs;
  return client;
}

export const S3_FINAL_TEXT = 'released';

/**
 * S3's model (shared by every run of the agent): asks for one call of `toolName` and, once the
 * last message is the tool's result, answers with the final text. Reads its whole request, as a
 * real adapter does.
 */
export function s3Model(toolName: string): ModelClient {
  return (request: ModelRequest) =>
    fromAsyncIterable(() => {
      readRequest(request);
      const messages = request.messages;
      const last = messages[messages.length - 1];
      return last?.role === 'tool' ? textTurn(S3_FINAL_TEXT) : toolTurn('call_0', toolName, '{}');
    });
}
