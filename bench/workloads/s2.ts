/**
 * S2 loop: K iterations, each a model turn asking for one tool call `echo({ i })` answered at
 * once, then a final text; with the five operators. The model reads its whole request each turn,
 * as an adapter does, and times its reading. Per-iteration cost at K = 500, 5,000 and 20,000, warm
 * and after a forced GC, in all and net of the model's reading; the same for S2's floor, the loop
 * written by hand with rxjs (bench/lib/rxjsLoop.ts).
 */
import type { Observable } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentMiddleware, type AgentStore } from '../../src/index';
import { check, measure, median, warmUp, type GcMode, type Measured, type Sample } from '../lib/harness';
import { S2_FINAL_TEXT, s2Model, type S2Model } from '../lib/fakeModel';
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
  return checkedRuns('S2', k, model, expectCost, () => agent.run('Echo a lot'));
}

/** An S2 run, with the model's reading time (ms) of every run made so far, in order. */
export type S2RunFn = (() => Promise<void>) & { readonly readingMs: readonly number[] };

/**
 * Runs of `events` checked as S2 checks every run (each tool result right, `k` of them, `k + 1`
 * iterations, model calls and cost events, the final text and usage, no error event), with the
 * model's reading time in each run that passes.
 */
function checkedRuns(label: string, k: number, model: S2Model, expectCost: boolean, events: () => Observable<LoopEvent>): S2RunFn {
  const readingMs: number[] = [];
  const run = () =>
    new Promise<void>((resolve, reject) => {
      const callsBefore = model.calls();
      const readingBefore = model.readingMs();
      let toolResults = 0;
      let iterationEnds = 0;
      let costEvents = 0;
      let bad: string | undefined;
      let end: LoopEvent | undefined;
      events().subscribe({
        next(event) {
          switch (event.type) {
            case 'tool-result': {
              const result = event.result as { i?: unknown };
              if (bad === undefined && (event.isError || result?.i !== event.iteration || event.name !== 'echo')) {
                bad = `iteration ${String(event.iteration)}: ${JSON.stringify(event)}`;
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
            check(bad === undefined, `${label} K=${k} wrong tool result: ${bad}`);
            check(toolResults === k, `${label} K=${k}: ${toolResults} tool results, expected ${k}`);
            check(iterationEnds === k + 1, `${label} K=${k}: ${iterationEnds} iterations, expected ${k + 1}`);
            const calls = model.calls() - callsBefore;
            check(calls === k + 1, `${label} K=${k}: ${calls} model calls, expected ${k + 1}`);
            check(!expectCost || costEvents === k + 1, `${label} K=${k}: ${costEvents} cost-recorded events, expected ${k + 1}`);
            check(end?.reason === 'completed' && end.text === S2_FINAL_TEXT, `${label} K=${k}: run-end ${JSON.stringify(end)}`);
            const usage = end.usage as { inputTokens: number };
            check(usage.inputTokens === 12 * (k + 1), `${label} K=${k}: usage ${JSON.stringify(usage)}`);
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

/**
 * The same S2 runs through the hand-written rxjs loop (bench/lib/rxjsLoop.ts): S2's floor, with
 * the same model, tool and checks.
 */
export function rxjsLoopRun(k: number): S2RunFn {
  const model = s2Model(k);
  const tool = { spec: echo.spec, schema: z.object({ i: z.number() }), execute: (args: unknown) => ({ i: (args as { i: number }).i }) };
  return checkedRuns('S2 rxjs loop', k, model, true, () => rxjsLoop(model, tool, 'Echo a lot', k + 1));
}

/** One S2 measurement: CPU per iteration, and wall time net of the model's reading in those runs. */
export interface S2Measured extends Measured {
  /**
   * Median over the runs of (wall time − the model's reading time) per iteration, ns: the loop's
   * own work. Wall time on both sides: the reading is timed with `performance.now()` (a CPU clock
   * per call would cost a microsecond an iteration), and on a busy machine wall time runs ahead of
   * CPU time, so that the reading taken from CPU time could leave less than nothing.
   */
  readonly ownNs: number;
  /** Median of the model's reading time per iteration in the same runs, ns. */
  readonly readingNs: number;
}

/** What S2 measures at one K, for the agent or for the rxjs loop. */
export interface S2Point {
  readonly k: number;
  /** Per iteration, no forced GC. */
  readonly warm: S2Measured;
  /** The same after a forced full GC before each timed run. */
  readonly gc: S2Measured;
}

export interface S2Result {
  readonly points: readonly S2Point[];
}

/** Timed runs per K: fewer for the long runs (a run at K = 20,000 reads 400 million messages). */
export const runsAt = (k: number) => (k <= K ? 9 : k <= K_BIG ? 3 : 1);

/**
 * `runsAt(k)` timed runs of `run` in one GC mode after warming up with `warm` (at K = 500), with
 * the figure net of the model's reading in the same runs: timed inside the run rather than alone,
 * over a history laid out compactly and with nothing else in the caches, where it costs less.
 */
async function benchS2(k: number, run: S2RunFn, mode: GcMode, warm: S2RunFn): Promise<S2Measured> {
  await warmUp(warm);
  const samples: Sample[] = [];
  for (let r = 0; r < runsAt(k); r++) samples.push(await measure(run, mode));
  const readings = run.readingMs.slice(-samples.length);
  const own = samples.map((sample, i) => (sample.wallNs - readings[i] * 1e6) / k);
  return {
    cpuNs: median(samples.map((x) => x.cpuNs)) / k,
    wallNs: median(samples.map((x) => x.wallNs)) / k,
    samples,
    ownNs: median(own),
    readingNs: median(readings.map((ms) => (ms * 1e6) / k)),
  };
}

/**
 * S2 at every K, warm and after a forced GC, through `makeRun` (the agent's runs, or the rxjs
 * loop's). The two are measured in processes of their own (bench/run.ts): run by run in one
 * process, they share rxjs's functions, whose call sites then see both and slow both down.
 */
async function runS2With(makeRun: (k: number) => S2RunFn, ks: readonly number[], label: string): Promise<S2Result> {
  const points: S2Point[] = [];
  const warm = makeRun(K);
  for (const k of ks) {
    const point = { k, warm: await benchS2(k, makeRun(k), 'warm', warm), gc: await benchS2(k, makeRun(k), 'gc', warm) };
    points.push(point);
    const us = (ns: number) => (ns / 1000).toFixed(1);
    // Progress on stderr: in the floors' process, stdout carries the figures (bench/run.ts).
    process.stderr.write(
      `    S2 ${label} K=${k}: ${us(point.warm.cpuNs)} µs warm (${us(point.warm.ownNs)} wall, net of the model's reading), ${us(point.gc.cpuNs)} after a forced GC\n`,
    );
  }
  return { points };
}

/** S2 through the agent with `middleware`. */
export function runS2(middleware: readonly AgentMiddleware[], ks: readonly number[] = S2_KS): Promise<S2Result> {
  return runS2With((k) => s2Run(middleware, k), ks, 'agent');
}

/** S2 through the hand-written rxjs loop, S2's floor. */
export function runS2RxjsLoop(ks: readonly number[] = S2_KS): Promise<S2Result> {
  return runS2With(rxjsLoopRun, ks, 'rxjs loop');
}
