// One session shared by two processes on PostgreSQL: each runs many turns on it at once; the
// session's lease makes them take turns (a release wakes the waiting process through NOTIFY), so
// no turn is lost or kept twice and the revisions go up one at a time.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import { textOf } from '../../src/index';
import { postgresStore } from '../../src/postgres/index';
import { bundleWorker, Child } from '../support/children';
import { connectPool, DATABASE_URL, dropSchema, uniqueSchema } from '../support/postgres';

const TURNS = 25;

let pool: pg.Pool;
const schema = uniqueSchema('sessions');
let bundle: string;
const children: Child[] = [];

beforeAll(async () => {
  pool = await connectPool();
  await postgresStore({ pool, schema }).migrate();
  bundle = await bundleWorker(join(__dirname, 'fixtures', 'sessionWorker.ts'));
}, 60_000);

afterEach(async () => {
  for (const child of children.splice(0)) await child.kill().catch(() => undefined);
});

afterAll(async () => {
  await dropSchema(pool, schema);
  await pool.end();
  rmSync(bundle, { force: true });
});

const revisions = (child: Child) => child.lines.filter((line) => line.startsWith('REV ')).map((line) => line.split(' '));

it('two processes hammering one session: every turn kept once, in whole turns, revisions strictly increasing', async () => {
  const sessionId = 'shared';
  const [a, b] = ['a', 'b'].map((tag) => {
    const child = new Child(bundle, { url: DATABASE_URL, schema, sessionId, tag, turns: TURNS });
    children.push(child);
    return child;
  });
  await Promise.all([a.done(), b.done()]);
  expect([a.lines.at(-1), b.lines.at(-1)]).toEqual(['DONE', 'DONE']);

  const store = postgresStore({ pool, schema });
  const stored = await store.load(sessionId);
  await store.close();
  expect(stored?.revision).toBe(2 * TURNS);
  const texts = stored!.messages.map(textOf);
  expect(texts).toHaveLength(4 * TURNS);
  // Whole turns: each input followed by its own answer, never by the other process's input.
  for (let i = 0; i < texts.length; i += 2) expect(texts[i + 1]).toBe(`${texts[i]} done`);
  for (const tag of ['a', 'b']) {
    const inputs = texts.filter((t, i) => i % 2 === 0 && t.startsWith(`${tag}-`));
    expect(inputs).toEqual(Array.from({ length: TURNS }, (_, n) => `${tag}-${n}`)); // none lost, none twice, in order
  }
  // One row per turn, at revisions 1..2·TURNS.
  const { rows } = await pool.query<{ seq: number }>(
    `SELECT t.seq FROM "${schema}".session_turns t JOIN "${schema}".sessions s ON s.key = t.session WHERE s.session_id = $1 ORDER BY t.seq`,
    [sessionId],
  );
  expect(rows.map((row) => row.seq)).toEqual(Array.from({ length: 2 * TURNS }, (_, n) => n + 1));

  for (const child of [a, b]) {
    const revs = revisions(child);
    expect(revs.every(([, , how]) => how === 'appended')).toBe(true);
    const numbers = revs.map(([, n]) => Number(n));
    expect(numbers).toEqual([...numbers].sort((x, y) => x - y));
  }
  const all = [...revisions(a), ...revisions(b)].map(([, n]) => Number(n)).sort((x, y) => x - y);
  expect(all).toEqual(Array.from({ length: 2 * TURNS }, (_, n) => n + 1));
}, 120_000);
