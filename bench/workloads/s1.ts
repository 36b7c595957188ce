/**
 * S1 streaming: one model turn streams N text deltas (mostly 'tok ', some with digits or an `@`
 * for piiRedaction to look at) through createAgent with the five operators; the consumer counts
 * `text-delta` events. Floor: a `for await` over the same generator.
 */
import { createAgent, fromAsyncIterable, memoryStore, type AgentEvent, type AgentMiddleware, type AgentStore } from '../../src/index';
import { benchPair, check, withTimeout, type GcMode, type Measured } from '../lib/harness';
import { s1Model, s1Stream, s1Text, s1Usage } from '../lib/fakeModel';
import { wrapped } from '../lib/rxjsLoop';

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

/** A run that has not ended after this long is a failure, not a wait. */
const S1_RUN_TIMEOUT_MS = 60_000;

/**
 * One rx-agent run of S1. Checks the count of `text-delta` events, the run's end, its whole text
 * (every delta as sent), its usage and, with costBudget, its one `cost-recorded` event; a run that
 * does not end within a minute fails.
 */
export function s1Agent(middleware: readonly AgentMiddleware[], n = N, journaled = false): () => Promise<void> {
  // Journaled: every run written to a memoryStore (each event a record, one append per flush).
  const agent = createAgent({ model: s1Model(n), middleware, store: journaled ? memoryStore() : undefined });
  const expectedText = s1Text(n);
  const expectCost = middleware.some((m) => m.name.startsWith('costBudget'));
  return () =>
    withTimeout(
      new Promise<void>((resolve, reject) => {
        let count = 0;
        let costs = 0;
        let end: Extract<AgentEvent, { type: 'run-end' }> | undefined;
        agent.run('Say tok many times').subscribe({
          next(event) {
            if (event.type === 'text-delta') count++;
            else if (event.type === 'run-end') end = event;
            else if (event.type === 'cost-recorded') costs++;
            else if (event.type === 'error') reject(new Error(`CHECK FAILED: S1 run error event: ${JSON.stringify(event.error)}`));
          },
          error: (e) => reject(e),
          complete() {
            try {
              // piiRedaction (on output) holds back a delta that could start a match and sends it with the next.
              check(count > 0 && count <= n, `S1 counted ${count} text-delta events for ${n} deltas sent`);
              check(end?.reason === 'completed', `S1 run ended with ${end?.reason}, expected completed`);
              check(
                end.text === expectedText,
                `S1 final text differs from the ${n} deltas sent (${end.text.length} chars, starts ${JSON.stringify(end.text.slice(0, 24))})`,
              );
              check(end.usage.outputTokens === n, `S1 usage ${JSON.stringify(end.usage)}, expected ${n} output tokens`);
              check(!expectCost || costs === 1, `S1: ${costs} cost-recorded events, expected 1`);
              resolve();
            } catch (e) {
              reject(e);
            }
          },
        });
      }),
      S1_RUN_TIMEOUT_MS,
      'an S1 run',
    );
}

/**
 * S1 through the least an rxjs pipeline can be: the model's stream (`fromAsyncIterable` over the
 * same generator) inside five wrappers that forward every update (bench/lib/rxjsLoop.ts), and a
 * subscriber that counts the deltas and gathers the text. No agent, no events: what rxjs itself
 * costs per delta, beside which S1's target can be read.
 */
export function s1RxjsPipeline(n = N): () => Promise<void> {
  const usage = s1Usage(n);
  const expectedText = s1Text(n);
  return () =>
    new Promise<void>((resolve, reject) => {
      let count = 0;
      let text = '';
      wrapped(fromAsyncIterable(() => s1Stream(n, usage))).subscribe({
        next(update) {
          if (update.type === 'text-delta') {
            count++;
            text += update.text;
          }
        },
        error: (e) => reject(e),
        complete() {
          try {
            check(count === n && text === expectedText, `S1 rxjs pipeline: ${count} deltas for ${n}, text ${text.length} chars`);
            resolve();
          } catch (e) {
            reject(e);
          }
        },
      });
    });
}

/** The floor against {@link s1RxjsPipeline}, in one GC mode. */
export async function runS1RxjsPipeline(mode: GcMode): Promise<S1Result> {
  const [floor, rx] = await benchPair(N, () => s1Floor(N), s1RxjsPipeline(N), S1_PAIRS, mode);
  return { floor, rx };
}

export async function runS1(middleware: readonly AgentMiddleware[], journaled = false, mode: GcMode = 'warm'): Promise<S1Result> {
  const [floor, rx] = await benchPair(N, () => s1Floor(N), s1Agent(middleware, N, journaled), S1_PAIRS, mode);
  return { floor, rx };
}

/**
 * One S1 run journaled to `store` (named `where` in failures), checked as S1 checks its runs: no
 * error event, the whole text in the run's end and in its deltas.
 */
export function s1OnStore(store: AgentStore, where: string, middleware: readonly AgentMiddleware[], n = N): () => Promise<void> {
  const agent = createAgent({ model: s1Model(n), middleware, store });
  return async () => {
    let text = 0;
    let end: Extract<AgentEvent, { type: 'run-end' }> | undefined;
    let error: unknown;
    await new Promise<void>((resolve) =>
      agent.run('Say tok many times').subscribe({
        next(event) {
          if (event.type === 'text-delta') text += event.text.length;
          else if (event.type === 'run-end') end = event;
          else if (event.type === 'error') error ??= event.error;
        },
        complete: resolve,
      }),
    );
    check(error === undefined, `S1 on ${where}: error event ${JSON.stringify(error)}`);
    check(end?.reason === 'completed' && end.text === s1Text(n), `S1 on ${where}: run-end ${JSON.stringify(end && { ...end, text: end.text.length })}`);
    check(text === s1Text(n).length, `S1 on ${where}: ${text} characters of text deltas, expected ${s1Text(n).length}`);
  };
}
