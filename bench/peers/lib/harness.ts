/** Timing, memory and checking helpers shared by every peer's child process. */
import { setImmediate as tick } from 'node:timers/promises';

export const N = 100_000; // S1 text deltas
export const K = 500; // S2 iterations
export const K_BIG = 5_000; // S2 long run
export const M = 2_000; // S3 concurrent suspended runs
export const RUNS = 5; // measured runs after one warm-up

export function check(cond: unknown, message: string): asserts cond {
  if (!cond) throw new Error(`CHECK FAILED: ${message}`);
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export interface Sample {
  cpuNs: number; // user + system CPU time of the process
  wallNs: number;
}

export async function measure(fn: () => Promise<void>): Promise<Sample> {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await fn();
  const wallNs = Number(process.hrtime.bigint() - t0);
  const c = process.cpuUsage(c0);
  return { cpuNs: (c.user + c.system) * 1000, wallNs };
}

/**
 * One warm-up (`warmUp`, by default `fn` itself), then `runs` measured runs of `fn`; returns
 * per-unit medians (the medians divided by `units`).
 */
/**
 * The GC modes every timed workload runs in: `gc`, a forced full GC before each timed run (what
 * a process that was idle, or had just collected, sees); `warm`, no forced GC (the heap as the
 * previous runs left it). rx-agent's own `npm run bench` measures the same two.
 */
export type GcMode = 'warm' | 'gc';

export async function bench(
  units: number,
  runs: number,
  fn: () => Promise<void>,
  warmUp: () => Promise<void> = fn,
  mode: GcMode = 'gc',
): Promise<{ cpuPerUnitNs: number; wallPerUnitNs: number; samples: Sample[] }> {
  await warmUp();
  const samples: Sample[] = [];
  for (let r = 0; r < runs; r++) {
    if (mode === 'gc') await fullGc();
    samples.push(await measure(fn));
  }
  return {
    cpuPerUnitNs: median(samples.map((s) => s.cpuNs)) / units,
    wallPerUnitNs: median(samples.map((s) => s.wallNs)) / units,
    samples,
  };
}

export async function fullGc(): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  for (let i = 0; i < 3; i++) {
    gc();
    await tick();
  }
}

/** The floor: a for-await loop over an async generator yielding the same N chunks. */
export async function floorS1(n: number): Promise<number> {
  async function* chunks() {
    for (let i = 0; i < n; i++) yield 'tok ';
  }
  let count = 0;
  for await (const c of chunks()) if (c.length > 0) count++;
  return count;
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

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<never>((_, rej) => {
      timer = setTimeout(() => rej(new Error(`CHECK FAILED: ${what} did not finish within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
