import { delay, lastValueFrom, map, mergeMap, toArray, type Observable, type Subscription } from 'rxjs';
import { z } from 'zod';
import { createAgent } from '../agent/createAgent';
import type { AgentEvent, AgentResponse } from '../events/types';
import type { AgentStore } from '../journal/store';
import type { JournalEntry, JournalRecord } from '../journal/records';
import type { AgentMiddleware } from '../middleware/types';
import { defineTool } from '../tools/defineTool';
import { scriptedModel } from './scriptedModel';

/** The test functions of the runner (jest's and vitest's globals have these shapes). */
interface TestGlobals {
  describe(name: string, body: () => void): void;
  it(name: string, body: () => Promise<void>, timeout?: number): void;
}

/**
 * What {@link describeStoreConformance} takes besides the store factory.
 *
 * @example
 * describeStoreConformance('myStore', () => myStore(client), { teardown: (store) => client.flushdb(), timeout: 20_000 });
 */
export interface StoreConformanceOptions {
  /** Called after each test with its store (close a client, delete keys). */
  teardown?: (store: AgentStore) => void | Promise<void>;
  /** Per-test timeout in ms, for runners that take one (default 10 000). */
  timeout?: number;
}

/**
 * Registers the conformance tests of the {@link AgentStore} contract with the test runner's global
 * `describe` and `it` (jest, vitest with globals, mocha): the journal's atomic appends with an
 * expected position, reads, `follow()` replay then live, answers (first wins), cancel flags,
 * leases, sessions, that a failed append leaves nothing behind, and that a resume takes the answers
 * and the cancel the store holds however late its notifications arrive. Every store passes it; run it
 * against your own. Each test makes its own store with `makeStore` and uses fresh run ids.
 *
 * @example
 * import { memoryStore } from 'rx-agent';
 * import { describeStoreConformance } from 'rx-agent/testing';
 *
 * describeStoreConformance('memoryStore', () => memoryStore());
 */
