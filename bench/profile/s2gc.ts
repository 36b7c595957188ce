/**
 * Profiling driver for S2 after a forced GC (not part of `npm run bench`): after 15 warm-up runs,
 * `runs` warm runs, then `runs` runs each after a full GC, as the bench's two modes measure them.
 * Prints both medians and every run after a GC (they fall in two groups, about 50 and 130 µs per
 * iteration at K = 500 on the 2-core VM: nine runs do not show a change of 20%).
 * With `natural`, the full GCs are those that allocating garbage triggers, not `gc()`'s.
 *   node bench/profile/build.mjs s2gc && node --expose-gc [--trace-deopt] $TMPDIR/rx-agent-prof/s2gc.mjs [K] [runs] [natural]
 */
import { fullGc, median } from '../lib/harness';
import { loadFiveOperators } from '../lib/operators';
import { s2Run } from '../workloads/s2';

const k = Number(process.argv[2] ?? 500);
const runs = Number(process.argv[3] ?? 9);
const natural = process.argv.includes('natural');

/** Full GCs the way a busy process gets them: old-space growth, from arrays kept for a while. */
async function allocationGcs(): Promise<void> {
  let kept: number[][] = [];
  for (let i = 0; i < 3000; i++) {
    kept.push(new Array<number>(10_000).fill(i));
    if (kept.length > 1500) kept = [];
  }
  kept = [];
  await new Promise((resolve) => setTimeout(resolve, 10));
}
const run = s2Run(
  loadFiveOperators().map((o) => o.middleware),
  k,
);
const cpu = async (gc: boolean) => {
  if (gc) await (natural ? allocationGcs() : fullGc());
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
  `S2 K=${k}: warm ${w.toFixed(1)} µs/iteration, after ${natural ? 'GCs from allocation' : 'a forced GC'} ${g.toFixed(1)} (${(g / w).toFixed(2)}×); after a GC, run by run: ${gc.map((x) => x.toFixed(0)).join(' ')}`,
);
