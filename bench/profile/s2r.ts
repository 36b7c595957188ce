/**
 * Profiling driver for S2r (not part of `npm run bench`): the agent's loop (or the raw SDK's, with
 * `sdk`) on the loopback wire server, K iterations, `runs` times.
 *   node bench/profile/build.mjs s2r && node --cpu-prof --cpu-prof-dir=/tmp/prof/s2r $TMPDIR/rx-agent-prof/s2r.mjs [K] [runs] [sdk]
 */
import OpenAI from 'openai';
import { loadFiveOperators } from '../lib/operators';
import { agentLoop, sdkLoop, startServer } from '../workloads/wire';

const k = Number(process.argv[2] ?? 500);
const runs = Number(process.argv[3] ?? 5);
const sdk = process.argv.includes('sdk');
const { url, child } = await startServer();
try {
  const client = new OpenAI({ baseURL: url, apiKey: 'bench' });
  const run = sdk
    ? sdkLoop(client, k)
    : agentLoop(
        client,
        k,
        loadFiveOperators().map((o) => o.middleware),
      );
  for (let r = 0; r < runs; r++) {
    const c0 = process.cpuUsage();
    await run();
    const c = process.cpuUsage(c0);
    console.log(`S2r K=${k} ${sdk ? 'raw SDK loop' : 'agent'}: ${((c.user + c.system) / k).toFixed(1)} µs/iteration CPU`);
  }
} finally {
  child.kill();
}
