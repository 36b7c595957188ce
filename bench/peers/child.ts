/**
 * Runs the workloads for ONE peer in a fresh process (spawned by run.ts with --expose-gc) and
 * writes its results as JSON to the file named by argv[4].
 *
 *   child.ts <peerId|floor> <main|s2big> <out.json>
 *
 * main:  floor S1, then the peer's S1, S2 (K=500) and S3 (M=2000); S1 and S2 in both GC modes
 *        (a forced full GC before each timed run, and none), the floor beside each
 * s2big: warm-up at K=500, then up to RUNS runs at K=5000, fewer when they would not fit in
 *        S2BIG_BUDGET_MS (run.ts kills the process if one run alone exceeds its 60 s cap).
 */
import { writeFileSync } from 'node:fs';
import { K, K_BIG, M, N, RUNS, bench, check, deferred, floorS1, fullGc, measure, median, withTimeout, type GcMode } from './lib/harness.ts';
import type { Peer } from './lib/peer.ts';
import { FINAL_TEXT } from './lib/scenario.ts';

// K=5000: after the first run, another run starts only if it should end within this budget
// (the runs so far + one more run of the last run's length). run.ts caps a single run at 60 s.
const S2BIG_BUDGET_MS = 30_000;

async function loadPeer(id: string): Promise<Peer> {
  switch (id) {
    case 'ai-sdk':
      return (await import('./adapters/ai-sdk.ts')).aiSdkStreamText;
    case 'ai-sdk-agent':
      return (await import('./adapters/ai-sdk.ts')).aiSdkToolLoopAgent;
    case 'langchain':
      return (await import('./adapters/langchain.ts')).langchainPeer;
    case 'openai-agents':
      return (await import('./adapters/openai-agents.ts')).openaiAgentsPeer;
    case 'rx-agent':
      return (await import('./adapters/rx-agent.ts')).rxAgentPeer;
    default:
      throw new Error(`unknown peer ${id}`);
  }
}

function progress(msg: string) {
  process.stderr.write(`  [${process.argv[2]}] ${msg}\n`);
}

