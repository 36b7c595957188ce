/**
 * Profiling driver for S1 (not part of `npm run bench`):
 *   node bench/profile/build.mjs s1 && node --cpu-prof --cpu-prof-dir=/tmp/prof/s1 /tmp/rx-agent-prof/s1.mjs [runs] [bare|only=a,b]
 *   node bench/profile/top.mjs /tmp/prof/s1/<file>.cpuprofile 40
 */
import { loadFiveOperators } from '../lib/operators';
import { N, s1Agent, s1Floor } from '../workloads/s1';
import { cpuPerUnit } from '../lib/harness';

const runs = Number(process.argv[2] ?? 20);
const bare = process.argv.includes('bare');
const only = process.argv
  .find((a) => a.startsWith('only='))
  ?.slice(5)
  .split(',');
const middleware = bare
  ? []
  : loadFiveOperators()
      .filter((o) => !only || only.includes(o.name))
      .map((o) => o.middleware);
const run = s1Agent(middleware, N);
const cpu = (fn: () => Promise<void>) => cpuPerUnit(N, fn);
for (let r = 0; r < runs; r++) {
  const floor = await cpu(() => s1Floor(N));
  const rx = await cpu(run);
  console.log(
    `S1${bare ? ' (no operators)' : only ? ` (${only.join(',')})` : ''}: floor ${floor.toFixed(0)} ns/delta, rx-agent ${rx.toFixed(0)} ns/delta CPU, ${(rx / floor).toFixed(2)}×`,
  );
}
