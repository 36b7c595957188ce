// Self size and count per constructor in a .heapsnapshot, with counts per suspended run (M runs).
//   node bench/profile/heap.mjs /tmp/rx-agent-prof/s3.heapsnapshot [M=2000] [n=40]
import { readFileSync } from 'node:fs';
const [file, mArg, nArg] = process.argv.slice(2);
const M = Number(mArg ?? 2000);
const snap = JSON.parse(readFileSync(file, 'utf8'));
const { node_fields, node_types } = snap.snapshot.meta;
const F = node_fields.length;
const iType = node_fields.indexOf('type'),
  iName = node_fields.indexOf('name'),
  iSize = node_fields.indexOf('self_size');
const types = node_types[0];
const agg = new Map();
for (let i = 0; i < snap.nodes.length; i += F) {
  const type = types[snap.nodes[i + iType]];
  let name = snap.strings[snap.nodes[i + iName]];
  if (type === 'string' || type === 'concatenated string' || type === 'sliced string') name = '(string)';
  else if (type === 'code') name = '(code)';
  else if (type === 'hidden' || type === 'array') name = `(${type}) ${name}`.slice(0, 60);
  else if (type === 'closure') name = `(closure) ${name}`;
  else if (type === 'object') name = name.slice(0, 60);
  else name = `(${type}) ${name}`.slice(0, 60);
  const a = agg.get(name) ?? { count: 0, size: 0 };
  a.count++;
  a.size += snap.nodes[i + iSize];
  agg.set(name, a);
}
const rows = [...agg.entries()].sort((a, b) => b[1].size - a[1].size).slice(0, Number(nArg ?? 40));
console.log('bytes/run  count/run  total MB  constructor');
for (const [name, { count, size }] of rows) {
  console.log(`${(size / M).toFixed(0).padStart(9)}  ${(count / M).toFixed(1).padStart(9)}  ${(size / 2 ** 20).toFixed(1).padStart(8)}  ${name}`);
}
