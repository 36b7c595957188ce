/**
 * Allocation profile of S2 (not part of `npm run bench`): samples every allocation, those already
 * collected included, and prints bytes per iteration by allocating function. With `survivors`,
 * only what outlived a scavenge (promoted, or still alive): the objects that make scavenges slow.
 * With `loop`, the same for the hand-written rxjs loop (bench/lib/rxjsLoop.ts).
 *   node bench/profile/build.mjs alloc && node $TMPDIR/rx-agent-prof/alloc.mjs [K] [runs] [bare|loop] [n] [survivors]
 */
import { readFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { fileURLToPath } from 'node:url';
import { loadFiveOperators } from '../lib/operators';
import { rxjsLoopRun, s2Run } from '../workloads/s2';

const k = Number(process.argv[2] ?? 500);
const runs = Number(process.argv[3] ?? 20);
const bare = process.argv.includes('bare');
const top = Number(process.argv[5] ?? 40);
const survivors = process.argv.includes('survivors');
const middleware = bare ? [] : loadFiveOperators().map((o) => o.middleware);
// `loop`: the hand-written rxjs loop (S2's floor) instead of the agent.
const run = process.argv.includes('loop') ? rxjsLoopRun(k) : s2Run(middleware, k);
for (let r = 0; r < 5; r++) await run(); // warm-up

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}
const session = new Session();
session.connect();
await session.post('HeapProfiler.startSampling', {
  samplingInterval: 256,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: !survivors,
});
for (let r = 0; r < runs; r++) await run();
const { profile } = (await session.post('HeapProfiler.stopSampling')) as { profile: { head: ProfileNode } };
session.disconnect();

// The bundle's `// path/file.ts` section comments name the source file of a line.
const sections: Array<[number, string]> = [];
readFileSync(fileURLToPath(import.meta.url), 'utf8')
  .split('\n')
  .forEach((line, i) => {
    const m = /^\/\/ ((?:src|operators|bench|node_modules)\/\S+)$/.exec(line);
    if (m) sections.push([i, m[1].replace(/^node_modules\/rxjs\/dist\/\w+\/internal\//, 'rxjs/')]);
  });
const sourceOf = (url: string, line: number): string => {
  if (!url.endsWith('alloc.mjs')) return url.replace(/^.*\//, '');
  let file = 'alloc.mjs';
  for (const [at, name] of sections) if (at <= line) file = name;
  return file;
};
const bySite = new Map<string, number>();
const byFile = new Map<string, number>();
let total = 0;
const walk = (node: ProfileNode) => {
  const { functionName, url, lineNumber } = node.callFrame;
  const file = sourceOf(url, lineNumber);
  const key = `${functionName || '(anon)'} ${file}:${lineNumber + 1}`;
  if (node.selfSize) {
    bySite.set(key, (bySite.get(key) ?? 0) + node.selfSize);
    byFile.set(file, (byFile.get(file) ?? 0) + node.selfSize);
  }
  total += node.selfSize;
  node.children.forEach(walk);
};
walk(profile.head);
const iterations = runs * (k + 1);
console.log(
  `${(total / iterations).toFixed(0)} B ${survivors ? 'outlived a scavenge' : 'allocated'} per iteration (K=${k}, ${runs} runs${bare ? ', no operators' : ''})`,
);
for (const [file, bytes] of [...byFile.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
  console.log(`${(bytes / iterations).toFixed(0).padStart(7)}  ${file}`);
}
console.log('by allocating function:');
for (const [key, bytes] of [...bySite.entries()].sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`${(bytes / iterations).toFixed(0).padStart(7)}  ${key}`);
}
