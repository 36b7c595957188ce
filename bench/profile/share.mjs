// Share of a CPU profile's samples spent in a function, and in everything else that is not idle
// or program startup: node bench/profile/share.mjs <file.cpuprofile> <functionName>
import { readFileSync } from 'node:fs';
const [file, name] = process.argv.slice(2);
const p = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
let fn = 0;
let busy = 0;
for (let i = 0; i < p.samples.length; i++) {
  const n = byId.get(p.samples[i]);
  const f = n.callFrame.functionName;
  if (f === '(idle)' || f === '(program)') continue;
  busy += p.timeDeltas[i];
  if (f === name) fn += p.timeDeltas[i];
}
console.log(`${name}: ${((fn / busy) * 100).toFixed(1)}% of ${(busy / 1000).toFixed(0)} ms busy`);
