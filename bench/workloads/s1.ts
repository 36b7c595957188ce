/**
 * S1 streaming: one model turn streams N text deltas of 'tok ' through createAgent with the five
 * operators; the consumer counts `text-delta` events. Floor: a `for await` over the same generator.
 */
import { createAgent, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { benchPair, check, type Measured } from '../lib/harness';
import { s1Model, s1Stream, s1Usage } from '../lib/fakeModel';

export const N = 100_000;
/** Alternating floor/rx-agent pairs: the ratio's spread comes mostly from the floor's run-to-run variation. */
export const S1_PAIRS = 11;

export interface S1Result {
  readonly floor: Measured;
  readonly rx: Measured;
}

/** The floor: a `for await` loop over the same generator (same shared delta objects). */
export async function s1Floor(n = N): Promise<void> {
  let count = 0;
  for await (const update of s1Stream(n, s1Usage(n))) if (update.type === 'text-delta') count++;
  check(count === n, `S1 floor counted ${count} deltas, expected ${n}`);
}

/** One rx-agent run of S1 (checks the count, the run end and the assembled text). */
export function s1Agent(middleware: readonly AgentMiddleware[], n = N): () => Promise<void> {
  const agent = createAgent({ model: s1Model(n), middleware });
  return () =>
    new Promise<void>((resolve, reject) => {
      let count = 0;
      let end: Extract<AgentEvent, { type: 'run-end' }> | undefined;
      agent.run('Say tok many times').subscribe({
        next(event) {
          if (event.type === 'text-delta') count++;
          else if (event.type === 'run-end') end = event;
          else if (event.type === 'error') reject(new Error(`CHECK FAILED: S1 run error event: ${JSON.stringify(event.error)}`));
        },
        error: (e) => reject(e),
        complete() {
          try {
            check(count === n, `S1 counted ${count} text-delta events, expected ${n}`);
            check(end?.reason === 'completed', `S1 run ended with ${end?.reason}, expected completed`);
            check(end.text.length === 4 * n && end.text.startsWith('tok tok '), `S1 final text has ${end.text.length} chars, expected ${4 * n}`);
            resolve();
          } catch (e) {
            reject(e);
          }
        },
      });
    });
}

export async function runS1(middleware: readonly AgentMiddleware[]): Promise<S1Result> {
  const [floor, rx] = await benchPair(N, () => s1Floor(N), s1Agent(middleware, N), S1_PAIRS);
  return { floor, rx };
}
