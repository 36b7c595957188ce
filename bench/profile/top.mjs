// Self and inclusive time per function of a .cpuprofile, labelled with the SOURCE file when the
// profiled script is an esbuild bundle (from its `// path/file.ts` section comments).
//   node bench/profile/top.mjs file.cpuprofile [n] [--filter=src/|operators/]
import { readFileSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
const file = process.argv[2];
const n = Number(process.argv.slice(3).find((a) => /^\d+$/.test(a)) ?? 30);
const filter = process.argv.find((a) => a.startsWith('--filter='))?.slice(9);
const prof = JSON.parse(readFileSync(file, 'utf8'));
const sections = new Map(); // bundle url -> [[line, file]]
function sourceOf(url, line) {
  if (!url.endsWith('.mjs') && !url.endsWith('.js')) return url.replace(/^.*\/(node_modules\/|main\/)/, '$1');
  if (!sections.has(url)) {
    const list = [];
    const path = url.startsWith('file:') ? fileURLToPath(url) : url;
    if (existsSync(path))
      readFileSync(path, 'utf8')
        .split('\n')
        .forEach((l, i) => {
          const m = /^\/\/ ((?:src|operators|bench|node_modules)\/\S+)$/.exec(l);
          if (m) list.push([i, m[1]]);
        });
    sections.set(url, list);
  }
  const list = sections.get(url);
  let src = url.replace(/^.*\//, '');
  for (const [l, f] of list) {
    if (l <= line) src = f;
    else break;
  }
  return src.replace(/^node_modules\/rxjs\/dist\/\w+\/internal\//, 'rxjs/');
}
const byId = new Map(prof.nodes.map((x) => [x.id, x]));
const parent = new Map();
for (const x of prof.nodes) for (const c of x.children ?? []) parent.set(c, x.id);
const keyOf = new Map();
for (const x of prof.nodes) {
  const cf = x.callFrame;
  keyOf.set(x.id, `${cf.functionName || '(anon)'} [${sourceOf(cf.url, cf.lineNumber)}:${cf.lineNumber + 1}]`);
}
const self = new Map(),
  incl = new Map();
let total = 0;
prof.samples.forEach((id, i) => {
  const us = prof.timeDeltas[i] ?? 0;
  total += us;
  const k = keyOf.get(id);
  self.set(k, (self.get(k) ?? 0) + us);
  const seen = new Set();
  for (let p = id; p !== undefined; p = parent.get(p)) {
    const kk = keyOf.get(p);
    if (!seen.has(kk)) {
      seen.add(kk);
      incl.set(kk, (incl.get(kk) ?? 0) + us);
    }
  }
});
const show = (title, m) => {
  console.log(`\n${title} (total ${(total / 1000).toFixed(0)} ms)`);
  [...m.entries()]
    .filter(([k]) => !filter || k.includes(filter))
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .forEach(([k, us]) => console.log(`${((us / total) * 100).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(1).padStart(8)} ms  ${k}`));
};
show('SELF', self);
if (process.argv.includes('--incl')) show('INCLUSIVE', incl);
if (process.argv.includes('--files')) {
  const byFile = new Map();
  for (const [k, us] of self) {
    const f = k.replace(/^.*\[/, '').replace(/:\d+\]$/, '');
    byFile.set(f, (byFile.get(f) ?? 0) + us);
  }
  show('SELF by file', byFile);
}
