/**
 * S2 loop: K iterations, each a model turn asking for one tool call `echo({ i })` answered at
 * once, then a final text; with the five operators. Per-iteration cost at K = 500 and K = 5,000.
 */
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentMiddleware, type AgentStore } from '../../src/index';
import { bench, check, type Measured } from '../lib/harness';
import { S2_FINAL_TEXT, s2Model } from '../lib/fakeModel';

export const K = 500;
export const K_BIG = 5_000;

const echo = defineTool({
  name: 'echo',
  description: 'Returns its arguments',
  parameters: z.object({ i: z.number() }),
  execute: ({ i }) => ({ i }),
});

/** One S2 run of `k` tool iterations (+ the final one), fully checked; journaled when given a store. */
export function s2Run(middleware: readonly AgentMiddleware[], k: number, store?: AgentStore): () => Promise<void> {
  const expectCost = middleware.some((m) => m.name.startsWith('costBudget'));
  return () =>
    new Promise<void>((resolve, reject) => {
      const model = s2Model(k);
      const agent = createAgent({ model, tools: [echo], middleware, maxIterations: k + 1, store });
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
            check(model.calls() === k + 1, `S2 K=${k}: ${model.calls()} model calls, expected ${k + 1}`);
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

export interface S2Result {
  readonly k500: Measured;
  readonly k5000: Measured;
}

export async function runS2(middleware: readonly AgentMiddleware[]): Promise<S2Result> {
  const k500 = await bench(K, s2Run(middleware, K), 9);
  const k5000 = await bench(K_BIG, s2Run(middleware, K_BIG), 5);
  return { k500, k5000 };
}
