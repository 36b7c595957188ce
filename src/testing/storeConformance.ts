import { delay, lastValueFrom, map, mergeMap, toArray, type Observable, type Subscription } from 'rxjs';
import { z } from 'zod';
import { createAgent } from '../agent/createAgent';
import type { AgentEvent, AgentResponse } from '../events/types';
import type { AgentStore } from '../journal/store';
import type { JournalEntry, JournalRecord } from '../journal/records';
import type { AgentMiddleware } from '../middleware/types';
import { defineTool } from '../tools/defineTool';
import { scriptedModel } from './scriptedModel';
import type { Message } from '../messages/message';
import type { SessionStore, SessionTurn } from '../session/sessionStore';

/** The test functions of the runner (jest's and vitest's globals have these shapes). */
interface TestGlobals {
  describe(this: void, name: string, body: () => void): void;
  it(this: void, name: string, body: () => Promise<void>, timeout?: number): void;
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
 * leases, sessions (turns appended with a revision, one turn per run, forks sharing a prefix,
 * session leases and their release notifications), that a failed append leaves nothing behind, and
 * that a resume takes the answers and the cancel the store holds however late its notifications
 * arrive. Every store passes it; run it
 * against your own. Each test makes its own store with `makeStore` and uses fresh run ids.
 *
 * @example
 * import { memoryStore } from 'rx-agent';
 * import { describeStoreConformance } from 'rx-agent/testing';
 *
 * describeStoreConformance('memoryStore', () => memoryStore());
 */
export function describeStoreConformance(name: string, makeStore: () => AgentStore | Promise<AgentStore>, options: StoreConformanceOptions = {}): void {
  const { describe, it } = globals();
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

    test('a record comes back as it was written, whatever its format version (a deltas record of format 2)', async (store) => {
      const runId = freshId();
      const deltas: JournalRecord = { version: 2, kind: 'deltas', type: 'text-delta', iteration: 0, seq: 1, text: 'Hé🙂 lo', lengths: [2, 2, 3] };
      await store.append(runId, 0, [start(runId), deltas]);
      const entries = (await store.read(runId, 1)) ?? [];
      equal(
        entries.map((entry) => entry.record),
        [deltas],
        'the deltas record read back',
      );
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

    sessionTests(test);
  });
}

/** The reason of the run-end a run's events end with (undefined: they do not end with one). */
function reasonOf(events: readonly AgentEvent[]): string | undefined {
  const end = events.at(-1);
  return end?.type === 'run-end' ? end.reason : undefined;
}

/**
 * Registers the conformance tests of the {@link SessionStore} contract alone (turns, revisions,
 * one turn per run, forks, session leases): for a store of sessions only, such as
 * `InMemorySessionStore` or one of your own. `describeStoreConformance` includes them.
 *
 * @example
 * describeSessionStoreConformance('InMemorySessionStore', () => new InMemorySessionStore());
 */
export function describeSessionStoreConformance(
  name: string,
  makeStore: () => SessionStore | Promise<SessionStore>,
  options: { teardown?: (store: SessionStore) => void | Promise<void>; timeout?: number } = {},
): void {
  const { describe, it } = globals();
  const timeout = options.timeout ?? 10_000;
  describe(`${name}: SessionStore conformance`, () =>
    sessionTests((title, body) =>
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
      ),
    ));
}

function globals(): TestGlobals {
  const { describe, it } = globalThis as unknown as Partial<TestGlobals>;
  if (typeof describe !== 'function' || typeof it !== 'function') {
    throw new Error('describeStoreConformance: no global describe() and it(); call it from a test file of jest, vitest (globals: true) or mocha');
  }
  return { describe, it };
}

