// One session shared by two processes on Redis: each runs many turns on it at once; the session's
// lease makes them take turns (a release wakes the waiting process through pub/sub), so no turn is
// lost or kept twice and the revisions go up one at a time.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type Redis from 'ioredis';
import { lastValueFrom, toArray } from 'rxjs';
import { createAgent, SessionDataError, textOf } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';
import { redisStore } from '../../src/redis/index';
import { connectRedis, deleteKeys, REDIS_URL, uniquePrefix } from '../support/redis';
import { bundleWorker, Child } from '../support/children';

const TURNS = 25;

let client: Redis;
let prefix: string;
let bundle: string;
const children: Child[] = [];

beforeAll(async () => {
  client = await connectRedis();
  prefix = uniquePrefix('sessions');
  bundle = await bundleWorker(join(__dirname, 'fixtures', 'sessionWorker.ts'));
}, 60_000);

afterEach(async () => {
  for (const child of children.splice(0)) await child.kill().catch(() => undefined);
});

afterAll(async () => {
  await deleteKeys(client, prefix);
  await client.quit();
  rmSync(bundle, { force: true });
});

const revisions = (child: Child) => child.lines.filter((line) => line.startsWith('REV ')).map((line) => line.split(' '));

it('two processes hammering one session: every turn kept once, in whole turns, revisions strictly increasing', async () => {
  const sessionId = 'shared';
  const [a, b] = ['a', 'b'].map((tag) => {
    const child = new Child(bundle, { url: REDIS_URL, prefix, sessionId, tag, turns: TURNS });
    children.push(child);
    return child;
  });
  await Promise.all([a.done(), b.done()]);
  expect([a.lines.at(-1), b.lines.at(-1)]).toEqual(['DONE', 'DONE']);

  const stored = await redisStore({ client, prefix }).load(sessionId);
  expect(stored?.revision).toBe(2 * TURNS);
  const texts = stored!.messages.map(textOf);
  expect(texts).toHaveLength(4 * TURNS);
  // Whole turns: each input followed by its own answer, never by the other process's input.
  for (let i = 0; i < texts.length; i += 2) expect(texts[i + 1]).toBe(`${texts[i]} done`);
  for (const tag of ['a', 'b']) {
    const inputs = texts.filter((t, i) => i % 2 === 0 && t.startsWith(`${tag}-`));
    expect(inputs).toEqual(Array.from({ length: TURNS }, (_, n) => `${tag}-${n}`)); // none lost, none twice, in order
  }
  expect(new Set(stored!.messages.map((m) => m.id)).size).toBe(4 * TURNS);

  // Each process's appends: all written, at strictly increasing revisions; together 1..2·TURNS once each.
  for (const child of [a, b]) {
    const revs = revisions(child);
    expect(revs.every(([, , how]) => how === 'appended')).toBe(true);
    const numbers = revs.map(([, n]) => Number(n));
    expect(numbers).toEqual([...numbers].sort((x, y) => x - y));
    expect(new Set(numbers).size).toBe(numbers.length);
  }
  const all = [...revisions(a), ...revisions(b)].map(([, n]) => Number(n)).sort((x, y) => x - y);
  expect(all).toEqual(Array.from({ length: 2 * TURNS }, (_, n) => n + 1));
}, 120_000);

it('a process killed between appending its turn and journaling its end: the resume keeps the turn once', async () => {
  const sessionId = 'killed';
  const child = new Child(bundle, { url: REDIS_URL, prefix, sessionId, tag: 'k', turns: 1, leaseMs: 1_000, dieAfterAppend: true });
  children.push(child);
  const { signal } = await child.exited;
  expect(signal).toBe('SIGKILL');
  expect(child.lines).toContain('REV 1 appended');
  const store = redisStore({ client, prefix });
  expect((await store.read('k-run-0'))?.some((entry) => entry.record.kind === 'end')).toBe(false);
  const lease = await store.getLease('k-run-0');
  if (lease) await new Promise((resolve) => setTimeout(resolve, Math.max(0, lease.expiresAt - Date.now()) + 50));

  let calls = 0;
  const model = () => {
    calls++;
    throw new Error('the model is not asked again');
  };
  const events = await lastValueFrom(createAgent({ model, store, leaseMs: 1_000 }).resume('k-run-0').pipe(toArray()));
  expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'k-0 done' });
  expect(calls).toBe(0);
  const stored = await store.load(sessionId);
  expect([stored?.revision, stored?.lastRunId, stored?.messages.map(textOf)]).toEqual([1, 'k-run-0', ['k-0', 'k-0 done']]);
}, 60_000);

it('a stored turn that does not parse is a SessionDataError naming the session, and a journaled run on it ends for good', async () => {
  const store = redisStore({ client, prefix });
  const agent = createAgent({ model: scriptedModel(['one', 'two']), store });
  await lastValueFrom(agent.run('first', { runId: 'bad-1', sessionId: 'bad' }).pipe(toArray()));
  await client.lset(`${prefix}session:{bad}:turns`, 0, '{"runId":"x","mess'); // a corrupted turn
  await expect(store.load('bad')).rejects.toThrow(new SessionDataError('bad', "Session 'bad' in the store: a turn is not JSON"));
  const events = await lastValueFrom(agent.run('second', { runId: 'bad-2', sessionId: 'bad' }).pipe(toArray()));
  expect(events.at(-2)).toMatchObject({ type: 'error', error: { name: 'SessionDataError' } });
  expect(await agent.runs.get('bad-2')).toMatchObject({ status: 'finished', reason: 'error' });
});
