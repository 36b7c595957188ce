/**
 * S2 loop: K iterations, each a model turn asking for one tool call `echo({ i })` answered at
 * once, then a final text; with the five operators. The model reads its whole request each turn,
 * as an adapter does, and times its reading. Per-iteration cost at K = 500, 5,000 and 20,000, warm
 * and after a forced GC, in all and net of the model's reading; the same for S2's floor, the loop
 * written by hand with rxjs (bench/lib/rxjsLoop.ts).
 */
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentMiddleware, type AgentStore } from '../../src/index';
import { check, measure, median, warmUp, type GcMode, type Measured, type Sample } from '../lib/harness';
import { S2_FINAL_TEXT, s2Model } from '../lib/fakeModel';
import { rxjsLoop, type LoopEvent } from '../lib/rxjsLoop';

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
 * runs every framework). The function keeps, per run, the time the model spent reading.
 */
export function s2Run(middleware: readonly AgentMiddleware[], k: number, store?: AgentStore): S2RunFn {
  const expectCost = middleware.some((m) => m.name.startsWith('costBudget'));
  const model = s2Model(k);
  const agent = createAgent({ model, tools: [echo], middleware, maxIterations: k + 1, store });
  const readingMs: number[] = [];
  const run = () =>
    new Promise<void>((resolve, reject) => {
      const callsBefore = model.calls();
      const readingBefore = model.readingMs();
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
            readingMs.push(model.readingMs() - readingBefore);
            resolve();
          } catch (e) {
            reject(e);
          }
        },
      });
    });
  return Object.assign(run, { readingMs });
}

/** An S2 run, with the model's reading time (ms) of every run made so far, in order. */
export type S2RunFn = (() => Promise<void>) & { readonly readingMs: readonly number[] };

/**
 * The same S2 runs through the hand-written rxjs loop (bench/lib/rxjsLoop.ts): S2's floor, with
 * the same model, tool and checks.
 */
export function rxjsLoopRun(k: number): S2RunFn {
  const model = s2Model(k);
  const tool = { spec: echo.spec, schema: z.object({ i: z.number() }), execute: (args: unknown) => ({ i: (args as { i: number }).i }) };
  const readingMs: number[] = [];
  const run = () =>
    new Promise<void>((resolve, reject) => {
      const callsBefore = model.calls();
      const readingBefore = model.readingMs();
      let toolResults = 0;
      let iterationEnds = 0;
      let bad: string | undefined;
      let end: LoopEvent | undefined;
      rxjsLoop(model, tool, 'Echo a lot', k + 1).subscribe({
        next(event) {
          if (event.type === 'tool-result') {
            const result = event.result as { i?: unknown };
            if (bad === undefined && (event.isError || result?.i !== event.iteration)) bad = `iteration ${String(event.iteration)}`;
            toolResults++;
          } else if (event.type === 'iteration-end') iterationEnds++;
          else if (event.type === 'run-end') end = event;
        },
        error: (e) => reject(e),
        complete() {
          try {
            check(bad === undefined, `S2 rxjs loop K=${k} wrong tool result: ${bad}`);
            check(toolResults === k && iterationEnds === k + 1, `S2 rxjs loop K=${k}: ${toolResults} tool results, ${iterationEnds} iterations`);
            check(model.calls() - callsBefore === k + 1, `S2 rxjs loop K=${k}: ${model.calls() - callsBefore} model calls`);
            check(end?.text === S2_FINAL_TEXT, `S2 rxjs loop K=${k}: run-end ${JSON.stringify(end)}`);
            readingMs.push(model.readingMs() - readingBefore);
            resolve();
          } catch (e) {
            reject(e);
          }
        },
      });
    });
  return Object.assign(run, { readingMs });
}

/** One S2 measurement: CPU per iteration, and the same net of the model's reading in those runs. */
export interface S2Measured extends Measured {
  /** Median over the runs of (CPU − the model's reading time) per iteration, ns: the loop's own work. */
  readonly ownNs: number;
  /** Median of the model's reading time per iteration in the same runs, ns. */
  readonly readingNs: number;
}

/** What S2 measures at one K. */
export interface S2Point {
  readonly k: number;
  /** Per iteration, no forced GC. */
  readonly warm: S2Measured;
  /** The same after a forced full GC before each timed run. */
  readonly gc: S2Measured;
  /** The same runs through the hand-written rxjs loop (bench/lib/rxjsLoop.ts), warm and after a forced GC. */
  readonly loop: { readonly warm: S2Measured; readonly gc: S2Measured };
}

export interface S2Result {
  readonly points: readonly S2Point[];
}

/** Timed runs per K: fewer for the long runs (a run at K = 20,000 reads 400 million messages). */
const runsAt = (k: number) => (k <= K ? 9 : k <= K_BIG ? 3 : 1);

/**
 * The agent's runs and the rxjs loop's, alternating (agent, loop, agent, loop…) in one GC mode
 * after warming both up at K = 500, so that both see the same heap and machine. Each figure also
 * comes net of the model's reading in the same runs: timed inside the run rather than alone, over
 * a history laid out compactly and with nothing else in the caches, where it costs less.
 */
async function benchS2Pair(k: number, agent: S2RunFn, loop: S2RunFn, mode: GcMode, warmAgent: S2RunFn, warmLoop: S2RunFn): Promise<[S2Measured, S2Measured]> {
  await warmUp(warmAgent);
  await warmUp(warmLoop);
  const agentSamples: Sample[] = [];
  const loopSamples: Sample[] = [];
  for (let r = 0; r < runsAt(k); r++) {
    agentSamples.push(await measure(agent, mode));
    loopSamples.push(await measure(loop, mode));
  }
  return [measuredS2(k, agent, agentSamples), measuredS2(k, loop, loopSamples)];
}

function measuredS2(k: number, run: S2RunFn, samples: Sample[]): S2Measured {
  const readings = run.readingMs.slice(-samples.length);
  const own = samples.map((sample, i) => (sample.cpuNs - readings[i] * 1e6) / k);
  return {
    cpuNs: median(samples.map((x) => x.cpuNs)) / k,
    wallNs: median(samples.map((x) => x.wallNs)) / k,
    samples,
    ownNs: median(own),
    readingNs: median(readings.map((ms) => (ms * 1e6) / k)),
  };
}

export async function runS2(middleware: readonly AgentMiddleware[], ks: readonly number[] = S2_KS): Promise<S2Result> {
  const points: S2Point[] = [];
  const warmAgent = s2Run(middleware, K);
  const warmLoop = rxjsLoopRun(K);
  for (const k of ks) {
    const [warm, loopWarm] = await benchS2Pair(k, s2Run(middleware, k), rxjsLoopRun(k), 'warm', warmAgent, warmLoop);
    const [gc, loopGc] = await benchS2Pair(k, s2Run(middleware, k), rxjsLoopRun(k), 'gc', warmAgent, warmLoop);
    const loop = { warm: loopWarm, gc: loopGc };
    points.push({ k, warm, gc, loop });
    const us = (ns: number) => (ns / 1000).toFixed(1);
    process.stdout.write(
      `    S2 K=${k}: ${us(warm.cpuNs)} µs warm (${us(warm.ownNs)} net of the model's reading), ${us(gc.cpuNs)} after a forced GC; ` +
        `the rxjs loop ${us(loop.warm.cpuNs)} (${us(loop.warm.ownNs)}), ${us(loop.gc.cpuNs)}\n`,
    );
  }
  return { points };
}
