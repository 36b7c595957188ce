/**
 * Profiling driver for S1 through the UI encoders (not part of `npm run bench`):
 *   node bench/profile/build.mjs s1ui && node --cpu-prof --cpu-prof-dir=/tmp/prof/s1ui /tmp/rx-agent-prof/s1ui.mjs [runs] [ag-ui|ai-sdk|bare]
 *   node bench/profile/top.mjs /tmp/prof/s1ui/<file>.cpuprofile 40
 * `bare`: the S1 run alone, to subtract. Prints ns per delta (CPU) of each run against the floor.
 */
import { toAgUiFrames } from '../../src/ag-ui/toAgUi';
import { toUIMessageFrames } from '../../src/ai-sdk/toUIMessageStream';
import { createAgent } from '../../src/index';
import { s1Model } from '../lib/fakeModel';
import { loadFiveOperators } from '../lib/operators';
import { N, s1Floor } from '../workloads/s1';
import { cpuPerUnit } from '../lib/harness';

const runs = Number(process.argv[2] ?? 20);
const which = process.argv[3] ?? 'ag-ui';
const agent = createAgent({ model: s1Model(N), middleware: loadFiveOperators().map((o) => o.middleware) });
const frames = which === 'ai-sdk' ? toUIMessageFrames() : which === 'bare' ? undefined : toAgUiFrames();

function once(): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let chars = 0;
    const run = agent.run('Say tok many times');
    const observer = {
      next: (frame: { length: number }) => void (chars += frame.length),
      error: reject,
      complete: () => (chars > 0 ? resolve() : reject(new Error('no output'))),
    };
    if (frames) run.pipe(frames).subscribe(observer);
    else run.subscribe({ ...observer, next: () => void chars++ });
  });
}

const cpu = (fn: () => Promise<void>) => cpuPerUnit(N, fn);
for (let r = 0; r < runs; r++) {
  const floor = await cpu(() => s1Floor(N));
  const rx = await cpu(once);
  console.log(`S1 ${which}: floor ${floor.toFixed(0)} ns/delta, ${rx.toFixed(0)} ns/delta CPU, ${(rx / floor).toFixed(2)}×`);
}
