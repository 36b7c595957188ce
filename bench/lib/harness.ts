/** Timing, memory and checking helpers of `npm run bench` (rx-agent's own bench, not bench/peers). */
import { performance } from 'node:perf_hooks';
import { setImmediate as tick } from 'node:timers/promises';

/** Measured runs per workload (after one warm-up). The issue asks for at least 5. */
export const RUNS = 7;

/** Fails the workload loudly: the bench exits non-zero and says what was wrong. */
export function check(cond: unknown, message: string): asserts cond {
  if (!cond) throw new Error(`CHECK FAILED: ${message}`);
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export interface Sample {
  /** user + system CPU of the process (process.cpuUsage), ns. */
  readonly cpuNs: number;
  /** performance.now(), ns. */
  readonly wallNs: number;
}

/**
 * The two GC modes every timed workload is measured in: `warm` (no forced GC: the heap as the
 * previous runs left it) and `gc` (a forced full GC before every timed run, as a process that
 * was idle, or that had just collected, would run it).
 */
export type GcMode = 'warm' | 'gc';
export const GC_MODES: readonly GcMode[] = ['warm', 'gc'];

/** One timed run of `fn`; in `gc` mode after a forced full GC (not timed). */
export async function measure(fn: () => Promise<void>, mode: GcMode = 'warm'): Promise<Sample> {
  if (mode === 'gc') await fullGc();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const wallNs = (performance.now() - t0) * 1e6;
  const c = process.cpuUsage(c0);
  return { cpuNs: (c.user + c.system) * 1000, wallNs };
}

/**
 * CPU time (user + system) one run of `fn` takes, in ns per unit of `units` (for the profile
 * drivers, which print each run).
 */
export async function cpuPerUnit(units: number, fn: () => Promise<void>): Promise<number> {
  const c0 = process.cpuUsage();
  await fn();
  const c = process.cpuUsage(c0);
  return ((c.user + c.system) * 1000) / units;
}

export interface Measured {
  /** Median CPU per unit, ns. */
  readonly cpuNs: number;
  /** Median wall per unit, ns. */
  readonly wallNs: number;
  readonly samples: readonly Sample[];
}

/**
 * The warm-up: `fn` at least `minRuns` (3) times and for at least `ms` (at most 40 times), so that
 * the JIT has settled before anything is measured (one run of S2 at K=500 is too short for that).
 */
export async function warmUp(fn: () => Promise<void>, ms = 1000, minRuns = 3): Promise<void> {
  const t0 = performance.now();
  for (let i = 0; i < 40 && (i < minRuns || performance.now() - t0 < ms); i++) await fn();
}

/**
 * A warm-up, then `runs` measured runs in `mode`; per-unit medians. In `gc` mode each timed run
 * follows a forced full GC, which on Node 20 also throws away optimized code whose hidden classes
 * died: what a framework that makes hidden classes per run pays again on every run.
 */
export async function bench(units: number, fn: () => Promise<void>, runs = RUNS, mode: GcMode = 'warm', warm: () => Promise<void> = fn): Promise<Measured> {
  await warmUp(warm);
  const samples: Sample[] = [];
  for (let r = 0; r < runs; r++) samples.push(await measure(fn, mode));
  return {
    cpuNs: median(samples.map((s) => s.cpuNs)) / units,
    wallNs: median(samples.map((s) => s.wallNs)) / units,
    samples,
  };
}

/**
 * Runs `a` and `b` alternately (a, b, a, b…) after one warm-up each (`minWarmUps` runs at least),
 * so that both see the same machine state (thermal, other processes) — used for the floor and
 * rx-agent of S1.
 */
export async function benchPair(
  units: number,
  a: () => Promise<void>,
  b: () => Promise<void>,
  runs = RUNS,
  mode: GcMode = 'warm',
  minWarmUps = 3,
): Promise<[Measured, Measured]> {
  await warmUp(a, 500, minWarmUps);
  await warmUp(b, 1000, minWarmUps);
  const sa: Sample[] = [];
  const sb: Sample[] = [];
  for (let r = 0; r < runs; r++) {
    sa.push(await measure(a, mode));
    sb.push(await measure(b, mode));
  }
  const per = (s: Sample[]): Measured => ({
    cpuNs: median(s.map((x) => x.cpuNs)) / units,
    wallNs: median(s.map((x) => x.wallNs)) / units,
    samples: s,
  });
  return [per(sa), per(sb)];
}

export function hasGc(): boolean {
  return typeof (globalThis as { gc?: unknown }).gc === 'function';
}

/** A full, settled GC (several passes with the event loop turning in between). */
export async function fullGc(): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  for (let i = 0; i < 4; i++) {
    gc();
    await tick();
  }
}

export function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Rejects with a CHECK FAILED when `p` has not settled within `ms` (a hang is a failure, not a wait). */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, rej) => {
      timer = setTimeout(() => rej(new Error(`CHECK FAILED: ${what} did not finish within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
