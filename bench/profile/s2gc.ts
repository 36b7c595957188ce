/**
 * Profiling driver for S2 after a forced GC (not part of `npm run bench`): after 15 warm-up runs,
 * `runs` warm runs, then `runs` runs each after a full GC, as the bench's two modes measure them.
 * Prints both medians and every run after a GC (they fall in two groups, about 50 and 130 µs per
 * iteration at K = 500 on the 2-core VM: nine runs do not show a change of 20%).
 *   node bench/profile/build.mjs s2gc && node --expose-gc [--trace-deopt] $TMPDIR/rx-agent-prof/s2gc.mjs [K] [runs]
 */
import { fullGc, median } from '../lib/harness';
import { loadFiveOperators } from '../lib/operators';
import { s2Run } from '../workloads/s2';

const k = Number(process.argv[2] ?? 500);
const runs = Number(process.argv[3] ?? 9);
const run = s2Run(
  loadFiveOperators().map((o) => o.middleware),
  k,
);
const cpu = async (gc: boolean) => {
  if (gc) await fullGc();
  const c0 = process.cpuUsage();
  await run();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / k;
};
for (let r = 0; r < 15; r++) await run();
const warm: number[] = [];
const gc: number[] = [];
for (let r = 0; r < runs; r++) warm.push(await cpu(false));
for (let r = 0; r < runs; r++) gc.push(await cpu(true));
const w = median(warm);
const g = median(gc);
console.log(
  `S2 K=${k}: warm ${w.toFixed(1)} µs/iteration, after a forced GC ${g.toFixed(1)} (${(g / w).toFixed(2)}×); after a GC, run by run: ${gc.map((x) => x.toFixed(0)).join(' ')}`,
);
