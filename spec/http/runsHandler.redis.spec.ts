// Two servers in two processes on one Redis: runsHandler in this process and in a child, the run
// started on one, its stream read from the other, its answer posted to either.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import type Redis from 'ioredis';
import { runsHandler } from '../../src/http/runsHandler';
import { redisStore } from '../../src/redis/index';
import { connectRedis, deleteKeys, REDIS_URL, uniquePrefix } from '../support/redis';
import { bookingAgent, label, readFrames, serveRuns } from '../support/runsServer';

const root = join(__dirname, '..', '..');
const outDir = join(root, 'node_modules', '.cache', 'rx-agent-runs-spec'); // bare imports resolve from there

let client: Redis;
let prefix: string;
let bundle: string;

beforeAll(async () => {
  client = await connectRedis();
  prefix = uniquePrefix('runsHandler');
  mkdirSync(outDir, { recursive: true });
  bundle = join(outDir, `server-${process.pid}.mjs`);
  await build({
    entryPoints: [join(__dirname, 'fixtures', 'runsServerProcess.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile: bundle,
    packages: 'external',
    logLevel: 'warning',
  });
}, 60_000);

afterAll(async () => {
  await deleteKeys(client, prefix);
  await client.quit();
  rmSync(bundle, { force: true });
});

/** The other server: resolves with its URL and the lines it prints. */
function otherServer(onRequest: 'wait' | 'suspend'): Promise<{ url: string; lines: string[]; stop(): Promise<void> }> {
  const child: ChildProcess = spawn(process.execPath, [bundle, JSON.stringify({ url: REDIS_URL, prefix, onRequest })], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    child.kill('SIGTERM');
    await exited;
  };
  return new Promise((resolve, reject) => {
    let err = '';
    child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      lines.push(...chunk.split('\n').filter(Boolean));
      const url = lines.find((line) => line.startsWith('LISTENING '))?.slice('LISTENING '.length);
      if (url) resolve({ url, lines, stop });
    });
    void exited.then(() => reject(new Error(`the other server exited:\n${lines.join('\n')}\n${err}`)));
  });
}

const json = (body: unknown) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function startOn(url: string, input: string): Promise<string> {
  const res = await fetch(`${url}/runs`, json({ input }));
  expect(res.status).toBe(201);
  return ((await res.json()) as { runId: string }).runId;
}

describe('runsHandler in two processes sharing a Redis store', () => {
  it.each(['wait', 'suspend'] as const)(
    "onRequest '%s': started here, streamed from the other process, answered there; the stream gets every event once",
    async (onRequest) => {
      const booked: string[] = [];
      const here = await serveRuns(runsHandler(bookingAgent(redisStore({ client, prefix }), { onRequest, booked, delayMs: 10 })));
      const other = await otherServer(onRequest);
      try {
        const runId = await startOn(here.url, 'book a table');
        const abort = new AbortController();
        const stream = await fetch(`${other.url}/runs/${runId}/events`, { signal: abort.signal });
        let answered: Promise<Response> | undefined;
        const frames = await readFrames(stream, (frame) => {
          if (frame.data.type === 'permission-request') {
            answered = fetch(`${other.url}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: frame.data.requestId, approved: true }));
          }
          return false;
        });
        expect((await answered!).status).toBe(200);
        const events = frames.map((frame) => frame.data);
        expect(events.map((event) => event.seq)).toEqual(events.map((_, i) => i + 1));
        expect(frames.map((frame) => Number(frame.id))).toEqual(events.map((event) => event.seq));
        expect(events.map(label).slice(-4)).toEqual(['text:answer: ', 'text:Booked for 2.', 'iteration-end', 'run-end:completed']);
        expect(events.filter((event) => event.type === 'run-end').map((event) => event.type === 'run-end' && event.reason)).toEqual(
          onRequest === 'suspend' ? ['suspended', 'completed'] : ['completed'],
        );
        // A live run took the answer where it runs (here); a suspended one was resumed by the process that took it.
        expect(booked).toEqual(onRequest === 'wait' ? ['table for 2'] : []);
        expect(other.lines.filter((line) => line.startsWith('BOOKED'))).toEqual(onRequest === 'suspend' ? ['BOOKED table for 2'] : []);
        // Both servers replay the same events from the store.
        const replay = (await readFrames(await fetch(`${here.url}/runs/${runId}/events`))).map((frame) => frame.data);
        expect(replay).toEqual(events);
      } finally {
        await other.stop();
        await here.close();
      }
    },
    30_000,
  );
});
