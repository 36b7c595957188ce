/**
 * The stream redactor alone on three kinds of deltas (not part of `npm run bench`): `words` (the
 * usual path, a safe boundary in every delta), and two whitespace-free kinds longer than its
 * look-behind, `ident` (letters) and `base64` (letters, digits, `+`, `/`), where every delta forces
 * a cut and the detectors read the whole window again. Eight characters per delta.
 *   node bench/profile/build.mjs redactor && node $TMPDIR/rx-agent-prof/redactor.mjs [deltas] [rounds]
 */
import { resolvePiiConfig } from '../../operators/internal/pii/config';
import { createStreamRedactor } from '../../operators/internal/pii/streamRedactor';

const n = Number(process.argv[2] ?? 200_000);
const rounds = Number(process.argv[3] ?? 5);
const config = resolvePiiConfig({});
const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
let seed = 7;
const base64: string[] = [];
for (let i = 0; i < 64; i++) {
  let delta = '';
  for (let j = 0; j < 8; j++) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    delta += BASE64[seed % 64];
  }
  base64.push(delta);
}
const kinds: Record<string, string[]> = {
  words: base64.map((d) => `${d.slice(0, 7).replace(/[+/0-9]/g, 'x')} `),
  ident: base64.map((d) => d.replace(/[+/0-9]/g, 'x')),
  base64,
};
for (const [kind, deltas] of Object.entries(kinds)) {
  const times: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const redactor = createStreamRedactor(config);
    let out = 0;
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) out += redactor.push(deltas[i & 63]).length;
    out += redactor.flush().length;
    times.push(Number(process.hrtime.bigint() - start) / n);
    if (out !== n * 8) throw new Error(`${kind}: ${out} characters out for ${n * 8} in`);
  }
  times.sort((a, b) => a - b);
  console.log(`${kind.padEnd(7)} ${times[0].toFixed(0)} ns per delta (fastest of ${rounds}), median ${times[rounds >> 1].toFixed(0)}`);
}
