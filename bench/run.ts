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
 * Options: `--only s1,s1otel,s1j,s1ui,s2,s3,abort,size,redis,postgres` (s1j: S1 journaled to a memoryStore) runs a subset (the JSON is then not written), `--strict`.
 * `redis` (durable runs on redisStore) needs Redis at REDIS_URL (default redis://127.0.0.1:6379);
 * `postgres` (on postgresStore) PostgreSQL at DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hasGc, type Sample } from './lib/harness';

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

const { loadFiveOperators, loadPermissions } = await import('./lib/operators');
const { runS1, N, S1_PAIRS } = await import('./workloads/s1');
const { telemetry } = await import('../src/otel/index');
const { runS1Ui } = await import('./workloads/s1ui');
const { runS2, K, K_BIG } = await import('./workloads/s2');
const { runS3, M } = await import('./workloads/s3');
const { runAbort } = await import('./workloads/abort');
const { runSize } = await import('./workloads/size');
const { runRedis, RESUMES, CATCH_UP_DELTAS } = await import('./workloads/redis');
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

async function step<T>(name: string, fn: () => Promise<T>): Promise<T | undefined> {
  if (!wants(name)) return undefined;
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
const s1otel = await step('s1otel', () => runS1([...middleware, telemetry()]));
const s1j = await step('s1j', () => runS1(middleware, true));
const s1ui = await step('s1ui', () => runS1Ui(middleware));
const s2 = await step('s2', () => runS2(middleware));
const s3 = await step('s3', () => runS3(middleware, permissions.middleware));
const abort = await step('abort', () => runAbort(middleware));
const redis = await step('redis', () => runRedis(middleware));
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
if (s2) {
  const us500 = s2.k500.cpuNs / 1000;
  const us5000 = s2.k5000.cpuNs / 1000;
  const ratio = us5000 / us500;
  row(`S2 loop, µs/iteration CPU (K=${K})`, '—', f(us500, 1), '—', `≤ ${TARGET.s2Us} µs`, us500 <= TARGET.s2Us);
  row(
    `S2 loop, µs/iteration CPU (K=${f(K_BIG)})`,
    `${f(us500, 1)} (K=${K})`,
    f(us5000, 1),
    `${f(ratio, 2)}×`,
    `≤ ${TARGET.s2Scale}× K=${K}`,
    ratio <= TARGET.s2Scale,
  );
  // The runs are bimodal (a run in which a young-generation collection lands costs several µs more
  // per iteration), so the median can sit on either mode; the mean spreads the collections evenly.
  const mean500 = meanUs(s2.k500.samples, K);
  const mean5000 = meanUs(s2.k5000.samples, K_BIG);
  row(
    `S2 loop, µs/iteration CPU, mean of the runs (K=${K} / ${f(K_BIG)})`,
    '—',
    `${f(mean500, 1)} / ${f(mean5000, 1)}`,
    `${f(mean5000 / mean500, 2)}×`,
    '(info)',
    undefined,
  );
  row(
    `S2 loop, µs/iteration wall (K=${K} / ${f(K_BIG)})`,
    '—',
    `${f(s2.k500.wallNs / 1000, 1)} / ${f(s2.k5000.wallNs / 1000, 1)}`,
    `${f(s2.k5000.wallNs / s2.k500.wallNs, 2)}×`,
    '(info)',
    undefined,
  );
  results.s2 = {
    usPerIteration500: us500,
    usPerIteration5000: us5000,
    ratio,
    wallUsPerIteration500: s2.k500.wallNs / 1000,
    wallUsPerIteration5000: s2.k5000.wallNs / 1000,
    meanUsPerIteration500: mean500,
    meanUsPerIteration5000: mean5000,
    runsUsPerIteration500: s2.k500.samples.map((s) => s.cpuNs / K / 1000),
    runsUsPerIteration5000: s2.k5000.samples.map((s) => s.cpuNs / K_BIG / 1000),
    k: K,
    kBig: K_BIG,
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
  results.s3 = {
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
  `\nmedians after a warm-up (≥3 runs and ≥1 s; S1: ${S1_PAIRS} alternating floor/rx runs; S2: 9 runs at K=500, then 5 at K=5000; S3: 5 runs; abort: 9).` +
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
