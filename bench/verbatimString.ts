/**
 * `npx tsx bench/verbatimString.ts`: what loading ioredis does to string speed in the process.
 *
 * ioredis 6 defines `class VerbatimString extends String`; on Node 20 that leaves V8's
 * String.prototype slow for the whole process until one instance of the class exists. Each mode
 * runs in a fresh process (user CPU time, median of 3 processes): `none` (no ioredis), `ioredis`
 * (ioredis loaded), `rx-agent/redis` (ioredis loaded through this package's Redis entry, which
 * makes one instance), on a `charCodeAt` loop and on piiRedaction's scan (`findPii`).
 */
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const MODES = ['none', 'ioredis', 'rx-agent/redis'] as const;
const mode = process.argv[2];

async function measure(): Promise<void> {
  const require = createRequire(import.meta.url);
  if (mode === 'ioredis') require('ioredis');
  if (mode === 'rx-agent/redis') await import('../src/redis/index');
  await new Promise((resolve) => setTimeout(resolve, 20));
  const { findPii } = await import('../operators/internal/pii/findPii');
  const text = 'Contact me at john.doe@example.com or call 555-123-4567, card 4111 1111 1111 1111, ip 10.0.0.1. Plain words follow. '.repeat(2000);
  let sink = 0;
  const t0 = process.cpuUsage();
  for (let r = 0; r < 100; r++) for (let i = 0; i < text.length; i++) sink += text.charCodeAt(i);
  const loop = process.cpuUsage(t0).user / 1000;
  const t1 = process.cpuUsage();
  for (let i = 0; i < 40; i++) sink += findPii(text).length;
  const pii = process.cpuUsage(t1).user / 1000;
  if (sink === 0) throw new Error('nothing measured');
  console.log(JSON.stringify({ loop, pii }));
}

function main(): void {
  const self = fileURLToPath(import.meta.url);
  const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log('mode            charCodeAt loop   findPii x40   (ms of CPU, median of 3 processes)');
  for (const m of MODES) {
    const runs = [0, 1, 2].map(() => {
      const child = spawnSync(process.execPath, [...process.execArgv, self, m], { encoding: 'utf8' });
      if (child.status !== 0) throw new Error(`${m}: ${child.stderr}`);
      return JSON.parse(child.stdout.trim().split('\n').at(-1) as string) as { loop: number; pii: number };
    });
    const loop = median(runs.map((r) => r.loop));
    const pii = median(runs.map((r) => r.pii));
    console.log(`${m.padEnd(16)}${loop.toFixed(0).padStart(15)}${pii.toFixed(0).padStart(14)}`);
  }
}

if (mode === undefined) main();
else void measure();
