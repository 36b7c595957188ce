/**
 * Random bytes for this many ids at a time (one `getRandomValues` call fills them). Node's call
 * costs about 14 µs whatever its size up to 64 KiB (the browser's limit): with 64 ids a call that
 * was 220 ns an id, two ids an iteration; with 1,024 it is 14 ns (16 KiB, held for the process).
 */
const IDS_PER_POOL = 1024;
const pool = new Uint8Array(16 * IDS_PER_POOL);
let poolAt = pool.length;
/** The char codes of one id, reused: `String.fromCharCode.apply` makes one flat string of them. */
const codes: number[] = [];
const HEX = '0123456789abcdef';
const hexCodes: number[] = Array.from(HEX, (c) => c.charCodeAt(0));
const DASH = 45;
const UNDERSCORE = 95;

/**
 * `<prefix>_<uuid>` (a random version 4 UUID, lower-case, as `crypto.randomUUID()` writes it) as
 * one flat string. Node's `randomUUID` builds the UUID by concatenation, a tree of about fifteen
 * string pieces, and joining it to the prefix copies it once more: about 650 bytes an id, against
 * one string here (message ids are made twice an iteration; runs and sessions keep theirs).
 *
 * @example
 * uniqueId('run'); // 'run_0b7c5e1e-8f0a-4d2b-9c3e-6a1f2b3c4d5e'
 */
export function uniqueId(prefix: string): string {
  if (poolAt === pool.length) {
    globalThis.crypto.getRandomValues(pool);
    poolAt = 0;
  }
  const n = prefix.length;
  codes.length = n + 37;
  for (let i = 0; i < n; i++) codes[i] = prefix.charCodeAt(i);
  codes[n] = UNDERSCORE;
  let at = n + 1;
  for (let i = 0; i < 16; i++) {
    let byte = pool[poolAt + i];
    if (i === 6)
      byte = (byte & 0x0f) | 0x40; // version 4
    else if (i === 8) byte = (byte & 0x3f) | 0x80; // the RFC 4122 variant
    if (i === 4 || i === 6 || i === 8 || i === 10) codes[at++] = DASH;
    codes[at++] = hexCodes[byte >> 4];
    codes[at++] = hexCodes[byte & 15];
  }
  poolAt += 16;
  return String.fromCharCode.apply(null, codes);
}
