/**
 * Profiling driver for S2 after S1 in one process, as `npm run bench` runs them (not part of it):
 *   node bench/profile/build.mjs s12 && node /tmp/rx-agent-prof/s12.mjs [s1Runs] [s2Runs] [K]
 * S1's long streams bring V8's first mark-compacts (and allocation-site pretenuring decisions)
 * before S2 starts, which is what this driver reproduces.
 */
import { performance, PerformanceObserver } from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';
import { loadFiveOperators } from '../lib/operators';
import { N, s1Agent, s1Floor } from '../workloads/s1';
import { s2Run } from '../workloads/s2';

const s1Runs = Number(process.argv[2] ?? 8);
const s2Runs = Number(process.argv[3] ?? 12);
const k = Number(process.argv[4] ?? 500);
const middleware = (await loadFiveOperators()).map((o) => o.middleware);
const s1 = s1Agent(middleware, N);
for (let r = 0; r < s1Runs; r++) {
  await s1Floor(N);
  await s1();
}
const s2 = s2Run(middleware, k);
// GC time by kind (1 minor, 2 major, 4 incremental, 8 weak callbacks) during each S2 run
const gcMs = new Map<number, { n: number; ms: number }>();
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as any).detail?.kind ?? 0;
    const g = gcMs.get(kind) ?? { n: 0, ms: 0 };
    g.n++;
    g.ms += e.duration;
    gcMs.set(kind, g);
  }
}).observe({ entryTypes: ['gc'] });
const oldUsed = () => getHeapSpaceStatistics().find((s) => s.space_name === 'old_space')!.space_used_size;
for (let r = 0; r < s2Runs; r++) {
  gcMs.clear();
  const old0 = oldUsed();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await s2();
  const wall = ((performance.now() - t0) * 1000) / k;
  const c = process.cpuUsage(c0);
  await new Promise((r) => setImmediate(r)); // let the observer see this run's GCs
  const gc = [...gcMs].map(([kind, g]) => `${kind}:${g.n}×/${g.ms.toFixed(1)}ms`).join(' ');
  const oldKb = ((oldUsed() - old0) / 1024).toFixed(0);
  console.log(`S2 after S1, K=${k}: ${((c.user + c.system) / k).toFixed(1)} µs/iteration CPU, ${wall.toFixed(1)} wall · old space +${oldKb} KB · gc ${gc}`);
}
