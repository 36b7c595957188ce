// A record the journal cannot hold (a state value JSON cannot hold) ends a journaled run for good,
// on each store; a store that fails (an outage) still leaves it interrupted.
import type Redis from 'ioredis';
import type pg from 'pg';
import { lastValueFrom, map, Subject, toArray, type Observable } from 'rxjs';
import { z } from 'zod';
import {
  createAgent,
  defineState,
  defineTool,
  memoryStore,
  type AgentEvent,
  type AgentMiddleware,
  type AgentResponse,
  type AgentStore,
  type JournalRecord,
} from '../../src/index';
import { unencodable } from '../../src/journal/unencodable';
import { permissions } from '../../operators/permissions';
import { redisStore } from '../../src/redis/index';
import { postgresStore, type PostgresStore } from '../../src/postgres/index';
import { scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';
import { connectPool, dropSchema, uniqueSchema } from '../support/postgres';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const KEEP_JSON = '(what a journaled run keeps must be JSON: a BigInt as a string, a cyclic object as plain data)';

type Cyclic = { name: string; self?: Cyclic };
const Total = defineState({ key: 'test.total', schema: z.bigint(), initial: () => 0n, scope: 'run', version: 1 });
const Node = defineState({
  key: 'test.node',
  schema: z.custom<Cyclic>((value) => typeof value === 'object' && value !== null),
  initial: () => ({ name: 'root' }),
  scope: 'run',
  version: 1,
});

/** A middleware that puts, after the first iteration, a value JSON cannot hold in the run's state. */
function unholdable(kind: 'BigInt' | 'cycle'): AgentMiddleware {
  return {
    name: 'unholdable',
    afterIteration: map((ctx) =>
      kind === 'BigInt'
        ? ctx.updateState(Total, (n) => n + 10n)
        : ctx.updateState(Node, () => {
            const node: Cyclic = { name: 'loop' };
            node.self = node;
            return node;
          }),
    ),
  };
}

const echo = defineTool({ name: 'echo', description: 'Echoes', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });

function agentOn(store: AgentStore, middleware: AgentMiddleware[], turns: ScriptedTurn[] = ['done']) {
  const model = scriptedModel(turns);
  return { agent: createAgent({ model, tools: [echo], middleware, store }), model };
}

const expected = {
  BigInt: "The journal of run 'RUN' cannot hold its checkpoint record: state 'test.total' holds a BigInt, which JSON cannot hold " + KEEP_JSON,
  cycle: "The journal of run 'RUN' cannot hold its checkpoint record: state 'test.node' holds a cycle, which JSON cannot hold " + KEEP_JSON,
};

/**
 * The specs on one store: `store()` gives a store on the spec's server (a new one per agent, as
 * two processes would have); `journal(runId)` reads the run's journal back.
 */
function describeOn(name: string, store: () => AgentStore) {
  describe(`on ${name}`, () => {
    it.each(['BigInt', 'cycle'] as const)(
      'a state value holding a %s ends the run for good: error and run-end, the end record, finished, a resume refused',
      async (kind) => {
        const runId = `unholdable-${kind}-${name}`;
        const first = agentOn(store(), [unholdable(kind)]);
        const events = await collect(first.agent.run('go', { runId, sessionId: `s-${runId}` }));
        expect(events.slice(-2)).toEqual([
          expect.objectContaining({ type: 'error', source: 'run', error: { name: 'TypeError', message: expected[kind].replace('RUN', runId) } }),
          expect.objectContaining({ type: 'run-end', reason: 'error' }),
        ]);
        expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
        const journal = (await store().read(runId, 0)) ?? [];
        expect(journal.at(-1)?.record).toEqual({ version: 1, kind: 'end', reason: 'error' });
        // The refused checkpoint is not in the journal: after the model's answer come events and the end only.
        const kinds = journal.map((entry) => entry.record.kind);
        expect(kinds).toContain('model-answer');
        expect(new Set(kinds.slice(kinds.lastIndexOf('model-answer') + 1))).toEqual(new Set(['event', 'end']));
        // Read back, the run is what its consumer saw, and it is over: a resume answers as for any finished run.
        const other = agentOn(store(), [unholdable(kind)]);
        expect(await collect(other.agent.events(runId))).toEqual(events);
        expect(await other.agent.runs.get(runId)).toEqual(expect.objectContaining({ status: 'finished', reason: 'error' }));
        const resumed = await collect(other.agent.resume(runId));
        expect(resumed.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
        expect(resumed[1]).toEqual(expect.objectContaining({ error: expect.objectContaining({ name: 'RunFinishedError' }) }));
        expect(other.model.calls).toBe(0);
      },
    );
  });
}

describe('a record the journal cannot hold', () => {
  describeOn(
    'memoryStore',
    (() => {
      const shared = memoryStore({ retainMs: 60_000 });
      return () => shared;
    })(),
  );

  it("a call's outcome whose state JSON cannot hold ends the run for good before its result is reported", async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const bigAfterCall: AgentMiddleware = { name: 'big', afterFunction: map((ctx) => ctx.updateState(Total, (n) => n + 1n)) };
    const { agent, model } = agentOn(store, [bigAfterCall], [{ toolCalls: [{ name: 'echo', args: { text: 'hi' }, callId: 'c1' }] }, 'never']);
    const events = await collect(agent.run('go', { runId: 'r-outcome' }));
    expect(events.slice(-2)).toEqual([
      expect.objectContaining({
        type: 'error',
        error: {
          name: 'TypeError',
          message: `The journal of run 'r-outcome' cannot hold its tool-outcome record of tool 'echo': state 'test.total' holds a BigInt, which JSON cannot hold ${KEEP_JSON}`,
        },
      }),
      expect.objectContaining({ type: 'run-end', reason: 'error' }),
    ]);
    expect(events.some((e) => e.type === 'tool-result')).toBe(false);
    expect(model.calls).toBe(1);
    const kinds = (store.read('r-outcome') ?? []).map((entry) => entry.record.kind);
    expect(kinds).toContain('tool-start');
    expect(kinds).not.toContain('tool-outcome');
    expect(kinds.at(-1)).toBe('end');
    expect(await agent.runs.get('r-outcome')).toEqual(expect.objectContaining({ status: 'finished', reason: 'error' }));
  });

  it('an answer JSON cannot hold ends the run for good', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const guarded = defineTool({ name: 'pay', description: 'Pays', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const model = scriptedModel([{ toolCalls: [{ name: 'pay', args: {}, callId: 'c1' }] }, 'never']);
    const agent = createAgent({ model, tools: [guarded], middleware: [permissions()], store, onRequest: 'wait' });
    const responses = new Subject<AgentResponse>();
    const events: AgentEvent[] = [];
    agent.run('go', { runId: 'r-answer', responses }).subscribe((e) => {
      events.push(e);
      if (e.type === 'permission-request') responses.next({ type: 'permission-response', requestId: e.requestId, approved: true, note: 10n } as AgentResponse);
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(events.slice(-2)).toEqual([
      expect.objectContaining({
        type: 'error',
        error: {
          name: 'TypeError',
          message: `The journal of run 'r-answer' cannot hold its answer record: field 'response' holds a BigInt, which JSON cannot hold ${KEEP_JSON}`,
        },
      }),
      expect.objectContaining({ type: 'run-end', reason: 'error' }),
    ]);
    expect(events.some((e) => e.type === 'tool-result')).toBe(false);
    expect(await agent.runs.get('r-answer')).toEqual(expect.objectContaining({ status: 'finished', reason: 'error' }));
  });

  describe('a store that fails (an outage) still leaves the run interrupted', () => {
    /** `inner` whose appends throw while `down.now` says so for the records given. */
    function failing(inner: AgentStore, down: (records: readonly JournalRecord[]) => boolean): AgentStore {
      return Object.assign(Object.create(inner) as AgentStore, {
        append: (runId: string, expected: number, records: readonly JournalRecord[]) => {
          if (down(records)) throw new Error('connection reset');
          return inner.append(runId, expected, records);
        },
      });
    }

    it("at an iteration's checkpoint: interrupted, and a resume on a healthy store completes the run", async () => {
      const inner = memoryStore({ retainMs: 60_000 });
      const store = failing(inner, (records) => records.some((r) => r.kind === 'checkpoint' && r.iteration === 1));
      const first = agentOn(store, [], ['done']);
      const events = await collect(first.agent.run('go', { runId: 'r-outage' }));
      expect(events.slice(-2)).toEqual([
        expect.objectContaining({ type: 'error', error: { name: 'Error', message: 'connection reset' } }),
        expect.objectContaining({ type: 'run-end', reason: 'error' }),
      ]);
      expect(inner.read('r-outage')?.some((entry) => entry.record.kind === 'end')).toBe(false);
      expect(await first.agent.runs.get('r-outage')).toEqual(expect.objectContaining({ status: 'interrupted' }));
      const healthy = agentOn(inner, [], ['done']);
      expect((await collect(healthy.agent.resume('r-outage'))).at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed', text: 'done' }));
      expect(await healthy.agent.runs.get('r-outage')).toEqual(expect.objectContaining({ status: 'finished', reason: 'completed' }));
    });

    it('when the end of a run whose state JSON cannot hold meets it: interrupted, and the resume meets the value and ends the run for good', async () => {
      const inner = memoryStore({ retainMs: 60_000 });
      const store = failing(inner, (records) => records.some((r) => r.kind === 'end'));
      const first = agentOn(store, [unholdable('BigInt')]);
      const events = await collect(first.agent.run('go', { runId: 'r-both' }));
      expect(events.slice(-3)).toEqual([
        expect.objectContaining({ type: 'error', error: expect.objectContaining({ name: 'TypeError', message: expected.BigInt.replace('RUN', 'r-both') }) }),
        expect.objectContaining({ type: 'error', error: { name: 'Error', message: 'connection reset' } }),
        expect.objectContaining({ type: 'run-end', reason: 'error' }),
      ]);
      expect(await first.agent.runs.get('r-both')).toEqual(expect.objectContaining({ status: 'interrupted' }));
      const healthy = agentOn(inner, [unholdable('BigInt')]);
      const resumed = await collect(healthy.agent.resume('r-both'));
      expect(resumed.slice(-2)).toEqual([
        expect.objectContaining({ type: 'error', error: expect.objectContaining({ message: expected.BigInt.replace('RUN', 'r-both') }) }),
        expect.objectContaining({ type: 'run-end', reason: 'error' }),
      ]);
      expect(await healthy.agent.runs.get('r-both')).toEqual(expect.objectContaining({ status: 'finished', reason: 'error' }));
    });
  });

  describe('on redisStore and postgresStore', () => {
    let client: Redis;
    let pool: pg.Pool;
    const prefix = uniquePrefix('unencodable');
    const schema = uniqueSchema('unencodable');
    const stores: PostgresStore[] = [];
    beforeAll(async () => {
      client = await connectRedis();
      pool = await connectPool();
      const made = postgresStore({ pool, schema });
      stores.push(made);
      await made.migrate();
    });
    afterAll(async () => {
      await deleteKeys(client, prefix);
      await client.quit();
      for (const made of stores) await made.close();
      await dropSchema(pool, schema);
      await pool.end();
    });
    describeOn('redisStore', () => redisStore({ client, prefix }));
    describeOn('postgresStore', () => {
      const made = postgresStore({ pool, schema });
      stores.push(made);
      return made;
    });
  });
});

describe('unencodable', () => {
  const checkpoint = (run: Record<string, unknown>, session: Record<string, unknown> = {}): JournalRecord => ({
    version: 1,
    kind: 'checkpoint',
    iteration: 1,
    messages: [],
    state: {
      run: Object.fromEntries(Object.entries(run).map(([key, value]) => [key, { version: 1, value }])),
      session: Object.fromEntries(Object.entries(session).map(([key, value]) => [key, { version: 1, value }])),
    },
    usage: { inputTokens: 0, outputTokens: 0 },
    functionCalls: 0,
  });
  const why = (record: JournalRecord) =>
    unencodable('r', record)
      ?.message.replace(/^The journal of run 'r' cannot hold its /, '')
      .replace(` ${KEEP_JSON}`, '');

  it('passes a record JSON holds, without looking at events', () => {
    expect(unencodable('r', checkpoint({ n: 1, deep: { a: [{ b: { c: { d: { e: { f: { g: { h: 1 } } } } } } }] } }))).toBeUndefined();
    expect(unencodable('r', { version: 1, kind: 'event', event: { type: 'run-start', runId: 'r', seq: 1 } })).toBeUndefined();
  });

  it('names the state key, the message part or the field, and what it holds', () => {
    const cycle: Record<string, unknown> = {};
    cycle.self = { back: cycle };
    expect(why(checkpoint({ n: 1, total: { amount: [1, 2n] } }))).toBe("checkpoint record: state 'total' holds a BigInt, which JSON cannot hold");
    expect(why(checkpoint({}, { tree: cycle }))).toBe("checkpoint record: state 'tree' holds a cycle, which JSON cannot hold");
    const throwing = {
      toJSON() {
        throw new Error('boom');
      },
    };
    expect(why(checkpoint({ when: throwing }))).toBe("checkpoint record: state 'when' cannot be written as JSON: boom");
    const call = { type: 'tool-call', callId: 'c1', name: 'pay', args: { n: 1n } } as const;
    expect(why({ version: 1, kind: 'model-answer', iteration: 0, message: { role: 'assistant', content: [call] } })).toBe(
      "model-answer record: the call 'c1' of tool 'pay' holds a BigInt, which JSON cannot hold",
    );
    expect(why({ version: 1, kind: 'turn', messages: [], settings: { temperature: 1n } as never, tools: [] })).toBe(
      "turn record: field 'settings' holds a BigInt, which JSON cannot hold",
    );
  });
});
