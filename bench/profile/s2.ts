/**
 * Profiling driver for S2 (not part of `npm run bench`):
 *   node bench/profile/build.mjs s2 && node --cpu-prof --cpu-prof-dir=/tmp/prof/s2 /tmp/rx-agent-prof/s2.mjs [K] [runs] [bare|only=a,b] [afterS1]
 * then: node bench/profile/top.mjs /tmp/prof/s2/<file>.cpuprofile
 * `afterS1` first runs S1 as `npm run bench` does (its warm-ups and pairs): S1's long streams grow
 * the young generation and bring V8's pretenuring decisions, which S2 then runs under.
 */
import { performance } from 'node:perf_hooks';
import { loadFiveOperators } from '../lib/operators';
import { runS1 } from '../workloads/s1';
import { s2Run } from '../workloads/s2';

const k = Number(process.argv[2] ?? 500);
const runs = Number(process.argv[3] ?? 20);
const bare = process.argv.includes('bare');
// `only=modelTimeout,costBudget` keeps just those of the five operators
const only = process.argv
  .find((a) => a.startsWith('only='))
  ?.slice(5)
  .split(',');
const middleware = bare
  ? []
  : loadFiveOperators()
      .filter((o) => !only || only.includes(o.name))
      .map((o) => o.middleware);
if (process.argv.includes('afterS1')) await runS1(loadFiveOperators().map((o) => o.middleware));
const run = s2Run(middleware, k);
for (let r = 0; r < runs; r++) {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await run();
  const wall = ((performance.now() - t0) * 1000) / k;
  const c = process.cpuUsage(c0);
  const label = bare ? ' (no operators)' : only ? ` (${only.join(',')})` : '';
  console.log(`K=${k}${label}: ${((c.user + c.system) / k).toFixed(1)} µs/iteration CPU, ${wall.toFixed(1)} wall`);
}
