/**
 * S1 through a UI protocol: the S1 run (N text deltas, the five operators) mapped and encoded as
 * the SSE frames `agUiHandler` / `aiSdkHandler` send (`data: <JSON>\n\n`, the operators they use);
 * the consumer counts the text frames. Floor: S1's `for await` over the same generator.
 */
import type { OperatorFunction } from 'rxjs';
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

/** One run through `frames`; checks the count of text frames and the stream's last frame. */
function s1Encoded(middleware: readonly AgentMiddleware[], frames: OperatorFunction<AgentEvent, string>, textMark: string, lastMark: string, n = N): () => Promise<void> {
  const agent = createAgent({ model: s1Model(n), middleware });
  return () =>
    withTimeout(
      new Promise<void>((resolve, reject) => {
        let count = 0;
        let bytes = 0;
        let last = '';
        agent
          .run('Say tok many times')
          .pipe(frames)
          .subscribe({
            next(frame) {
              if (frame.startsWith(textMark)) count++;
              bytes += frame.length;
              last = frame;
            },
            error: reject,
            complete() {
              try {
                check(count === n, `S1 (${textMark}) counted ${count} text frames, expected ${n}`);
                check(last.startsWith(lastMark), `S1 (${textMark}) ended with ${last.slice(0, 60)}, expected ${lastMark}`);
                check(bytes > n * 20, `S1 (${textMark}) sent ${bytes} characters`);
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

export async function runS1Ui(middleware: readonly AgentMiddleware[]): Promise<S1UiResult> {
  const [floor, agUi] = await benchPair(N, () => s1Floor(N), s1Encoded(middleware, toAgUiFrames(), 'data: {"type":"TEXT_MESSAGE_CONTENT"', 'data: {"type":"RUN_FINISHED"'), S1_PAIRS);
  const [, aiSdk] = await benchPair(N, () => s1Floor(N), s1Encoded(middleware, toUIMessageFrames(), 'data: {"type":"text-delta"', 'data: {"type":"finish"'), S1_PAIRS);
  return { floor, agUi, aiSdk };
}
