/**
 * Per-operator cost in S1 (not part of `npm run bench`): each of the five operators alone, none,
 * and all five, every run paired with a floor run just before it, so that the machine's drift
 * cancels out of the difference. Variants given together share one process, so the stream's
 * per-delta call sites see several Subscriber classes and every variant pays for that: for a
 * figure as the bench sees it, give one variant per process (`… 15 piiRedaction`).
 *   node bench/profile/build.mjs s1ops && node /tmp/rx-agent-prof/s1ops.mjs [rounds] [bare,modelRetry,…,all]
 */
import { loadFiveOperators } from '../lib/operators';
import { N, s1Agent, s1Floor } from '../workloads/s1';

const rounds = Number(process.argv[2] ?? 15);
const pick = process.argv[3]?.split(',');
const ops = await loadFiveOperators();
const variants: Array<[string, () => Promise<void>]> = [
  ['bare', s1Agent([], N)],
  ...ops.map((o): [string, () => Promise<void>] => [o.name, s1Agent([o.middleware], N)]),
  ['all', s1Agent(ops.map((o) => o.middleware), N)],
].filter(([name]) => !pick || pick.includes(name as string)) as Array<[string, () => Promise<void>]>;

const cpuPerDelta = async (fn: () => Promise<void>): Promise<number> => {
  const c0 = process.cpuUsage();
  await fn();
  const c = process.cpuUsage(c0);
  return ((c.user + c.system) * 1000) / N;
};
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1];

for (let i = 0; i < 3; i++) {
  await s1Floor(N);
  for (const [, run] of variants) await run();
}
const floors: number[] = [];
const over = new Map<string, number[]>(variants.map(([name]) => [name, []]));
for (let r = 0; r < rounds; r++) {
  for (const [name, run] of variants) {
    const floor = await cpuPerDelta(() => s1Floor(N));
    floors.push(floor);
    over.get(name)!.push((await cpuPerDelta(run)) - floor);
  }
}
const floor = median(floors);
console.log(`floor: ${floor.toFixed(0)} ns per delta (median of ${floors.length})`);
for (const [name, diffs] of over) {
  const d = median(diffs);
  console.log(`${name.padEnd(17)} +${d.toFixed(0).padStart(3)} ns per delta over its floor run (${((floor + d) / floor).toFixed(2)}×)`);
}
