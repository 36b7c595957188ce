/**
 * S1 through a UI protocol: the S1 run (N text deltas, the five operators) mapped and encoded as
 * the SSE frames `agUiHandler` / `aiSdkHandler` send (`data: <JSON>\n\n`, the operators they use);
 * the consumer counts the text frames. Floor: S1's `for await` over the same generator.
 */
import { lastValueFrom, toArray, type OperatorFunction } from 'rxjs';
import { createAgent, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { toAgUiFrames } from '../../src/ag-ui/toAgUi';
import { toUIMessageFrames } from '../../src/ai-sdk/toUIMessageStream';
import { benchPair, check, withTimeout, type Measured } from '../lib/harness';
import { s1Model } from '../lib/fakeModel';
import { N, S1_PAIRS, s1Floor } from './s1';

export interface S1UiResult {
  readonly floor: Measured;
  readonly agUi: Measured;
  readonly aiSdk: Measured;
}

/**
 * One run through `frames`. The consumer counts the frames and their characters (what a writer
 * does; reading a frame's text would flatten the concatenated string, which the byte encoding of
 * the response does, not the mapping measured here) and checks, at the end, that there are N
 * text frames more than in a run of no delta, and the last frame.
 */
function s1Encoded(
  middleware: readonly AgentMiddleware[],
  frames: OperatorFunction<AgentEvent, string>,
  lastMark: string,
  others: number,
  n = N,
): () => Promise<void> {
  const agent = createAgent({ model: s1Model(n), middleware });
  return () =>
    withTimeout(
      new Promise<void>((resolve, reject) => {
        let count = 0;
        let chars = 0;
        let last = '';
        agent
          .run('Say tok many times')
          .pipe(frames)
          .subscribe({
            next(frame) {
              count++;
              chars += frame.length;
              last = frame;
            },
            error: reject,
            complete() {
              try {
                // piiRedaction (on output) sends a held-back delta with the next: fewer text frames than deltas.
                check(count > others && count <= n + others, `S1 (${lastMark}) sent ${count} frames, expected at most ${n} text frames and ${others} others`);
                check(last.startsWith(lastMark), `S1 (${lastMark}) ended with ${last.slice(0, 60)}`);
                check(chars > n * 20, `S1 (${lastMark}) sent ${chars} characters`);
                resolve();
              } catch (e) {
                reject(e);
              }
            },
          });
      }),
      60_000,
      'an S1 UI run',
    );
}

/** The frames of a run that streams no text delta (the text message's start and end included). */
async function framesBeside(middleware: readonly AgentMiddleware[], frames: OperatorFunction<AgentEvent, string>, textMark: string): Promise<number> {
  const all = await lastValueFrom(
    createAgent({ model: s1Model(10), middleware })
      .run('Say tok')
      .pipe(frames, toArray()),
  );
  return all.filter((frame) => !frame.startsWith(textMark)).length;
}

export async function runS1Ui(middleware: readonly AgentMiddleware[]): Promise<S1UiResult> {
  const agUiFrames = toAgUiFrames();
  const aiSdkFrames = toUIMessageFrames();
  const agUiOthers = await framesBeside(middleware, agUiFrames, 'data: {"type":"TEXT_MESSAGE_CONTENT"');
  const aiSdkOthers = await framesBeside(middleware, aiSdkFrames, 'data: {"type":"text-delta"');
  const [floor, agUi] = await benchPair(N, () => s1Floor(N), s1Encoded(middleware, agUiFrames, 'data: {"type":"RUN_FINISHED"', agUiOthers), S1_PAIRS);
  const [, aiSdk] = await benchPair(N, () => s1Floor(N), s1Encoded(middleware, aiSdkFrames, 'data: {"type":"finish"', aiSdkOthers), S1_PAIRS);
  return { floor, agUi, aiSdk };
}
