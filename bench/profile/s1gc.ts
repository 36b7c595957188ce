/**
 * Profiling driver for S1 after a forced GC (not part of `npm run bench`): like s1.ts, with a
 * full GC before each timed run, as the bench's `gc` mode does.
 *   node bench/profile/build.mjs s1gc && node --expose-gc [--trace-deopt] /tmp/rx-agent-prof/s1gc.mjs [runs] [bare]
 */
import { loadFiveOperators } from '../lib/operators';
import { N, s1Agent, s1Floor } from '../workloads/s1';
import { fullGc } from '../lib/harness';

const runs = Number(process.argv[2] ?? 10);
const bare = process.argv.includes('bare');
const middleware = bare ? [] : loadFiveOperators().map((o) => o.middleware);
const run = s1Agent(middleware, N);
const cpu = async (fn: () => Promise<void>) => {
  await fullGc();
  const c0 = process.cpuUsage();
  await fn();
  const c = process.cpuUsage(c0);
  return ((c.user + c.system) * 1000) / N;
};
for (let r = 0; r < 3; r++) await run();
for (let r = 0; r < runs; r++) {
  const floor = await cpu(() => s1Floor(N));
  const rx = await cpu(run);
  console.log(
    `S1 after a forced GC${bare ? ' (no operators)' : ''}: floor ${floor.toFixed(0)} ns/delta, rx-agent ${rx.toFixed(0)} ns/delta CPU, ${(rx / floor).toFixed(2)}×`,
  );
}
