/**
 * Profiling / heap driver for S3 (not part of `npm run bench`):
 *   node bench/profile/build.mjs s3 && node --expose-gc /tmp/rx-agent-prof/s3.mjs [bare|only=a,b] [snapshot]
 * Prints bytes per suspended run; with `snapshot`, writes a heap snapshot while the runs are
 * suspended in the tool (/tmp/rx-agent-prof/s3.heapsnapshot) for a per-constructor breakdown.
 */
import { setImmediate as tick } from 'node:timers/promises';
import { writeHeapSnapshot } from 'node:v8';
import { z } from 'zod';
import { createAgent, defineTool } from '../../src/index';
import { loadFiveOperators } from '../lib/operators';
import { s3Model } from '../lib/fakeModel';

const M = 2000;
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
const gc = (globalThis as { gc?: () => void }).gc!;
const fullGc = async () => {
  for (let i = 0; i < 4; i++) {
    gc();
    await tick();
  }
};
let holds: Array<(v: string) => void> = [];
const hold = defineTool({ name: 'hold', description: 'w', parameters: z.object({}), execute: () => new Promise<string>((r) => holds.push(r)) });
const agent = createAgent({ model: s3Model('hold'), tools: [hold], middleware });
for (let round = 0; round < 4; round++) {
  let done = 0;
  await fullGc();
  const h0 = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  for (let i = 0; i < M; i++) agent.run('w').subscribe({ complete: () => done++ });
  const t1 = performance.now();
  while (holds.length < M) await tick();
  const t2 = performance.now();
  await fullGc();
  const bytes = (process.memoryUsage().heapUsed - h0) / M;
  if (round === 3 && process.argv.includes('snapshot')) console.log('snapshot', writeHeapSnapshot('/tmp/rx-agent-prof/s3.heapsnapshot'));
  const t3 = performance.now();
  const release = holds;
  holds = [];
  release.forEach((r) => r('ok'));
  while (done < M) await tick();
  const t4 = performance.now();
  console.log(
    `${bare ? 'bare' : only ? only.join(',') : 'five operators'}: ${bytes.toFixed(0)} B/suspended run; subscribe ${(t1 - t0).toFixed(0)} ms, reach tool ${(t2 - t1).toFixed(0)} ms, gc ${(t3 - t2).toFixed(0)} ms, release ${(t4 - t3).toFixed(0)} ms`,
  );
}
