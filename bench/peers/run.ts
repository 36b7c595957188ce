/**
 * `npm run bench` in bench/peers (or `npm run bench:peers` at the root).
 *
 * Spawns one fresh `node --expose-gc` process per peer (plus one for the floor), so that every
 * peer's numbers, and its floor, come from its own process and no peer's modules sit in another's
 * heap. Prints one table and writes ../results/peers.json. Exits non-zero if any workload's own
 * check failed (a K=5000 run over the cap is reported as 'timeout', not as a failure).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { K, K_BIG, M, N, RUNS } from './lib/harness.ts';

const here = dirname(fileURLToPath(import.meta.url));
const resultsDir = join(here, '..', 'results');
const ALL_PEERS = [
  { id: 'rx-agent', label: 'rx-agent (five operators)', packages: [] as string[] },
  { id: 'ai-sdk', label: 'AI SDK streamText', packages: ['ai', '@ai-sdk/provider'] },
  { id: 'ai-sdk-agent', label: 'AI SDK ToolLoopAgent', packages: ['ai', '@ai-sdk/provider'] },
  { id: 'langchain', label: 'LangChain createAgent', packages: ['langchain', '@langchain/core', '@langchain/langgraph'] },
  { id: 'openai-agents', label: 'OpenAI Agents SDK', packages: ['@openai/agents', '@openai/agents-core'] },
];
// BENCH_PEERS=langchain,openai-agents runs a subset (ids above).
const only = process.env.BENCH_PEERS?.split(',')
  .map((x) => x.trim())
  .filter(Boolean);
const PEERS = only ? ALL_PEERS.filter((p) => only.includes(p.id)) : ALL_PEERS;
if (only && PEERS.length !== only.length) throw new Error(`BENCH_PEERS: unknown id in ${only.join(',')}`);
const MAIN_TIMEOUT_MS = 300_000; // a whole main child (S1+S2+S3); far above normal, catches hangs
const S2BIG_RUN_CAP_MS = 60_000; // one K=5000 run

function version(pkg: string): string {
  return JSON.parse(readFileSync(join(here, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}

interface ChildOutcome {
  ok: boolean;
  timedOut: boolean;
  json: any;
  error?: string;
  seconds: number;
}

/** Runs child.ts; `capMs` is a watchdog re-armed on every RUN_DONE/WARM_DONE line from the child. */
function runChild(id: string, mode: 'main' | 's2big', capMs: number, firstCapMs = capMs): Promise<ChildOutcome> {
  const outFile = join(tmpdir(), `rx-agent-peers-${process.pid}-${id}-${mode}.json`);
  rmSync(outFile, { force: true });
  const t0 = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', join(here, 'child.ts'), id, mode, outFile], {
      cwd: here,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let timedOut = false;
    let stderr = '';
    let timer = setTimeout(onTimeout, firstCapMs);
    function onTimeout() {
      timedOut = true;
      child.kill('SIGKILL');
    }
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      if (/RUN_DONE|WARM_DONE/.test(d)) {
        clearTimeout(timer);
        timer = setTimeout(onTimeout, capMs);
      }
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
      process.stderr.write(d);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      let json: any = undefined;
      if (existsSync(outFile)) {
        json = JSON.parse(readFileSync(outFile, 'utf8'));
        rmSync(outFile, { force: true });
      }
      const seconds = (Date.now() - t0) / 1000;
      const ok = code === 0 && !timedOut;
      const error = ok ? undefined : timedOut ? `timed out after ${seconds.toFixed(0)} s` : lastLines(stderr);
      resolve({ ok, timedOut, json, error, seconds });
    });
  });
}

function lastLines(s: string): string {
  const lines = s.split('\n').filter((l) => l.trim() !== '' && !/^\s*\[[^\]]+\] /.test(l)); // drop progress lines
  const first = lines.findIndex((l) => /Error|CHECK FAILED/.test(l));
  return lines.slice(first >= 0 ? first : 0, (first >= 0 ? first : 0) + 6).join('\n') || 'exited non-zero';
}

// ---------- formatting ----------
const fmt = (x: number | undefined, digits = 0) =>
  x === undefined || Number.isNaN(x) ? '—' : x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

function table(rows: string[][], header: string[]): string {
  const all = [header, ...rows];
  const w = header.map((_, c) => Math.max(...all.map((r) => r[c]!.length)));
  const line = (r: string[]) => r.map((cell, c) => (c === 0 ? cell.padEnd(w[c]!) : cell.padStart(w[c]!))).join('  ');
  return [line(header), w.map((n) => '-'.repeat(n)).join('  '), ...rows.map(line)].join('\n');
}