async function phase<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  const r = await fn();
  progress(`${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return r;
}

async function s1Floor(mode: GcMode) {
  const r = await bench(
    N,
    RUNS,
    async () => {
      check((await floorS1(N)) === N, `floor counted ${N} chunks`);
    },
    undefined,
    mode,
  );
  return { cpuNsPerDelta: r.cpuPerUnitNs, wallNsPerDelta: r.wallPerUnitNs };
}

async function s1(peer: Peer, mode: GcMode) {
  const once = (n: number) => async () => {
    const count = await peer.s1(n);
    check(count === n, `${peer.id} S1 counted ${count} text-delta events, expected ${n}`);
  };
  // warm-up with N/10 deltas: enough for the JIT, and spares a full run of the slow peers
  const r = await bench(N, RUNS, once(N), once(N / 10), mode);
  return { cpuNsPerDelta: r.cpuPerUnitNs, wallNsPerDelta: r.wallPerUnitNs };
}

async function s2Once(peer: Peer, k: number) {
  const r = await peer.s2(k);
  check(r.toolCalls === k, `${peer.id} S2 K=${k}: tool executed ${r.toolCalls} times`);
  check(r.toolResultEvents === k, `${peer.id} S2 K=${k}: ${r.toolResultEvents} tool-result events on the stream`);
  check(r.finalText === FINAL_TEXT, `${peer.id} S2 K=${k}: final text ${JSON.stringify(r.finalText)}`);
}

async function s2(peer: Peer, mode: GcMode) {
  const r = await bench(K, RUNS, () => s2Once(peer, K), undefined, mode);
  return { cpuUsPerIteration: r.cpuPerUnitNs / 1000, wallUsPerIteration: r.wallPerUnitNs / 1000 };
}

/** One S3 round: start m runs, wait until all are inside the tool, measure, release, verify. */
async function s3Round(peer: Peer, m: number): Promise<number> {
  await fullGc();
  const t0 = Date.now();
  const before = process.memoryUsage().heapUsed;
  const releases: Array<() => void> = [];
  const allIn = deferred();
  const gate = (_i: number) => {
    const d = deferred();
    releases.push(d.resolve);
    if (releases.length === m) allIn.resolve();
    return d.promise;
  };
  const runs: Promise<string>[] = [];
  for (let i = 0; i < m; i++) runs.push(peer.s3(i, gate));
  await withTimeout(allIn.promise, 120_000, `${peer.id} S3: ${m} runs reaching the tool`);
  await fullGc();
  const after = process.memoryUsage().heapUsed;
  check(releases.length === m, `${peer.id} S3: ${releases.length} runs suspended, expected ${m}`);
  for (const release of releases) release();
  const texts = await withTimeout(Promise.all(runs), 120_000, `${peer.id} S3: released runs completing`);
  const done = texts.filter((t) => t === FINAL_TEXT).length;
  check(done === m, `${peer.id} S3: ${done} of ${m} runs completed with the final text`);
  if (process.env.BENCH_VERBOSE) progress(`S3 round M=${m}: ${Date.now() - t0} ms`);
  return (after - before) / m;
}

async function s3(peer: Peer) {
  await s3Round(peer, M / 10); // warm-up
  const perRun: number[] = [];
  for (let r = 0; r < RUNS; r++) perRun.push(await s3Round(peer, M));
  return { bytesPerSuspendedRun: median(perRun), samples: perRun };
}

async function main() {
  const [id, mode, outFile] = process.argv.slice(2);
  check(id && mode && outFile, 'usage: child.ts <peerId|floor> <main|s2big> <out.json>');
  const out: Record<string, unknown> = { id, mode };
  const save = () => writeFileSync(outFile, JSON.stringify(out, null, 2));

  if (mode === 'main') {
    out.floor = await phase('floor S1', () => s1Floor('gc'));
    out.floorWarm = await phase('floor S1 (warm)', () => s1Floor('warm'));
    save();
    if (id !== 'floor') {
      const peer = await loadPeer(id);
      out.s1 = await phase('S1', () => s1(peer, 'gc'));
      out.s1Warm = await phase('S1 (warm)', () => s1(peer, 'warm'));
      save();
      out.s2 = await phase(`S2 K=${K}`, () => s2(peer, 'gc'));
      out.s2Warm = await phase(`S2 K=${K} (warm)`, () => s2(peer, 'warm'));
      save();
      out.s3 = await phase(`S3 M=${M}`, () => s3(peer));
      save();
    }
  } else if (mode === 's2big') {
    const peer = await loadPeer(id);
    await s2Once(peer, K); // warm-up
    process.stdout.write('WARM_DONE\n'); // run.ts starts its per-run cap here
    const samples: Array<{ cpuNs: number; wallNs: number }> = [];
    let spent = 0;
    let last = 0;
    while (samples.length < RUNS && (samples.length === 0 || spent + last <= S2BIG_BUDGET_MS)) {
      await fullGc();
      const s = await measure(() => s2Once(peer, K_BIG));
      samples.push(s);
      last = s.wallNs / 1e6;
      spent += last;
      out.s2big = {
        runs: samples.length,
        cpuUsPerIteration: median(samples.map((x) => x.cpuNs)) / K_BIG / 1000,
        wallUsPerIteration: median(samples.map((x) => x.wallNs)) / K_BIG / 1000,
      };
      save();
      process.stdout.write(`RUN_DONE ${s.wallNs / 1e6}\n`); // lets run.ts reset its per-run cap
      progress(`S2 K=${K_BIG} run ${samples.length}: ${(s.wallNs / 1e9).toFixed(1)} s`);
    }
  } else throw new Error(`unknown mode ${mode}`);
  save();
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