export function describeStoreConformance(name: string, makeStore: () => AgentStore | Promise<AgentStore>, options: StoreConformanceOptions = {}): void {
  const { describe, it } = globalThis as unknown as Partial<TestGlobals>;
  if (typeof describe !== 'function' || typeof it !== 'function') {
    throw new Error('describeStoreConformance: no global describe() and it(); call it from a test file of jest, vitest (globals: true) or mocha');
  }
  const timeout = options.timeout ?? 10_000;
  const test = (title: string, body: (store: AgentStore) => Promise<void>) =>
    it(
      title,
      async () => {
        const store = await makeStore();
        try {
          await body(store);
        } finally {
          await options.teardown?.(store);
        }
      },
      timeout,
    );

  describe(`${name}: AgentStore conformance`, () => {
    test('append creates a journal at expected 0 and numbers its entries 1, 2, 3… with no gap', async (store) => {
      const runId = freshId();
      equal(await store.read(runId), undefined, 'read() of a run never written');
      equal(await store.append(runId, 0, [start(runId), event(runId, 1)]), 2, 'append() answers the new last position');
      equal(await store.append(runId, 2, [event(runId, 2)]), 3, 'a second append');
      const entries = await store.read(runId);
      equal(
        entries?.map((e) => e.position),
        [1, 2, 3],
        'positions',
      );
      equal(entries?.[0].record, start(runId), 'a record is read back as written');
      equal(
        (await store.read(runId, 2))?.map((e) => e.position),
        [3],
        'read(runId, after) starts after `after`',
      );
      equal(await store.append(runId, 3, []), 3, 'an empty append writes nothing and answers the position');
    });

    test('append refuses a wrong expected position with JournalConflictError and writes nothing', async (store) => {
      const runId = freshId();
      await store.append(runId, 0, [start(runId)]);
      await rejects(() => store.append(runId, 0, [start(runId)]), 'JournalConflictError', 'expected 0 on an existing run');
      await rejects(() => store.append(runId, 5, [event(runId, 1)]), 'JournalConflictError', 'expected past the end');
      await rejects(() => store.append(runId, 2, []), 'JournalConflictError', 'an empty append checks the position too');
      equal((await store.read(runId))?.length, 1, 'nothing written by refused appends');
    });

    test('a record that cannot be written fails the whole append: no part of it is read back', async (store) => {
      const runId = freshId();
      await store.append(runId, 0, [start(runId)]);
      const bad = {
        version: 1,
        kind: 'tool-outcome',
        iteration: 0,
        callId: 'c',
        name: 't',
        result: { n: BigInt(1) },
        isError: false,
      } as unknown as JournalRecord;
      await rejects(() => store.append(runId, 1, [event(runId, 1), bad]), undefined, 'a record JSON cannot hold');
      equal((await store.read(runId))?.length, 1, 'the journal as it was');
      equal(await store.append(runId, 1, [event(runId, 1)]), 2, 'and still writable at the same position');
    });

    test('keeps records exactly: nested data, unicode, numbers', async (store) => {
      const runId = freshId();
      const record: JournalRecord = {
        version: 1,
        kind: 'tool-outcome',
        iteration: 3,
        callId: 'call-ü',
        name: 'tool',
        result: { text: 'naïve 💡 "quoted"\n', list: [1, 2.5, -3, null, true], nested: { a: { b: [] } } },
        isError: false,
      };
      await store.append(runId, 0, [start(runId), record]);
      equal((await store.read(runId))?.[1].record, record, 'the record read back');
    });

    test('follow() replays the entries after `after`, then each append, none twice and none skipped', async (store) => {
      const runId = freshId();
      await store.append(runId, 0, [start(runId), event(runId, 1)]);
      const early = collect(store.follow(runId, 0));
      const fromTwo = collect(store.follow(runId, 1));
      await waitFor(() => early.entries.length === 2, 'the replay of two entries');
      await store.append(runId, 2, [event(runId, 2), event(runId, 3)]);
      await store.append(runId, 4, [event(runId, 4)]);
      await waitFor(() => early.entries.length === 5 && fromTwo.entries.length === 4, 'the live entries');
      const late = collect(store.follow(runId, 0));
      await waitFor(() => late.entries.length === 5, 'a late reader');
      for (const reader of [early, fromTwo, late]) reader.stop();
      equal(
        early.entries.map((e) => e.position),
        [1, 2, 3, 4, 5],
        'a live reader',
      );
      equal(
        fromTwo.entries.map((e) => e.position),
        [2, 3, 4, 5],
        'a reader from position 1',
      );
      equal(late.entries, early.entries, 'a late reader sees what a live one saw');
    });

    test('follow() of a run the store does not hold errors with RunNotFoundError', async (store) => {
      const reader = collect(store.follow(freshId(), 0));
      await waitFor(() => reader.error !== undefined, 'the error');
      equal((reader.error as Error).name, 'RunNotFoundError', 'the error name');
    });

    test('an end record is written and followed like any other', async (store) => {
      const runId = freshId();
      await store.append(runId, 0, [start(runId)]);
      const reader = collect(store.follow(runId, 0));
      await store.append(runId, 1, [event(runId, 1), { version: 1, kind: 'end', reason: 'completed' }]);
      await waitFor(() => reader.entries.length === 3, 'the end record');
      reader.stop();
      equal(reader.entries[2].record.kind, 'end', 'the last record');
    });

    test('putAnswer() keeps the first answer per request id; answers() replays them, then each new one', async (store) => {
      const runId = freshId();
      await store.append(runId, 0, [start(runId)]);
      const yes: AgentResponse = { type: 'permission-response', requestId: 'q1', approved: true };
      equal(await store.putAnswer(runId, yes), true, 'the first answer');
      equal(await store.putAnswer(runId, { ...yes, approved: false }), false, 'a second answer to the same request');
      const seen: AgentResponse[] = [];
      const subscription = store.answers(runId).subscribe((a) => seen.push(a));
      await waitFor(() => seen.length === 1, 'the kept answer');
      await store.putAnswer(runId, { type: 'permission-response', requestId: 'q2', approved: false });
      await waitFor(() => seen.length === 2, 'the new answer');
      subscription.unsubscribe();
      equal(seen, [yes, { type: 'permission-response', requestId: 'q2', approved: false }], 'the answers');
    });

    test('requestCancel() sets a flag that cancellations() reports once, set before or after the subscription', async (store) => {
      const runId = freshId();
      await store.append(runId, 0, [start(runId)]);
      let before = 0;
      let completed = false;
      const subscription = store.cancellations(runId).subscribe({ next: () => before++, complete: () => (completed = true) });
      await store.requestCancel(runId);
      await waitFor(() => before === 1 && completed, 'the cancel heard live');
      await store.requestCancel(runId);
      let after = 0;
      const again = store.cancellations(runId).subscribe(() => after++);
      await waitFor(() => after === 1, 'the cancel heard by a later subscriber');
      subscription.unsubscribe();
      again.unsubscribe();
      equal(before, 1, 'once');
    });

    test('received() (optional) reads the kept answers in order and the cancel flag; without it, answers() and cancellations() replay at once', async (store) => {
      const runId = freshId();
      await store.append(runId, 0, [start(runId)]);
      const q1: AgentResponse = { type: 'permission-response', requestId: 'q1', approved: true };
      const q2: AgentResponse = { type: 'permission-response', requestId: 'q2', approved: false };
      await store.putAnswer(runId, q1);
      await store.putAnswer(runId, q2);
      await store.requestCancel(runId);
      if (store.received) {
        equal(await store.received(runId), { answers: [q1, q2], cancelled: true }, 'received() of a run answered and cancelled');
        equal(await store.received(freshId()), { answers: [], cancelled: false }, 'received() of a run without a journal');
        return;
      }
      // A resume then relies on these replaying what is kept during subscribe().
      const seen: AgentResponse[] = [];
      let cancelled = false;
      store
        .answers(runId)
        .subscribe((a) => seen.push(a))
        .unsubscribe();
      store
        .cancellations(runId)
        .subscribe(() => (cancelled = true))
        .unsubscribe();
      equal([seen, cancelled], [[q1, q2], true], 'what answers() and cancellations() replay at once (a store without received() must)');
    });

    test('a resume takes the answers and the cancel the store holds, even when its notifications arrive late', async (store) => {
      if (!store.received) return; // its notifications replay at once: checked above
      // The same store, with answers() and cancellations() 30 ms late (as over a slow network).
      const late: AgentStore = Object.assign(Object.create(store) as AgentStore, {
        answers: (runId: string) => store.answers(runId).pipe(delay(30)),
        cancellations: (runId: string) => store.cancellations(runId).pipe(delay(30)),
      });
      const ran: string[] = [];
      const pay = defineTool({
        name: 'pay',
        description: 'Pays',
        parameters: z.object({ n: z.number() }),
        execute: ({ n }) => {
          ran.push(`pay ${n}`);
          return `paid ${n}`;
        },
      });
      const approval: AgentMiddleware = {
        name: 'approval',
        beforeFunction: mergeMap((ctx) =>
          ctx
            .request({ type: 'permission-request', callId: ctx.callId, toolName: ctx.toolName, args: ctx.args }, { timeout: 60_000 })
            .pipe(map((answer) => ((answer as { approved?: boolean } | undefined)?.approved ? ctx : ctx.block('denied')))),
        ),
      };
      const agent = (turns: Parameters<typeof scriptedModel>[0]) =>
        createAgent({ model: scriptedModel(turns), tools: [pay], middleware: [approval], store: late, onRequest: 'suspend' });
      const events = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
      const payCall = { toolCalls: [{ name: 'pay', args: { n: 1 }, callId: 'c1' }] };

      const answered = freshId();
      const first = await events(agent([payCall]).run('pay', { runId: answered }));
      equal(reasonOf(first), 'suspended', 'the run suspends on its request');
      const request = first.find((e) => e.type === 'permission-request') as { requestId: string };
      equal(await agent([]).respond(answered, { type: 'permission-response', requestId: request.requestId, approved: true }), true, 'respond()');
      const resumed = await events(agent(['done']).resume(answered));
      equal(reasonOf(resumed), 'completed', 'the resume takes the answer at once');
      equal(ran, ['pay 1'], 'the tool ran once');

      const cancelled = freshId();
      await events(agent([payCall]).run('pay', { runId: cancelled }));
      await store.requestCancel(cancelled);
      const ended = await events(agent([]).resume(cancelled));
      equal(reasonOf(ended), 'cancelled', 'the resume of a cancelled run ends at once');
      equal(
        ended.some((e) => e.type === 'request-expired'),
        true,
        'its request expires',
      );
      equal(ran, ['pay 1'], 'and nothing more ran');
    });

    test('leases: one owner at a time, renewed and released only by their owner', async (store) => {
      const runId = freshId();
      const a = await store.acquireLease(runId, 'a', 10_000);
      equal(a.acquired, true, 'a free lease is taken');
      equal(a.lease.owner, 'a', 'by its owner');
      const b = await store.acquireLease(runId, 'b', 10_000);
      equal([b.acquired, b.lease.owner], [false, 'a'], "another owner is refused, and told the holder's lease");
      equal((await store.acquireLease(runId, 'a', 10_000)).acquired, true, 'the holder takes it again');
      equal(await store.renewLease(runId, 'a', 10_000), true, 'the holder renews');
      equal(await store.renewLease(runId, 'b', 10_000), false, 'another owner does not');
      await store.releaseLease(runId, 'b');
      equal((await store.getLease(runId))?.owner, 'a', 'a release by another owner does nothing');
      await store.releaseLease(runId, 'a');
      equal(await store.getLease(runId), undefined, 'released');
      equal((await store.acquireLease(runId, 'b', 10_000)).acquired, true, 'then free for another owner');
    });

    test('leases expire: an expired lease is free, and cannot be renewed', async (store) => {
      const runId = freshId();
      await store.acquireLease(runId, 'a', 50);
      await sleep(120);
      equal(await store.getLease(runId), undefined, 'no lease after its time');
      equal(await store.renewLease(runId, 'a', 50), false, 'an expired lease is not renewed');
      equal((await store.acquireLease(runId, 'b', 10_000)).acquired, true, 'another owner takes it');
    });

    test('sessions by id: save and load, undefined for an unknown id', async (store) => {
      const id = freshId();
      equal(await store.load(id), undefined, 'an unknown session');
      const snapshot = { version: 1 as const, id, messages: [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'hi' }] }], state: {} };
      await store.save(snapshot);
      equal(await store.load(id), snapshot, 'the saved session');
    });
  });
}

