/**
 * What a forced GC costs the next run in compiler work (not part of `npm run bench`): runs a
 * workload in a child process under `node --trace-opt`, warm runs then runs each after a full GC,
 * and prints per run its CPU time and how many functions TurboFan compiled during it, with their
 * compile time (the compiler thread's CPU, which `process.cpuUsage` counts).
 *   node bench/profile/build.mjs recompile && node $TMPDIR/rx-agent-prof/recompile.mjs [s2|loop|s1|pipeline] [K] [runs]
 * `s2` and `loop`: S2 at K iterations through the agent with the five operators, or the
 * hand-written rxjs loop; `s1` and `pipeline`: S1's 100,000 deltas through the agent, or through
 * the rxjs pipeline with five forwarding wrappers.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { fullGc, median } from '../lib/harness';
import { loadFiveOperators } from '../lib/operators';
import { N, s1Agent, s1RxjsPipeline } from '../workloads/s1';
import { rxjsLoopRun, s2Run } from '../workloads/s2';

const [workload = 's2', kArg = '5000', runsArg = '5'] = process.argv.slice(2).filter((a) => a !== '--child');

if (process.argv.includes('--child')) await child();
else await parent();

function workloadRun(): { run: () => Promise<void>; units: number; unit: string } {
  const k = Number(kArg);
  const five = () => loadFiveOperators().map((o) => o.middleware);
  switch (workload) {
    case 's2':
      return { run: s2Run(five(), k), units: k, unit: 'µs/iteration' };
    case 'loop':
      return { run: rxjsLoopRun(k), units: k, unit: 'µs/iteration' };
    case 's1':
      return { run: s1Agent(five(), N), units: N / 1000, unit: 'ns/delta' };
    case 'pipeline':
      return { run: s1RxjsPipeline(N), units: N / 1000, unit: 'ns/delta' };
    default:
      throw new Error(`unknown workload '${workload}': s2, loop, s1 or pipeline`);
  }
}

/** Prints a marker line before each timed run and one with its CPU time after it. */
async function child(): Promise<void> {
  const { run, units } = workloadRun();
  for (let r = 0; r < 15; r++) await run();
  const runs = Number(runsArg);
  for (let r = 0; r < 2 * runs; r++) {
    const mode = r < runs ? 'warm' : 'gc';
    if (mode === 'gc') await fullGc();
    console.log(`=== start ${mode}`);
    const c0 = process.cpuUsage();
    await run();
    const c = process.cpuUsage(c0);
    console.log(`=== cpu ${(c.user + c.system) / units}`);
  }
  console.log('=== end');
}

/** Attributes each `completed compiling` line of the trace to the run it came in. */
async function parent(): Promise<void> {
  const { unit } = workloadRun();
  const self = fileURLToPath(import.meta.url);
  const proc = spawn(process.execPath, ['--expose-gc', '--trace-opt', self, workload, kArg, runsArg, '--child'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  interface Run {
    mode: string;
    cpu: number;
    compiles: number;
    compileMs: number;
  }
  const runs: Run[] = [];
  let current: Run | undefined;
  for await (const line of createInterface({ input: proc.stdout })) {
    if (line.startsWith('=== start ')) runs.push((current = { mode: line.slice(10), cpu: NaN, compiles: 0, compileMs: 0 }));
    else if (line.startsWith('=== cpu ') && current) current.cpu = Number(line.slice(8));
    else if (line === '=== end') current = undefined;
    else if (current && line.startsWith('[completed compiling')) {
      const took = /took ([\d.]+), ([\d.]+), ([\d.]+) ms/.exec(line);
      current.compiles++;
      if (took) current.compileMs += Number(took[1]) + Number(took[2]) + Number(took[3]);
    }
  }
  const code = await new Promise<number | null>((resolve) => proc.on('close', resolve));
  if (code !== 0) throw new Error(`the child process exited with ${code}`);
  for (const r of runs) {
    console.log(
      `${r.mode.padEnd(4)} ${r.cpu.toFixed(1).padStart(7)} ${unit}, ${String(r.compiles).padStart(3)} functions compiled in ${r.compileMs.toFixed(0)} ms`,
    );
  }
  for (const mode of ['warm', 'gc']) {
    const of = runs.filter((r) => r.mode === mode);
    console.log(
      `${workload} ${mode === 'gc' ? 'after a GC' : 'warm'}: median ${median(of.map((r) => r.cpu)).toFixed(1)} ${unit}, ${median(of.map((r) => r.compiles))} functions compiled in ${median(of.map((r) => r.compileMs)).toFixed(0)} ms`,
    );
  }
}
