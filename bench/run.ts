/**
 * `npm run bench` (root package.json: `tsx bench/run.ts`).
 *
 * No network (the abort workload uses a loopback server), fake models shaped like a real SDK
 * stream. Runs S1 streaming (bare, and through the AG-UI and AI SDK encoders), S2 loop, S3 memory, abort latency and bundle size; prints a table and
 * writes bench/results/rx-agent.json. Exits 1 when a workload's own check fails (wrong counts,
 * runs that do not complete); a missed TARGET is reported FAIL in the table (exit 2 with --strict).
 *
 * Started by tsx, this file bundles itself with esbuild (as the published build is made: no
 * `keepNames` helpers, which tsx adds to every closure and which cost ~10% of a loop iteration) and
 * re-runs the bundle as `node --expose-gc` (S3 forces GC). rxjs, zod and openai stay external, so
 * Node loads them exactly as it does for a user of the package. Every workload, the floor
 * included, then runs in that one process.
 *
 * S1 runs twice: with the five operators, and with `telemetry()` registered after them on the
 * global no-op tracer and meter (no OpenTelemetry SDK registered: what the middleware itself costs).
 *
 * Options: `--only wire,s1,s1gc,floors,s1otel,s1j,s1ui,s2,s3,abort,size,redis,postgres` (s1j: S1 journaled to a memoryStore) runs a subset (the JSON is then not written), `--strict`.
 * `redis` (durable runs on redisStore) needs Redis at REDIS_URL (default redis://127.0.0.1:6379);
 * `postgres` (on postgresStore) PostgreSQL at DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hasGc, type Sample } from './lib/harness';
import type { FloorsResult } from './workloads/floors';
import type { Measured } from './lib/harness';

// npm runs scripts at the package root; the bundled re-run below keeps that working directory.
const root = process.cwd();
const here = join(root, 'bench');
const args = process.argv.slice(2);

if (!hasGc()) {
  const { build } = await import('esbuild');
  const bundle = join(root, 'bench', 'results', 'bench.bundle.mjs');
  mkdirSync(dirname(bundle), { recursive: true });
  await build({
    entryPoints: [fileURLToPath(import.meta.url)],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile: bundle,
    packages: 'external',
    logLevel: 'warning',
  });
  const child = spawnSync(process.execPath, ['--expose-gc', bundle, ...args], { cwd: root, stdio: 'inherit' });
  process.exit(child.status ?? 1);
}

// The floors' own process (see bench/workloads/floors.ts): their figures as JSON on stdout.
if (args.includes('--floors-child')) {
  const { runFloors } = await import('./workloads/floors');
  process.stdout.write(`${JSON.stringify(await runFloors())}\n`);
  process.exit(0);
}

const { loadFiveOperators, loadPermissions } = await import('./lib/operators');
const { runS1, N, S1_PAIRS } = await import('./workloads/s1');
const { telemetry } = await import('../src/otel/index');
const { runS1Ui } = await import('./workloads/s1ui');
const { runS2, runsAt, K, K_BIG, S2_KS } = await import('./workloads/s2');
const { runS3, M } = await import('./workloads/s3');
const { runAbort } = await import('./workloads/abort');
const { runSize } = await import('./workloads/size');
const { runRedis, RESUMES, CATCH_UP_DELTAS } = await import('./workloads/redis');
const { runWire, N_WIRE } = await import('./workloads/wire');
const { GC_MODES } = await import('./lib/harness');
const { runPostgres } = await import('./workloads/postgres');

const onlyArg = args.find((a) => a.startsWith('--only'));
const only = onlyArg ? new Set((onlyArg.includes('=') ? onlyArg.split('=')[1] : (args[args.indexOf(onlyArg) + 1] ?? '')).split(',')) : undefined;
const strict = args.includes('--strict');
const wants = (w: string) => !only || only.has(w);

const TARGET = {
  s1Ratio: 1.5,
  s1JournalRatio: 2,
  s1UiRatio: 2,
  s2Us: 20,
  s2Scale: 1.5,
  s2GcRatio: 2,
  s1wRatio: 0.5,
  s2rRatio: 1.2,
  s3Bytes: 8 * 1024,
  abortMs: 5,
  coreBytes: 16 * 1024,
  appBytes: 18 * 1024,
  s1RedisRatio: 3,
  s2RedisScale: 1.5,
  s1PostgresRatio: 3,
  s2PostgresScale: 1.5,
};

const started = Date.now();
const ops = loadFiveOperators();
const permissions = loadPermissions();
const middleware = ops.map((o) => o.middleware);
console.log(`operators: ${[...ops, permissions].map((o) => o.name).join(', ')}`);

const log = (s: string) => process.stdout.write(`${s}\n`);
const results: Record<string, unknown> = {};
const failures: string[] = [];

/** The floors (bench/workloads/floors.ts), measured by this bundle run again in a process of its own. */
function floorsInChild(): FloorsResult {
  const child = spawnSync(process.execPath, ['--expose-gc', process.argv[1], '--floors-child'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (child.status !== 0) throw new Error(`the floors' process exited with ${String(child.status ?? child.signal)}`);
  return JSON.parse(child.stdout.trim().split('\n').at(-1) ?? '') as FloorsResult;
}

async function step<T>(name: string, fn: () => Promise<T>, wanted = wants(name)): Promise<T | undefined> {
  if (!wanted) return undefined;
  const t0 = Date.now();
  try {
    const r = await fn();
    log(`  ${name} done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return r;
  } catch (error) {
    failures.push(`${name}: ${(error as Error).stack ?? String(error)}`);
    log(`  ${name} FAILED: ${(error as Error).message}`);
    return undefined;
  }
}

const size = await step('size', runSize);
const s1 = await step('s1', () => runS1(middleware));
const s1gc = await step('s1gc', () => runS1(middleware, false, 'gc'));
const s1otel = await step('s1otel', () => runS1([...middleware, telemetry()]));
const s1j = await step('s1j', () => runS1(middleware, true));
const s1ui = await step('s1ui', () => runS1Ui(middleware));
const s2 = await step('s2', () => runS2(middleware));
// S1's and S2's floors written by hand with rxjs, in a process of their own (with s2, or alone).
const floors = await step('floors', () => Promise.resolve(floorsInChild()), wants('floors') || wants('s2'));
const s3 = await step('s3', () => runS3(middleware, permissions.middleware));
const abort = await step('abort', () => runAbort(middleware));
const redis = await step('redis', () => runRedis(middleware));
const wire = await step('wire', () => runWire(middleware, GC_MODES));
const postgres = await step('postgres', () => runPostgres(middleware));

// ---- table ------------------------------------------------------------------------------------
const f = (x: number | undefined, d = 0) =>
  x === undefined || Number.isNaN(x) ? '—' : x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
const pf = (ok: boolean | undefined) => (ok === undefined ? '—' : ok ? 'PASS' : 'FAIL');
const meanUs = (samples: readonly Sample[], units: number) => samples.reduce((sum, s) => sum + s.cpuNs, 0) / samples.length / units / 1000;
const rows: string[][] = [];
const verdicts: boolean[] = [];
function row(workload: string, floor: string, rx: string, ratio: string, target: string, ok: boolean | undefined) {
  rows.push([workload, floor, rx, ratio, target, pf(ok)]);
  if (ok !== undefined) verdicts.push(ok);
}

if (s1) {
  const ratio = s1.rx.cpuNs / s1.floor.cpuNs;
  const wallRatio = s1.rx.wallNs / s1.floor.wallNs;
  row(`S1 streaming, ns/delta CPU (N=${f(N)})`, f(s1.floor.cpuNs), f(s1.rx.cpuNs), `${f(ratio, 2)}×`, `≤ ${TARGET.s1Ratio}× floor`, ratio <= TARGET.s1Ratio);
  row('S1 streaming, ns/delta wall', f(s1.floor.wallNs), f(s1.rx.wallNs), `${f(wallRatio, 2)}×`, '(info)', undefined);
  results.s1 = {
    nsPerDelta: s1.rx.cpuNs,
    floorNsPerDelta: s1.floor.cpuNs,
    ratio,
    cpuNsPerDelta: s1.rx.cpuNs,
    wallNsPerDelta: s1.rx.wallNs,
    floorWallNsPerDelta: s1.floor.wallNs,
    wallRatio,
    n: N,
  };
}
if (s1gc) {
  const ratio = s1gc.rx.cpuNs / s1gc.floor.cpuNs;
  row('S1 after a forced GC, ns/delta CPU', f(s1gc.floor.cpuNs), f(s1gc.rx.cpuNs), `${f(ratio, 2)}×`, `≤ ${TARGET.s1Ratio}× floor`, ratio <= TARGET.s1Ratio);
  results.s1Gc = { nsPerDelta: s1gc.rx.cpuNs, floorNsPerDelta: s1gc.floor.cpuNs, ratio, wallNsPerDelta: s1gc.rx.wallNs, n: N };
}
if (floors) {
  const s1rx = floors.s1;
  for (const [mode, r] of [
    ['warm', s1rx.warm],
    ['after a forced GC', s1rx.gc],
  ] as const) {
    const ratio = r.rx.cpuNs / r.floor.cpuNs;
    row(`S1 through a minimal rxjs pipeline (five forwarding wrappers), ${mode}`, f(r.floor.cpuNs), f(r.rx.cpuNs), `${f(ratio, 2)}×`, '(info)', undefined);
  }
  results.s1RxjsPipeline = {
    warm: { nsPerDelta: s1rx.warm.rx.cpuNs, floorNsPerDelta: s1rx.warm.floor.cpuNs },
    gc: { nsPerDelta: s1rx.gc.rx.cpuNs, floorNsPerDelta: s1rx.gc.floor.cpuNs },
  };
}
if (s1otel) {
  const ratio = s1otel.rx.cpuNs / s1otel.floor.cpuNs;
  row(
    'S1 + telemetry() (no-op tracer), ns/delta CPU',
    f(s1otel.floor.cpuNs),
    f(s1otel.rx.cpuNs),
    `${f(ratio, 2)}×`,
    `≤ ${TARGET.s1Ratio}× floor`,
    ratio <= TARGET.s1Ratio,
  );
  results.s1Telemetry = { nsPerDelta: s1otel.rx.cpuNs, floorNsPerDelta: s1otel.floor.cpuNs, ratio, wallNsPerDelta: s1otel.rx.wallNs, n: N };
}
if (s1j) {
  const ratio = s1j.rx.cpuNs / s1j.floor.cpuNs;
  row(
    'S1 journaled (memoryStore), ns/delta CPU',
    f(s1j.floor.cpuNs),
    f(s1j.rx.cpuNs),
    `${f(ratio, 2)}×`,
    `≤ ${TARGET.s1JournalRatio}× floor`,
    ratio <= TARGET.s1JournalRatio,
  );
  results.s1Journaled = { cpuNsPerDelta: s1j.rx.cpuNs, floorNsPerDelta: s1j.floor.cpuNs, ratio, n: N };
}
if (s1ui) {
  const agUi = s1ui.agUi.cpuNs / s1ui.floor.cpuNs;
  const aiSdk = s1ui.aiSdk.cpuNs / s1ui.floor.cpuNs;
  row(
    'S1 + toAgUi + SSE frames, ns/delta CPU',
    f(s1ui.floor.cpuNs),
    f(s1ui.agUi.cpuNs),
    `${f(agUi, 2)}×`,
    `≤ ${TARGET.s1UiRatio}× floor`,
    agUi <= TARGET.s1UiRatio,
  );
  row(
    'S1 + toUIMessageStream + SSE frames, ns/delta CPU',
    f(s1ui.floor.cpuNs),
    f(s1ui.aiSdk.cpuNs),
    `${f(aiSdk, 2)}×`,
    `≤ ${TARGET.s1UiRatio}× floor`,
    aiSdk <= TARGET.s1UiRatio,
  );
  results.s1ui = {
    floorNsPerDelta: s1ui.floor.cpuNs,
    agUiNsPerDelta: s1ui.agUi.cpuNs,
    agUiRatio: agUi,
    aiSdkNsPerDelta: s1ui.aiSdk.cpuNs,
    aiSdkRatio: aiSdk,
    n: N,
  };
}
/** The hand-written rxjs loop after a forced GC at one K, beside its own warm figure (information). */
function rxjsLoopGcRow(loop: { readonly k: number; readonly warm: Measured; readonly gc: Measured }): void {
  const warmUs = loop.warm.cpuNs / 1000;
  const gcUs = loop.gc.cpuNs / 1000;
  row(
    `S2 rxjs loop, µs/iteration CPU (K=${f(loop.k)}), after a forced GC`,
    `${f(warmUs, 1)} (its warm)`,
    f(gcUs, 1),
    `${f(gcUs / warmUs, 2)}×`,
    '(info)',
    undefined,
  );
}

if (s2) {
  // Per K: warm and after a forced GC; net of the model's reading in the same runs (rx-agent's
  // own work); beside each, the hand-written rxjs loop (S2's floor) when the floors ran.
  const first = s2.points[0];
  const loopAt = (k: number) => floors?.s2.points.find((q) => q.k === k);
  const us = (ns: number) => ns / 1000;
  const beside = (ns: number | undefined, what: string) => (ns === undefined ? '—' : `${f(us(ns), 1)} (${what})`);
  for (const p of s2.points) {
    const loop = loopAt(p.k);
    const warmUs = us(p.warm.cpuNs);
    const gcUs = us(p.gc.cpuNs);
    const overLoop = loop ? `${f(p.warm.cpuNs / loop.warm.cpuNs, 2)}×` : '—';
    // K = 500 carries the target; the larger K are shown beside it.
    const target = p === first ? `≤ ${TARGET.s2Us} µs` : '(info)';
    row(
      `S2 loop, µs/iteration CPU (K=${f(p.k)}), warm`,
      beside(loop?.warm.cpuNs, 'rxjs loop'),
      f(warmUs, 1),
      overLoop,
      target,
      p === first ? warmUs <= TARGET.s2Us : undefined,
    );
    row(
      `S2 loop, the model's reading inside the runs (K=${f(p.k)}), µs/iteration`,
      beside(loop?.warm.readingNs, 'rxjs loop'),
      f(us(p.warm.readingNs), 1),
      '—',
      '(info)',
      undefined,
    );
    if (p !== first) {
      const scale = p.warm.ownNs / first.warm.ownNs;
      const firstLoop = loopAt(first.k);
      const loopScale =
        loop && firstLoop
          ? `${f(loop.warm.ownNs / firstLoop.warm.ownNs, 2)}× (rxjs loop: ${f(us(loop.warm.ownNs), 1)} against ${f(us(firstLoop.warm.ownNs), 1)})`
          : '—';
      row(
        `S2 loop, wall net of the model's reading (K=${f(p.k)} against K=${f(first.k)})`,
        loopScale,
        `${f(us(p.warm.ownNs), 1)} against ${f(us(first.warm.ownNs), 1)}`,
        `${f(scale, 2)}×`,
        `≤ ${TARGET.s2Scale}× K=${f(first.k)}`,
        scale <= TARGET.s2Scale,
      );
    }
    row(
      `S2 loop, µs/iteration CPU (K=${f(p.k)}), after a forced GC`,
      `${f(warmUs, 1)} (warm)`,
      f(gcUs, 1),
      `${f(gcUs / warmUs, 2)}×`,
      `≤ ${TARGET.s2GcRatio}× warm`,
      gcUs / warmUs <= TARGET.s2GcRatio,
    );
    if (loop) rxjsLoopGcRow(loop);
    row(
      `S2 loop, µs/iteration, mean of the runs / wall (K=${f(p.k)}), warm`,
      '—',
      `${f(meanUs(p.warm.samples, p.k), 1)} / ${f(p.warm.wallNs / 1000, 1)}`,
      '—',
      '(info)',
      undefined,
    );
  }
  results.s2 = {
    points: s2.points.map((p) => ({
      k: p.k,
      warmUsPerIteration: p.warm.cpuNs / 1000,
      gcUsPerIteration: p.gc.cpuNs / 1000,
      readingUsPerIteration: p.warm.readingNs / 1000,
      ownWarmUsPerIteration: p.warm.ownNs / 1000,
      ownGcUsPerIteration: p.gc.ownNs / 1000,
      wallUsPerIteration: p.warm.wallNs / 1000,
      runsUsPerIteration: p.warm.samples.map((x) => x.cpuNs / p.k / 1000),
      gcRunsUsPerIteration: p.gc.samples.map((x) => x.cpuNs / p.k / 1000),
    })),
  };
}
if (floors && !s2) {
  // The floors alone (`--only floors`): the loop's own rows, which otherwise stand beside S2's.
  for (const p of floors.s2.points) {
    row(`S2 rxjs loop, µs/iteration CPU (K=${f(p.k)}), warm`, '—', f(p.warm.cpuNs / 1000, 1), '—', '(info)', undefined);
    rxjsLoopGcRow(p);
  }
}
if (floors) {
  results.s2RxjsLoop = {
    points: floors.s2.points.map((p) => ({
      k: p.k,
      warmUsPerIteration: p.warm.cpuNs / 1000,
      gcUsPerIteration: p.gc.cpuNs / 1000,
      readingUsPerIteration: p.warm.readingNs / 1000,
      ownWarmUsPerIteration: p.warm.ownNs / 1000,
    })),
  };
}
if (s3) {
  row(
    `S3 heap B/run suspended in a tool (M=${f(M)})`,
    `${f(s3.harnessBytesPerRun)} (bench's promise)`,
    f(s3.bytesPerSuspendedRun),
    '—',
    `≤ ${f(TARGET.s3Bytes)} B`,
    s3.bytesPerSuspendedRun <= TARGET.s3Bytes,
  );
  row(
    `S3 heap B/run waiting on permission (M=${f(M)})`,
    '—',
    f(s3.bytesPerPermissionWait),
    '—',
    `≤ ${f(TARGET.s3Bytes)} B`,
    s3.bytesPerPermissionWait <= TARGET.s3Bytes,
  );
  row(
    `S3 heap B/run waiting on permission, start() + respond() (M=${f(M)})`,
    '—',
    f(s3.bytesPerStartedPermissionWait),
    '—',
    `≤ ${f(TARGET.s3Bytes)} B`,
    s3.bytesPerStartedPermissionWait <= TARGET.s3Bytes,
  );
  results.s3 = {
    bytesPerStartedPermissionWait: s3.bytesPerStartedPermissionWait,
    bytesPerSuspendedRun: s3.bytesPerSuspendedRun,
    bytesPerPermissionWait: s3.bytesPerPermissionWait,
    harnessBytesPerRun: s3.harnessBytesPerRun,
    m: M,
  };
}
if (abort) {
  row('abort: unsubscribe → server sees close, ms', '—', f(abort.msToClose, 2), '—', `< ${TARGET.abortMs} ms`, abort.msToClose < TARGET.abortMs);
  results.abort = { msToClose: abort.msToClose, samplesMs: abort.samples };
}
if (size) {
  const bytes = (s: { gzipBytes: number; minifiedBytes: number }) => `${f(s.gzipBytes)} (min ${f(s.minifiedBytes)})`;
  row('size: rx-agent (core) min+gzip, bytes', '—', bytes(size.core), '—', `≤ ${f(TARGET.coreBytes)} B`, size.core.gzipBytes <= TARGET.coreBytes);
  row(`size: ${size.app.entry}, tree-shaken`, '—', bytes(size.app), '—', `≤ ${f(TARGET.appBytes)} B`, size.app.gzipBytes <= TARGET.appBytes);
  for (const entry of size.entries) if (entry !== size.core) row(`size: ${entry.entry} min+gzip, bytes`, '—', bytes(entry), '—', '(info)', undefined);
  results.size = size;
}

if (redis) {
  const { s1: r1, s2: r2, resume, catchUp } = redis;
  const ratio = r1.rx.cpuNs / r1.floor.cpuNs;
  const commands = Object.entries(r1.commandsPerRun)
    .map(([name, n]) => `${n} ${name}`)
    .join(', ');
  row(
    `S1 on redisStore, ns/delta CPU (N=${f(N)})`,
    f(r1.floor.cpuNs),
    f(r1.rx.cpuNs),
    `${f(ratio, 2)}×`,
    `≤ ${TARGET.s1RedisRatio}× floor`,
    ratio <= TARGET.s1RedisRatio,
  );
  row('S1 on redisStore, ns/delta wall', f(r1.floor.wallNs), f(r1.rx.wallNs), `${f(r1.rx.wallNs / r1.floor.wallNs, 2)}×`, '(info)', undefined);
  row('S1 on redisStore, commands to Redis per run (1 iteration)', '—', commands, '—', '(info)', undefined);
  const us500 = r2.k500.cpuNs / 1000;
  const us5000 = r2.k5000.cpuNs / 1000;
  row(`S2 on redisStore, µs/iteration CPU (K=${K})`, '—', f(us500, 1), '—', '(info)', undefined);
  row(
    `S2 on redisStore, µs/iteration CPU (K=${f(K_BIG)})`,
    `${f(us500, 1)} (K=${K})`,
    f(us5000, 1),
    `${f(us5000 / us500, 2)}×`,
    `≤ ${TARGET.s2RedisScale}× K=${K}`,
    us5000 / us500 <= TARGET.s2RedisScale,
  );
  row(
    `S2 on redisStore, µs/iteration wall (K=${K} / ${f(K_BIG)})`,
    '—',
    `${f(r2.k500.wallNs / 1000, 1)} / ${f(r2.k5000.wallNs / 1000, 1)}`,
    `${f(r2.k5000.wallNs / r2.k500.wallNs, 2)}×`,
    '(info)',
    undefined,
  );
  row(
    `S2 on redisStore, commands to Redis per iteration (K=${K} / ${f(K_BIG)})`,
    '—',
    `${f(r2.commandsPerIteration500, 2)} / ${f(r2.commandsPerIteration5000, 2)}`,
    '—',
    '(info)',
    undefined,
  );
  row(
    `resume after SIGKILL → run-start / next event, ms (median of ${RESUMES})`,
    '—',
    `${f(resume.msToRunStart, 1)} / ${f(resume.msToNextEvent, 1)}`,
    '—',
    '(info)',
    undefined,
  );
  row(
    `events() catch-up from seq 0, events/s (${f(catchUp.events)} events, ${f(catchUp.records)} records; S1 N=${f(CATCH_UP_DELTAS)})`,
    '—',
    f(catchUp.eventsPerSecond),
    '—',
    '(info)',
    undefined,
  );
  results.redis = {
    s1NsPerDelta: r1.rx.cpuNs,
    s1FloorNsPerDelta: r1.floor.cpuNs,
    s1Ratio: ratio,
    s1WallNsPerDelta: r1.rx.wallNs,
    s1CommandsPerRun: r1.commandsPerRun,
    s2UsPerIteration500: us500,
    s2UsPerIteration5000: us5000,
    s2Ratio: us5000 / us500,
    s2WallUsPerIteration500: r2.k500.wallNs / 1000,
    s2WallUsPerIteration5000: r2.k5000.wallNs / 1000,
    s2CommandsPerIteration500: r2.commandsPerIteration500,
    s2CommandsPerIteration5000: r2.commandsPerIteration5000,
    resumeMsToRunStart: resume.msToRunStart,
    resumeMsToNextEvent: resume.msToNextEvent,
    resumeSamplesMs: resume.samples,
    catchUpEventsPerSecond: catchUp.eventsPerSecond,
    catchUpEvents: catchUp.events,
    catchUpRecords: catchUp.records,
  };
}

if (wire) {
  for (const r of wire.s1w) {
    const label = `S1w on the wire (${r.framing === 'whole' ? 'body in one write' : 'one write per event'}, ${r.mode === 'gc' ? 'after a forced GC' : 'warm'}), ns/delta CPU, N=${f(N_WIRE)}`;
    const ratio = r.openAIChat.cpuNs / r.sdk.cpuNs;
    row(
      `${label}: openAIChat vs the SDK's for await`,
      f(r.sdk.cpuNs),
      f(r.openAIChat.cpuNs),
      `${f(ratio, 2)}×`,
      `≤ ${TARGET.s1wRatio}× SDK`,
      ratio <= TARGET.s1wRatio,
    );
    const agentRatio = r.agentSSE.cpuNs / r.sdkForAgent.cpuNs;
    row(`${label}: agent + toSSEStream vs the SDK's for await`, f(r.sdkForAgent.cpuNs), f(r.agentSSE.cpuNs), `${f(agentRatio, 2)}×`, '(info)', undefined);
  }
  for (const r of wire.s2r) {
    const label = `S2r loop on the wire, µs/iteration CPU (K=${f(r.k)}, ${r.mode === 'gc' ? 'after a forced GC' : 'warm'})`;
    const ratio = r.agent.cpuNs / r.sdk.cpuNs;
    row(
      `${label}: agent vs a raw-SDK loop`,
      f(r.sdk.cpuNs / 1000, 1),
      f(r.agent.cpuNs / 1000, 1),
      `${f(ratio, 2)}×`,
      `≤ ${TARGET.s2rRatio}× SDK loop`,
      ratio <= TARGET.s2rRatio,
    );
    const aiSdkRatio = r.aiSdk.cpuNs / r.sdkForAiSdk.cpuNs;
    row(
      `${label}: AI SDK (openai-compatible) vs a raw-SDK loop`,
      f(r.sdkForAiSdk.cpuNs / 1000, 1),
      f(r.aiSdk.cpuNs / 1000, 1),
      `${f(aiSdkRatio, 2)}×`,
      '(info)',
      undefined,
    );
  }
  results.wire = {
    s1w: wire.s1w.map((r) => ({
      framing: r.framing,
      mode: r.mode,
      sdkNsPerDelta: r.sdk.cpuNs,
      openAIChatNsPerDelta: r.openAIChat.cpuNs,
      ratio: r.openAIChat.cpuNs / r.sdk.cpuNs,
      agentSSENsPerDelta: r.agentSSE.cpuNs,
      sdkForAgentNsPerDelta: r.sdkForAgent.cpuNs,
    })),
    s2r: wire.s2r.map((r) => ({
      k: r.k,
      mode: r.mode,
      sdkUsPerIteration: r.sdk.cpuNs / 1000,
      agentUsPerIteration: r.agent.cpuNs / 1000,
      ratio: r.agent.cpuNs / r.sdk.cpuNs,
      sdkForAiSdkUsPerIteration: r.sdkForAiSdk.cpuNs / 1000,
      aiSdkUsPerIteration: r.aiSdk.cpuNs / 1000,
      aiSdkRatio: r.aiSdk.cpuNs / r.sdkForAiSdk.cpuNs,
    })),
  };
}

if (postgres) {
  const { s1: p1, s2: p2, catchUp } = postgres;
  const ratio = p1.rx.cpuNs / p1.floor.cpuNs;
  const statements = Object.entries(p1.statementsPerRun)
    .map(([name, n]) => `${n} ${name}`)
    .join(', ');
  const us500 = p2.k500.cpuNs / 1000;
  const us5000 = p2.k5000.cpuNs / 1000;
  row(
    `S1 on postgresStore, ns/delta CPU (N=${f(N)})`,
    f(p1.floor.cpuNs),
    f(p1.rx.cpuNs),
    `${f(ratio, 2)}×`,
    `≤ ${TARGET.s1PostgresRatio}× floor`,
    ratio <= TARGET.s1PostgresRatio,
  );
  row('S1 on postgresStore, ns/delta wall', f(p1.floor.wallNs), f(p1.rx.wallNs), `${f(p1.rx.wallNs / p1.floor.wallNs, 2)}×`, '(info)', undefined);
  row('S1 on postgresStore, statements per run (1 iteration)', '—', statements, '—', '(info)', undefined);
  row(`S2 on postgresStore, µs/iteration CPU (K=${K})`, '—', f(us500, 1), '—', '(info)', undefined);
  row(
    `S2 on postgresStore, µs/iteration CPU (K=${f(K_BIG)})`,
    `${f(us500, 1)} (K=${K})`,
    f(us5000, 1),
    `${f(us5000 / us500, 2)}×`,
    `≤ ${TARGET.s2PostgresScale}× K=${K}`,
    us5000 / us500 <= TARGET.s2PostgresScale,
  );
  row(
    `S2 on postgresStore, µs/iteration wall (K=${K} / ${f(K_BIG)})`,
    '—',
    `${f(p2.k500.wallNs / 1000, 1)} / ${f(p2.k5000.wallNs / 1000, 1)}`,
    `${f(p2.k5000.wallNs / p2.k500.wallNs, 2)}×`,
    '(info)',
    undefined,
  );
  row(
    `S2 on postgresStore, statements per iteration (K=${K} / ${f(K_BIG)})`,
    '—',
    `${f(p2.statementsPerIteration500, 2)} / ${f(p2.statementsPerIteration5000, 2)}`,
    '—',
    '(info)',
    undefined,
  );
  row(
    `events() catch-up on postgresStore, events/s (${f(catchUp.events)} events, ${f(catchUp.records)} records)`,
    '—',
    f(catchUp.eventsPerSecond),
    '—',
    '(info)',
    undefined,
  );
  results.postgres = {
    s1NsPerDelta: p1.rx.cpuNs,
    s1FloorNsPerDelta: p1.floor.cpuNs,
    s1Ratio: ratio,
    s1WallNsPerDelta: p1.rx.wallNs,
    s1StatementsPerRun: p1.statementsPerRun,
    s2UsPerIteration500: us500,
    s2UsPerIteration5000: us5000,
    s2Ratio: us5000 / us500,
    s2WallUsPerIteration500: p2.k500.wallNs / 1000,
    s2WallUsPerIteration5000: p2.k5000.wallNs / 1000,
    s2StatementsPerIteration500: p2.statementsPerIteration500,
    s2StatementsPerIteration5000: p2.statementsPerIteration5000,
    catchUpEventsPerSecond: catchUp.eventsPerSecond,
    catchUpEvents: catchUp.events,
    catchUpRecords: catchUp.records,
  };
}

const header = ['workload', 'floor', 'rx-agent', 'ratio', 'target', 'pass/fail'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' │ ');
const machine = {
  cpu: cpus()[0]?.model ?? 'unknown',
  cores: cpus().length,
  memoryGB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
  node: process.version,
  date: new Date().toISOString(),
};
console.log(`\nrx-agent bench · node ${machine.node} · ${machine.cores} × ${machine.cpu} · ${machine.memoryGB} GB`);
console.log('');
console.log(line(header));
console.log(widths.map((w) => '─'.repeat(w)).join('─┼─'));
for (const r of rows) console.log(line(r));
console.log(
  `\nmedians after a warm-up (≥3 runs and ≥1 s; S1: ${S1_PAIRS} alternating floor/rx runs; S2: ${S2_KS.map((k) => `${runsAt(k)} at K=${k}`).join(', ')}; S3: 5 runs; abort: 9).` +
    '\nS1 and S2 pass/fail on CPU time (process.cpuUsage: robust on a shared machine); wall (performance.now) shown for information.' +
    '\nS3: heapUsed after forced GC, per run, bench-side promise included (its share shown in the floor column).',
);

if (failures.length) {
  console.error(`\n${failures.length} workload(s) FAILED their own checks:\n${failures.join('\n\n')}`);
  process.exit(1);
}
if (!only) {
  const out = { machine, workloads: results, operators: [...ops, permissions].map(({ name }) => name) };
  mkdirSync(join(here, 'results'), { recursive: true });
  writeFileSync(join(here, 'results', 'rx-agent.json'), JSON.stringify(out, null, 2) + '\n');
  console.log(`\nwrote bench/results/rx-agent.json in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}
if (strict && verdicts.some((v) => !v)) process.exit(2);
