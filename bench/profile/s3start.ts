/**
 * Heap driver for S3 through `agent.start()` (not part of `npm run bench`):
 *   node bench/profile/build.mjs s3start && node --expose-gc $TMPDIR/rx-agent-prof/s3start.mjs [run] [snapshot]
 * Prints bytes per run waiting on a permission (`run` compares with `agent.run()`); with
 * `snapshot`, writes $TMPDIR/rx-agent-prof/s3start.heapsnapshot for bench/profile/heap.mjs.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as tick } from 'node:timers/promises';
import { writeHeapSnapshot } from 'node:v8';
import { Subject } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentResponse, type RunHandle } from '../../src/index';
import { loadFiveOperators, loadPermissions } from '../lib/operators';
import { s3Model } from '../lib/fakeModel';

const M = 2000;
const viaRun = process.argv.includes('run');
const gc = (globalThis as { gc?: () => void }).gc!;
const fullGc = async () => {
  for (let i = 0; i < 4; i++) {
    gc();
    await tick();
  }
};
const guarded = defineTool({ name: 'guarded', description: 'w', parameters: z.object({}), needsApproval: true, execute: () => 'ok' });
const middleware = [...loadFiveOperators().map((o) => o.middleware), loadPermissions().middleware];
const agent = createAgent({ model: s3Model('guarded'), tools: [guarded], middleware });
const responses = new Subject<AgentResponse>();
for (let round = 0; round < 4; round++) {
  let done = 0;
  let waiting: Array<{ handle: RunHandle | undefined; requestId: string }> = [];
  await fullGc();
  const h0 = process.memoryUsage().heapUsed;
  for (let i = 0; i < M; i++) {
    if (viaRun) {
      agent.run('w', { responses }).subscribe({
        next: (e) => void (e.type === 'permission-request' && waiting.push({ handle: undefined, requestId: e.requestId })),
        complete: () => done++,
      });
    } else {
      const handle = agent.start('w');
      handle.events$.subscribe({
        next: (e) => void (e.type === 'permission-request' && waiting.push({ handle, requestId: e.requestId })),
        complete: () => done++,
      });
    }
  }
  while (waiting.length < M) await tick();
  await fullGc();
  const bytes = (process.memoryUsage().heapUsed - h0) / M;
  if (round === 3 && process.argv.includes('snapshot')) console.log('snapshot', writeHeapSnapshot(join(tmpdir(), 'rx-agent-prof', 's3start.heapsnapshot')));
  let all = waiting;
  waiting = [];
  for (const { handle, requestId } of all) {
    const response: AgentResponse = { type: 'permission-response', requestId, approved: true };
    if (handle) handle.respond(response);
    else responses.next(response);
  }
  all = []; // a suspended async function may keep a dead local alive
  while (done < M) await tick();
  console.log(`${viaRun ? 'run()' : 'start()'}: ${bytes.toFixed(0)} B/waiting run`);
}
