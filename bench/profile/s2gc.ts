/**
 * Profiling driver for S2 after a forced GC (not part of `npm run bench`): S2 runs warm and with
 * a full GC before each, alternating, as the bench's two modes do.
 *   node bench/profile/build.mjs s2gc && node --expose-gc [--trace-deopt] $TMPDIR/rx-agent-prof/s2gc.mjs [K] [pairs]
 */
import { fullGc } from '../lib/harness';
import { loadFiveOperators } from '../lib/operators';
import { s2Run } from '../workloads/s2';

const k = Number(process.argv[2] ?? 500);
const pairs = Number(process.argv[3] ?? 5);
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
for (let r = 0; r < 3; r++) await run();
for (let r = 0; r < pairs; r++) {
  const warm = await cpu(false);
  const gc = await cpu(true);
  console.log(`S2 K=${k}: warm ${warm.toFixed(1)} µs/iteration, after a forced GC ${gc.toFixed(1)} (${(gc / warm).toFixed(2)}×)`);
}