/** The reason of the run-end a run's events end with (undefined: they do not end with one). */
function reasonOf(events: readonly AgentEvent[]): string | undefined {
  const end = events.at(-1);
  return end?.type === 'run-end' ? end.reason : undefined;
}

let counter = 0;
function freshId(): string {
  return `conformance-${Date.now().toString(36)}-${(++counter).toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

function start(runId: string): JournalRecord {
  return { version: 1, kind: 'start', runId, agent: 'agent', input: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], onRequest: 'wait' };
}

function event(runId: string, seq: number): JournalRecord {
  return { version: 1, kind: 'event', event: { type: 'iteration-start', runId, iteration: seq, seq } };
}

function collect(source: { subscribe(observer: { next(e: JournalEntry): void; error(e: unknown): void }): Subscription }) {
  const reader = { entries: [] as JournalEntry[], error: undefined as unknown, stop: () => subscription.unsubscribe() };
  const subscription = source.subscribe({ next: (e) => reader.entries.push(e), error: (e) => (reader.error = e) });
  return reader;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function waitFor(condition: () => boolean, what: string, ms = 2000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`store conformance: timed out waiting for ${what}`);
    await sleep(5);
  }
}

function equal(actual: unknown, expected: unknown, what: string): void {
  const a = canonical(actual);
  const e = canonical(expected);
  if (a !== e) throw new Error(`store conformance: ${what}: expected ${e}, got ${a}`);
}

/** JSON with sorted keys (undefined as a string), so key order does not matter. */
function canonical(value: unknown): string {
  if (value === undefined) return 'undefined';
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))) : v,
  );
}

async function rejects(work: () => unknown, name: string | undefined, what: string): Promise<void> {
  let failed: unknown;
  try {
    await work();
  } catch (error) {
    failed = error ?? new Error('undefined');
  }
  if (failed === undefined) throw new Error(`store conformance: ${what}: expected a failure, got none`);
  if (name !== undefined && (failed as Error).name !== name) {
    throw new Error(`store conformance: ${what}: expected ${name}, got ${(failed as Error).name}: ${(failed as Error).message}`);
  }
}