async function main() {
  const started = Date.now();
  const machine = {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    loadAverageAtStart: loadavg().map((x) => Number(x.toFixed(2))),
  };
  console.error(`bench:peers — node ${process.version}, ${machine.cores} × ${machine.cpu}, load ${machine.loadAverageAtStart.join(' ')}`);
  console.error(`S1 N=${N}, S2 K=${K} and ${K_BIG}, S3 M=${M}; median of ${RUNS} runs after a warm-up\n`);

  console.error('floor');
  const floor = await runChild('floor', 'main', MAIN_TIMEOUT_MS);
  if (!floor.ok) throw new Error(`floor failed: ${floor.error}`);

  const failures: string[] = [];
  const peers: any[] = [];
  for (const p of PEERS) {
    console.error(p.label);
    const versions = Object.fromEntries(p.packages.map((pkg) => [pkg, version(pkg)]));
    const main = await runChild(p.id, 'main', MAIN_TIMEOUT_MS);
    if (!main.ok) failures.push(`${p.label}: ${main.error}`);
    let s2big: any = undefined;
    let s2bigStatus: 'ok' | 'timeout' | 'failed' | 'skipped' = 'skipped';
    if (main.ok) {
      const big = await runChild(p.id, 's2big', S2BIG_RUN_CAP_MS, MAIN_TIMEOUT_MS);
      s2big = big.json?.s2big;
      if (big.ok) s2bigStatus = 'ok';
      else if (big.timedOut)
        s2bigStatus = s2big ? 'ok' : 'timeout'; // partial: keep the runs that finished
      else {
        s2bigStatus = 'failed';
        failures.push(`${p.label} (K=${K_BIG}): ${big.error}`);
      }
    }
    peers.push({
      id: p.id,
      label: p.label,
      versions,
      ok: main.ok,
      error: main.error,
      seconds: main.seconds,
      floor: main.json?.floor,
      s1: main.json?.s1 && {
        ...main.json.s1,
        ratioToFloor: main.json.s1.cpuNsPerDelta / main.json.floor.cpuNsPerDelta,
      },
      s1Warm: main.json?.s1Warm && {
        ...main.json.s1Warm,
        ratioToFloor: main.json.s1Warm.cpuNsPerDelta / main.json.floorWarm.cpuNsPerDelta,
      },
      s2: main.json?.s2,
      s2Warm: main.json?.s2Warm,
      s2big: s2bigStatus === 'timeout' ? 'timeout' : s2bigStatus === 'ok' ? s2big : s2bigStatus,
      s3: main.json?.s3,
    });
  }

  const f = floor.json.floor;
  const fw = floor.json.floorWarm;
  const header = ['', 'S1 ns/delta cpu, gc', '× floor', 'warm', '× floor', `S2 µs/iter K=${K} cpu, gc`, 'warm', `K=${K_BIG} cpu, gc`, 'S3 KB/suspended run'];
  const dash = '—';
  const rows: string[][] = [['floor (for await over async generator)', fmt(f.cpuNsPerDelta), '1.00', fmt(fw.cpuNsPerDelta), '1.00', dash, dash, dash, dash]];
  for (const p of peers) {
    if (!p.ok) {
      rows.push([p.label, `FAILED: ${String(p.error).split('\n')[0]}`, '', '', '', '', '', '', '']);
      continue;
    }
    const runsNote = typeof p.s2big === 'object' && p.s2big.runs < RUNS ? ` (${p.s2big.runs} run${p.s2big.runs > 1 ? 's' : ''})` : '';
    rows.push([
      p.label,
      fmt(p.s1.cpuNsPerDelta),
      fmt(p.s1.ratioToFloor, 2),
      fmt(p.s1Warm.cpuNsPerDelta),
      fmt(p.s1Warm.ratioToFloor, 2),
      fmt(p.s2.cpuUsPerIteration, 1),
      fmt(p.s2Warm.cpuUsPerIteration, 1),
      typeof p.s2big === 'string' ? p.s2big : `${fmt(p.s2big.cpuUsPerIteration, 1)}${runsNote}`,
      fmt(p.s3.bytesPerSuspendedRun / 1024, 1),
    ]);
  }

  const loadEnd = loadavg().map((x) => Number(x.toFixed(2)));
  console.log(
    `\nnode ${process.version} · ${machine.cores} × ${machine.cpu} · load average ${machine.loadAverageAtStart[0]} at start, ${loadEnd[0]} at end` +
      (Math.max(machine.loadAverageAtStart[0]!, loadEnd[0]!) > machine.cores ? ' (busy machine: wall times are inflated, trust CPU times more)' : ''),
  );
  for (const p of peers)
    console.log(
      `  ${p.label}: ${Object.entries(p.versions)
        .map(([k, v]) => `${k}@${v}`)
        .join(', ')}`,
    );
  console.log('');
  console.log(table(rows, header));
  console.log(
    `\nS1: ${N.toLocaleString('en-US')} text deltas in one model turn, CPU (user+sys) ns per delta; × floor = CPU ratio to the floor measured in the same process and mode.` +
      '\ngc: a forced full GC before each timed run; warm: none. Every row from the same runner, process setup (tsx loader) and warm-up.' +
      `\nS2: µs per tool iteration (one tool turn + tool), CPU and wall; K=${K_BIG} runs capped at ${S2BIG_RUN_CAP_MS / 1000} s each, (n runs) = fewer than ${RUNS} fitted the budget.` +
      `\nS3: heap bytes per run suspended inside a tool, ${M} concurrent runs, after forced GC.`,
  );

  mkdirSync(resultsDir, { recursive: true });
  const out = {
    machine,
    node: process.version,
    date: new Date().toISOString(),
    params: { N, K, K_BIG, M, runs: RUNS, s2bigRunCapMs: S2BIG_RUN_CAP_MS },
    floor: f,
    peers,
    failures,
    loadAverageAtEnd: loadEnd,
    totalSeconds: (Date.now() - started) / 1000,
  };
  // a BENCH_PEERS subset must not overwrite the full results
  const outName = only ? 'peers.subset.json' : 'peers.json';
  writeFileSync(join(resultsDir, outName), JSON.stringify(out, null, 2) + '\n');
  console.log(`\nwrote ${join('bench', 'results', outName)} in ${out.totalSeconds.toFixed(0)} s`);

  if (failures.length) {
    console.error(`\n${failures.length} failure(s):\n${failures.map((x) => `  - ${x}`).join('\n')}`);
    process.exit(1);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
