/**
 * One variant's cost in S1 (not part of `npm run bench`): no operators (`bare`), one of the five
 * operators alone, `all` five, or all five and `telemetry()` with no tracer registered (`otel`), each run paired with a floor run just before it, so that the
 * machine's drift cancels out of the difference. One variant per process: variants sharing a
 * process share the stream's per-delta call sites, which then see several Subscriber classes, and
 * every variant pays for that.
 *   node bench/profile/build.mjs s1ops
 *   for v in bare piiRedaction all otel; do node $TMPDIR/rx-agent-prof/s1ops.mjs $v [rounds]; done
 */
import { benchPair, median } from '../lib/harness';
import { telemetry } from '../../src/otel';
import { loadFiveOperators } from '../lib/operators';
import { N, s1Agent, s1Floor } from '../workloads/s1';

const variant = process.argv[2];
const rounds = Number(process.argv[3] ?? 15);
const ops = loadFiveOperators();
const all = ops.map((o) => o.middleware);
const middleware =
  variant === 'bare'
    ? []
    : variant === 'all'
      ? all
      : variant === 'otel'
        ? [...all, telemetry()]
        : ops.filter((o) => o.name === variant).map((o) => o.middleware);
if (variant === undefined || (variant !== 'bare' && middleware.length === 0)) {
  console.error(`usage: s1ops.mjs <bare|all|otel|${ops.map((o) => o.name).join('|')}> [rounds]`);
  process.exit(2);
}
const run = s1Agent(middleware, N);
const floorRun = () => s1Floor(N);

// benchPair runs them alternately (floor, variant, floor, variant…): each pair's difference cancels the drift.
const [floors, runs] = await benchPair(N, floorRun, run, rounds);
const floor = floors.cpuNs;
const extra = median(runs.samples.map((s, i) => (s.cpuNs - floors.samples[i].cpuNs) / N));
console.log(
  `${variant}: +${extra.toFixed(0)} ns per delta over a floor of ${floor.toFixed(0)} (${((floor + extra) / floor).toFixed(2)}×, medians of ${rounds} pairs)`,
);