function sessionTests(test: (title: string, body: (store: SessionStore) => Promise<void>) => void): void {
  test('sessions: appendTurn creates at revision 0, load folds the turns (messages appended, state entries set)', async (store) => {
    const id = freshId();
    equal(await store.load(id), undefined, 'an unknown session');
    equal(await store.appendTurn(id, 0, turn('run-a', ['hi', 'hello'], { a: 1, b: 1 })), { revision: 1, appended: true }, 'the first append');
    equal(await store.appendTurn(id, 1, turn('run-b', ['again', 'sure'], { b: 2 })), { revision: 2, appended: true }, 'the second append');
    const loaded = await store.load(id);
    equal(loaded?.revision, 2, 'the revision');
    equal(loaded?.messages.map(textOf), ['hi', 'hello', 'again', 'sure'], 'the messages, in order');
    equal(
      loaded?.messages.map((m) => m.id),
      ['m-hi', 'm-hello', 'm-again', 'm-sure'],
      'message ids kept',
    );
    equal(loaded?.state, { a: { version: 1, value: 1 }, b: { version: 1, value: 2 } }, 'the state: each turn sets its entries over the last');
    equal([loaded?.version, loaded?.id, loaded?.parentId], [1, id, undefined], 'format version, id, no parent');
    equal([await store.revision(id), await store.revision(freshId())], [2, undefined], 'revision(), undefined for an unknown session');
    equal(loaded?.lastRunId, 'run-b', "lastRunId: the last turn's run");
  });

  test('sessions: a message kept without an id gets one when loaded', async (store) => {
    const id = freshId();
    await store.appendTurn(id, 0, { runId: 'run-a', messages: [{ role: 'user', content: [{ type: 'text', text: 'old' }] }], state: {} });
    const loaded = await store.load(id);
    equal(typeof loaded?.messages[0].id === 'string' && loaded.messages[0].id.length > 0, true, 'an id');
  });

  test('sessions: appendTurn with another revision fails with SessionConflictError and writes nothing', async (store) => {
    const id = freshId();
    await store.appendTurn(id, 0, turn('run-a', ['one'], {}));
    await rejects(() => store.appendTurn(id, 0, turn('run-b', ['two'], {})), 'SessionConflictError', 'a stale revision');
    await rejects(() => store.appendTurn(id, 5, turn('run-c', ['three'], {})), 'SessionConflictError', 'a revision past the end');
    await rejects(() => store.appendTurn(freshId(), 1, turn('run-d', ['x'], {})), 'SessionConflictError', 'revision 1 of a session that does not exist');
    equal((await store.load(id))?.messages.map(textOf), ['one'], 'nothing written');
    equal(await store.appendTurn(id, 1, turn('run-b', ['two'], {})), { revision: 2, appended: true }, 'the run can append at the right revision');
  });

  test("sessions: a second append of the same run's turn writes nothing and answers the current revision", async (store) => {
    const id = freshId();
    await store.appendTurn(id, 0, turn('run-a', ['one'], { n: 1 }));
    equal(await store.appendTurn(id, 0, turn('run-a', ['one'], { n: 1 })), { revision: 1, appended: false }, 'the same run again, at the revision it read');
    await store.appendTurn(id, 1, turn('run-b', ['two'], { n: 2 }));
    equal(await store.appendTurn(id, 0, turn('run-a', ['one'], { n: 1 })), { revision: 2, appended: false }, 'also after another turn');
    const loaded = await store.load(id);
    equal([loaded?.revision, loaded?.messages.map(textOf), loaded?.state], [2, ['one', 'two'], { n: { version: 1, value: 2 } }], 'the session, each turn once');
  });

  test('sessions: a replace turn starts the history and the state over', async (store) => {
    const id = freshId();
    await store.appendTurn(id, 0, turn('run-a', ['one', 'two'], { a: 1 }));
    await store.appendTurn(id, 1, { ...turn('run-b', ['summary', 'three'], { b: 1 }), replace: true });
    await store.appendTurn(id, 2, turn('run-c', ['four'], { c: 1 }));
    const loaded = await store.load(id);
    equal(loaded?.messages.map(textOf), ['summary', 'three', 'four'], 'the messages');
    equal(loaded?.state, { b: { version: 1, value: 1 }, c: { version: 1, value: 1 } }, 'the state');
  });

  test('sessions: a turn that cannot be written fails and leaves the session as it was', async (store) => {
    const id = freshId();
    await store.appendTurn(id, 0, turn('run-a', ['one'], {}));
    await rejects(() => store.appendTurn(id, 1, turn('run-b', ['two'], { big: BigInt(1) })), undefined, 'a state JSON cannot hold');
    equal((await store.load(id))?.revision, 1, 'the revision as it was');
    equal(await store.appendTurn(id, 1, turn('run-b', ['two'], {})), { revision: 2, appended: true }, 'the run appends once fixed');
  });

  test('sessions: fork shares the first `at` messages and copies the state as it stood there', async (store) => {
    const parent = freshId();
    await store.appendTurn(parent, 0, turn('run-a', ['q1', 'a1'], { n: 1 }));
    await store.appendTurn(parent, 1, turn('run-b', ['q2', 'a2'], { n: 2 }));
    const child = freshId();
    await store.fork(parent, child, 3);
    const forked = await store.load(child);
    equal(
      [forked?.revision, forked?.parentId, forked?.forkedAt, forked?.messages.map(textOf), forked?.state],
      [0, parent, 3, ['q1', 'a1', 'q2'], { n: { version: 1, value: 1 } }],
      'the fork: revision 0, its parent, the prefix, the state after the last turn within it',
    );
    await store.appendTurn(parent, 2, turn('run-c', ['q3', 'a3'], { n: 3 }));
    equal(await store.appendTurn(child, 0, turn('run-d', ['q2 edited', 'a2 again'], { n: 9 })), { revision: 1, appended: true }, 'the fork takes turns');
    const again = await store.load(child);
    equal(again?.messages.map(textOf), ['q1', 'a1', 'q2', 'q2 edited', 'a2 again'], "the fork's history: the parent's turns since do not reach it");
    equal(again?.state, { n: { version: 1, value: 9 } }, "the fork's state");
    equal((await store.load(parent))?.messages.length, 6, 'the parent goes on');
    const whole = freshId();
    await store.fork(parent, whole, 6);
    equal((await store.load(whole))?.state, { n: { version: 1, value: 3 } }, 'a fork of everything copies the current state');
    const empty = freshId();
    await store.fork(parent, empty, 0);
    equal([(await store.load(empty))?.messages.length, (await store.load(empty))?.state], [0, {}], 'a fork at 0: nothing');
    const grandchild = freshId();
    await store.fork(child, grandchild, 4);
    equal((await store.load(grandchild))?.messages.map(textOf), ['q1', 'a1', 'q2', 'q2 edited'], 'a fork of a fork');
    equal((await store.load(grandchild))?.state, { n: { version: 1, value: 1 } }, "a fork of a fork: the state as it stood there (the fork's start)");
    // Inside the history a fork shares with its parent, the state stood as it did in the parent.
    const early = freshId();
    await store.fork(child, early, 2);
    equal(
      [(await store.load(early))?.messages.map(textOf), (await store.load(early))?.state],
      [['q1', 'a1'], { n: { version: 1, value: 1 } }],
      "a fork of a fork inside the history it shares: the state after the parent's turn within it",
    );
    const first = freshId();
    await store.fork(child, first, 1);
    equal([(await store.load(first))?.messages.map(textOf), (await store.load(first))?.state], [['q1'], {}], 'before any turn of the parent: no state');
    const deep = freshId();
    await store.fork(grandchild, deep, 2);
    equal((await store.load(deep))?.state, { n: { version: 1, value: 1 } }, 'a fork of a fork of a fork, two levels up');
    equal(await store.forks(parent), [child, whole, empty], "the parent's forks, oldest first");
    equal(await store.forks(child), [grandchild, early, first], "the fork's own");
    equal(await store.forks(freshId()), [], 'none for an unknown session');
  });

  test('sessions: fork refuses an unknown parent, a taken id and a bad `at`', async (store) => {
    const parent = freshId();
    await store.appendTurn(parent, 0, turn('run-a', ['q1', 'a1'], {}));
    await rejects(() => store.fork(freshId(), freshId(), 0), 'TypeError', 'an unknown parent');
    await rejects(() => store.fork(parent, parent, 1), 'SessionConflictError', 'a fork id that exists');
    await rejects(() => store.fork(parent, freshId(), 3), 'TypeError', '`at` past the end');
    await rejects(() => store.fork(parent, freshId(), 1.5), 'TypeError', '`at` not an integer');
    equal(await store.forks(parent), [], 'no fork recorded');
  });

  test("sessions: delete refuses a session with forks; a deleted fork leaves its parent's list", async (store) => {
    const parent = freshId();
    await store.appendTurn(parent, 0, turn('run-a', ['q1', 'a1'], {}));
    const child = freshId();
    await store.fork(parent, child, 1);
    await rejects(() => store.delete(parent), 'SessionConflictError', 'a parent with a fork');
    equal((await store.load(parent))?.revision, 1, 'still there');
    await store.delete(child);
    equal([await store.load(child), await store.forks(parent)], [undefined, []], 'the fork is gone, and off the list');
    await store.delete(parent);
    equal(await store.load(parent), undefined, 'then the parent');
    await store.delete(freshId()); // nothing to delete: no error
  });

  test('session leases: one owner at a time; a release is announced to sessionReleases()', async (store) => {
    const id = freshId();
    let heard = 0;
    const subscription = store.sessionReleases(id).subscribe(() => heard++);
    await waitFor(() => heard === 1, 'the first emission (listening)');
    const a = await store.acquireSession(id, 'run-a', 10_000);
    equal([a.acquired, a.lease.owner], [true, 'run-a'], 'a free session is taken');
    const b = await store.acquireSession(id, 'run-b', 10_000);
    equal([b.acquired, b.lease.owner], [false, 'run-a'], "another owner is refused, and told the holder's lease");
    equal(b.lease.expiresAt > Date.now() - 60_000, true, 'the lease says until when');
    equal(await store.renewSession(id, 'run-a', 10_000), true, 'the holder renews');
    equal(await store.renewSession(id, 'run-b', 10_000), false, 'another owner does not');
    await store.releaseSession(id, 'run-b');
    equal((await store.acquireSession(id, 'run-b', 10_000)).acquired, false, 'a release by another owner does nothing');
    await store.releaseSession(id, 'run-a');
    await waitFor(() => heard === 2, 'the release announced');
    subscription.unsubscribe();
    equal((await store.acquireSession(id, 'run-b', 10_000)).acquired, true, 'then free for another owner');
    await store.releaseSession(id, 'run-b');
  });

  test('session leases expire: an expired lease is free, and cannot be renewed', async (store) => {
    const id = freshId();
    await store.acquireSession(id, 'run-a', 50);
    await sleep(120);
    equal(await store.renewSession(id, 'run-a', 50), false, 'an expired lease is not renewed');
    equal((await store.acquireSession(id, 'run-b', 10_000)).acquired, true, 'another owner takes it');
    await store.releaseSession(id, 'run-b');
  });
}

function turn(runId: string, texts: string[], state: Record<string, unknown>): SessionTurn {
  const entries: Record<string, { version: number; value: unknown }> = {};
  for (const [key, value] of Object.entries(state)) entries[key] = { version: 1, value };
  return {
    runId,
    messages: texts.map((text, i) => ({ id: `m-${text}`, role: i % 2 === 0 ? 'user' : 'assistant', content: [{ type: 'text', text }] })),
    state: entries,
  };
}

function textOf(message: Message): string {
  return message.content.map((part) => (part.type === 'text' ? part.text : '')).join('');
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
