/**
 * S2 loop: K iterations, each a model turn asking for one tool call `echo({ i })` answered at
 * once, then a final text; with the five operators. The model reads its whole request each turn,
 * as an adapter does. Per-iteration cost at K = 500, 5,000 and 20,000, warm and after a forced GC,
 * beside the model's reading alone (the read floor).
 */
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentMiddleware, type AgentStore, type ModelRequest } from '../../src/index';
import { bench, check, type Measured } from '../lib/harness';
import { readRequest, S2_FINAL_TEXT, s2Model } from '../lib/fakeModel';

export const K = 500;
export const K_BIG = 5_000;
/** The sizes S2 runs at: its per-iteration cost, net of the model's reading, must not grow with K. */
export const S2_KS: readonly number[] = [K, K_BIG, 20_000];

const echo = defineTool({
  name: 'echo',
  description: 'Returns its arguments',
  parameters: z.object({ i: z.number() }),
  execute: ({ i }) => ({ i }),
});

/**
 * S2 runs of `k` tool iterations (+ the final one), fully checked; journaled when given a store.
 * The agent and its model are made once and serve every run, as in an app (and as bench/peers
 * runs every framework); `onModel` receives the model (S2's read floor takes the history from it).
 */
export function s2Run(
  middleware: readonly AgentMiddleware[],
  k: number,
  store?: AgentStore,
  onModel?: (model: ReturnType<typeof s2Model>) => void,
): () => Promise<void> {
  const expectCost = middleware.some((m) => m.name.startsWith('costBudget'));
  const model = s2Model(k);
  onModel?.(model);
  const agent = createAgent({ model, tools: [echo], middleware, maxIterations: k + 1, store });
  return () =>
    new Promise<void>((resolve, reject) => {
      const callsBefore = model.calls();
      let toolResults = 0;
      let iterationEnds = 0;
      let costEvents = 0;
      let bad: string | undefined;
      let end: Extract<AgentEvent, { type: 'run-end' }> | undefined;
      agent.run('Echo a lot').subscribe({
        next(event) {
          switch (event.type) {
            case 'tool-result': {
              const result = event.result as { i?: unknown };
              if (bad === undefined && (event.isError || result?.i !== event.iteration || event.name !== 'echo')) {
                bad = `iteration ${event.iteration}: ${JSON.stringify(event)}`;
              }
              toolResults++;
              break;
            }
            case 'iteration-end':
              iterationEnds++;
              break;
            case 'cost-recorded':
              costEvents++;
              break;
            case 'run-end':
              end = event;
              break;
            case 'error':
              bad ??= `error event: ${JSON.stringify(event.error)}`;
              break;
          }
        },
        error: (e) => reject(e),
        complete() {
          try {
            check(bad === undefined, `S2 K=${k} wrong tool result: ${bad}`);
            check(toolResults === k, `S2 K=${k}: ${toolResults} tool results, expected ${k}`);
            check(iterationEnds === k + 1, `S2 K=${k}: ${iterationEnds} iterations, expected ${k + 1}`);
            const calls = model.calls() - callsBefore;
            check(calls === k + 1, `S2 K=${k}: ${calls} model calls, expected ${k + 1}`);
            check(!expectCost || costEvents === k + 1, `S2 K=${k}: ${costEvents} cost-recorded events, expected ${k + 1}`);
            check(end?.reason === 'completed' && end.text === S2_FINAL_TEXT, `S2 K=${k}: run-end ${JSON.stringify(end)}`);
            check(end.usage.inputTokens === 12 * (k + 1), `S2 K=${k}: usage ${JSON.stringify(end.usage)}`);
            resolve();
          } catch (e) {
            reject(e);
          }
        },
      });
    });
}

/** What S2 measures at one K. */
export interface S2Point {
  readonly k: number;
  /** µs per iteration (the model's reading of its request included), no forced GC. */
  readonly warm: Measured;
  /** The same after a forced full GC before each timed run. */
  readonly gc: Measured;
  /** The model's reading of the same requests alone (the history grows by two messages an iteration). */
  readonly readFloor: Measured;
}

export interface S2Result {
  readonly points: readonly S2Point[];
}

/** Timed runs per K: fewer for the long runs (a run at K = 20,000 reads 400 million messages). */
const runsAt = (k: number) => (k <= K ? 9 : k <= K_BIG ? 3 : 1);

/**
 * The model's share of an S2 run of `k`: {@link readRequest} over the same requests (the history
 * of a finished run, read 1, 3, 5… messages long), with nothing else.
 */
function readFloor(request: ModelRequest, k: number): () => Promise<void> {
  check(request.messages.length >= 2 * k + 1, `S2 read floor: a history of ${request.messages.length} messages, expected ${2 * k + 1}`);
  return () => {
    for (let i = 0; i <= k; i++) readRequest(request, 2 * i + 1);
    return Promise.resolve();
  };
}

export async function runS2(middleware: readonly AgentMiddleware[], ks: readonly number[] = S2_KS): Promise<S2Result> {
  const points: S2Point[] = [];
  const warmUpRun = s2Run(middleware, K);
  for (const k of ks) {
    const warm = await bench(k, s2Run(middleware, k), runsAt(k), 'warm', warmUpRun);
    const gc = await bench(k, s2Run(middleware, k), runsAt(k), 'gc', warmUpRun);
    const seen: { model?: ReturnType<typeof s2Model> } = {};
    await s2Run(middleware, k, undefined, (model) => (seen.model = model))();
    const history = seen.model?.last();
    check(history !== undefined, 'S2: the model read no request');
    const readFloorMeasured = await bench(k, readFloor(history, k), runsAt(k), 'warm', readFloor(history, K));
    points.push({ k, warm, gc, readFloor: readFloorMeasured });
    const us = (m: Measured) => (m.cpuNs / 1000).toFixed(1);
    process.stdout.write(`    S2 K=${k}: ${us(warm)} µs warm, ${us(gc)} after a forced GC, the model's reading ${us(readFloorMeasured)}\n`);
  }
  return { points };
}
