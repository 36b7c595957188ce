import { lastValueFrom, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore, type AgentEvent, type JournalRecord } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';

/** The journal of run `runId`, its records in order. */
function journalOf(store: ReturnType<typeof memoryStore>, runId: string): JournalRecord[] {
  return (store.read(runId, 0) ?? []).map((entry) => entry.record);
}

describe('RunJournal', () => {
  it("keeps an iteration's text deltas as one record of their joined text and lengths (format 2)", async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const agent = createAgent({ model: scriptedModel([{ text: ['Hé', '🙂', ' lo'] }]), store });
    const live = await lastValueFrom(agent.run('hi', { runId: 'r1' }).pipe(toArray()));

    const deltas = journalOf(store, 'r1').filter((record) => record.kind === 'deltas');
    const first = live.find((event) => event.type === 'text-delta')!;
    expect(deltas).toEqual([{ version: 2, kind: 'deltas', type: 'text-delta', iteration: 0, seq: first.seq, text: 'Hé🙂 lo', lengths: [2, 2, 3] }]);
    // Read back, they are the events the run sent.
    const replayed = await lastValueFrom(agent.events('r1', { after: 0 }).pipe(toArray()));
    expect(replayed).toEqual(live);
  });

  it('writes every other kind as format 1, so a journal with no deltas reads where format 1 is read', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const agent = createAgent({ model: scriptedModel([{ text: ['a', 'b'] }]), store });
    await lastValueFrom(agent.run('hi', { runId: 'r1' }).pipe(toArray()));
    const versions = new Set(journalOf(store, 'r1').map((record) => `${record.kind} ${record.version}`));
    expect([...versions].filter((entry) => !entry.endsWith(' 1'))).toEqual(['deltas 2']);
  });

  it("leaves out a final answer's model-answer record: its checkpoint goes in the same append", async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const appended: string[][] = [];
    const append = store.append.bind(store);
    store.append = (runId, expected, records) => {
      appended.push(records.map((record) => record.kind));
      return append(runId, expected, records);
    };
    const agent = createAgent({ model: scriptedModel([{ text: ['done'] }]), store });
    await lastValueFrom(agent.run('hi', { runId: 'r1' }).pipe(toArray()));

    expect(appended.flat()).not.toContain('model-answer');
    expect(appended.flat()).toContain('checkpoint');
  });

  it('keeps the model-answer of an iteration whose tool runs before its checkpoint is written, and a resume uses it', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const stall = defineTool({
      name: 'stall',
      description: 'Never returns',
      parameters: z.object({}),
      execute: () => new Promise<string>(() => undefined),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'stall', args: {}, callId: 'c1' }] }, { text: ['after'] }]);
    const agent = createAgent({ model, tools: [stall], store });
    const events: AgentEvent[] = [];
    const run = agent.run('hi', { runId: 'r1' }).subscribe((event) => events.push(event));
    await new Promise((resolve) => setImmediate(resolve));
    expect(events.map((event) => event.type)).toContain('tool-call');
    run.unsubscribe(); // the process goes: the call's outcome is unknown

    const kinds = journalOf(store, 'r1').map((record) => record.kind);
    expect(kinds.indexOf('model-answer')).toBeGreaterThan(-1);
    expect(kinds.lastIndexOf('checkpoint')).toBeLessThan(kinds.indexOf('model-answer'));

    const resumed = await lastValueFrom(agent.resume('r1').pipe(toArray()));
    expect(resumed.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'after' });
    expect(model.calls).toBe(2); // the first answer came from the journal, not from the model again
  });
});

describe('RunJournal: what streams reaches the store as it streams', () => {
  /**
   * A journaled run whose model streams six deltas 40 ms apart (then finishes 40 ms later),
   * followed from the start with `events()`: each text with the virtual time it reached the follower.
   */
  function followed(journalFlushMs?: number): Array<[number, string]> {
    const scheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    const seen: Array<[number, string]> = [];
    scheduler.run(() => {
      const store = memoryStore({ scheduler, retainMs: 60_000 });
      const model = scriptedModel([{ text: ['a', 'b', 'c', 'd', 'e', 'f'], delay: 40 }], { scheduler });
      const agent = createAgent({ model, store, scheduler, ...(journalFlushMs === undefined ? {} : { journalFlushMs }) });
      agent.run('hi', { runId: 'r1' }).subscribe();
      agent.events('r1').subscribe((event) => {
        if (event.type === 'text-delta') seen.push([scheduler.now(), event.text]);
      });
    });
    return seen;
  }

  it('writes buffered events at most journalFlushMs (default 100) after the first of them, before the iteration ends', () => {
    // Sent at 40, 80 | 120, 160, 200 | 240; the answer ends at 280 (its checkpoint is written then).
    expect(followed()).toEqual([
      [100, 'a'],
      [100, 'b'],
      [220, 'c'],
      [220, 'd'],
      [220, 'e'],
      [280, 'f'],
    ]);
  });

  it('takes journalFlushMs from the agent; Infinity writes them with the rest of the iteration', () => {
    expect(followed(50).map(([time]) => time)).toEqual([50, 130, 130, 210, 210, 280]);
    expect(followed(Infinity).map(([time]) => time)).toEqual([280, 280, 280, 280, 280, 280]);
  });

  it('refuses a journalFlushMs a timer cannot hold', () => {
    for (const bad of [0, -1, Number.NaN, 2 ** 31, '100']) {
      expect(() => createAgent({ model: scriptedModel([]), journalFlushMs: bad as number })).toThrow(
        `createAgent: 'journalFlushMs' must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got ${typeof bad === 'string' ? '"100"' : bad}`,
      );
    }
  });
});
