import { checkRecord, recordEvents, UnparsedArguments, type JournalRecord, type Message } from '../../src/index';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore } from '../../src/index';
import { plainMessages, recordText, restoreMessages } from '../../src/journal/records';
import { collectEvents, scriptedModel } from '../../src/testing/index';

describe('checkRecord', () => {
  it('passes a record of this format version', () => {
    const record = { version: 1, kind: 'tool-start', iteration: 0, callId: 'c', name: 't' };
    expect(checkRecord('r', 3, record)).toBe(record);
  });

  it.each([
    [null, "Run 'r', journal entry 3: not a journal record (got null)"],
    ['text', "Run 'r', journal entry 3: not a journal record (got string)"],
    [{ kind: 'start' }, "Run 'r', journal entry 3: the record has no format version"],
    [
      { version: 3, kind: 'start' },
      "Run 'r', journal entry 3: written by journal format version 3; this version of rx-agent reads up to 2 (upgrade it to resume this run)",
    ],
    [{ version: 1, kind: 'nap' }, 'Run \'r\', journal entry 3: unknown record kind "nap"'],
    [{ version: 1, kind: 'event', event: { type: 'run-start' } }, "Run 'r', journal entry 3: an event record without an event and its seq"],
    [{ version: 1, kind: 'deltas', type: 'tool-call', seq: 1, texts: [] }, "Run 'r', journal entry 3: a deltas record without its type, seq and texts"],
    [{ version: 2, kind: 'deltas', type: 'text-delta', seq: 1, text: 'abc' }, "Run 'r', journal entry 3: a deltas record without its type, seq and texts"],
    [
      { version: 2, kind: 'deltas', type: 'text-delta', seq: 1, text: 'abc', lengths: [1, 1] },
      "Run 'r', journal entry 3: a deltas record whose lengths do not add up to its text's",
    ],
    [
      { version: 2, kind: 'deltas', type: 'text-delta', seq: 1, text: 'abc', lengths: [4, -1] },
      "Run 'r', journal entry 3: a deltas record whose lengths do not add up to its text's",
    ],
    // Both shapes: readers go by `texts`, which must then be format 1's.
    [
      { version: 2, kind: 'deltas', type: 'text-delta', seq: 1, text: 'ab', lengths: [1, 1], texts: null },
      "Run 'r', journal entry 3: a deltas record without its type, seq and texts",
    ],
    [
      { version: 2, kind: 'deltas', type: 'text-delta', seq: 1, text: 'ab', lengths: [1, 1], texts: 'x' },
      "Run 'r', journal entry 3: a deltas record without its type, seq and texts",
    ],
    [{ version: 1, kind: 'deltas', type: 'text-delta', seq: 1, texts: ['a', 5] }, "Run 'r', journal entry 3: a deltas record without its type, seq and texts"],
  ])('refuses %j with a JournalFormatError', (value, message) => {
    expect(() => checkRecord('r', 3, value)).toThrow(expect.objectContaining({ name: 'JournalFormatError', message }));
  });
});

describe('recordEvents', () => {
  it('gives back the events a deltas record stands for: its text cut by the lengths, with consecutive seq', () => {
    const record = { version: 2, kind: 'deltas', type: 'text-delta', iteration: 0, seq: 4, text: 'Hé🙂 lo', lengths: [2, 2, 0, 3] } as const;
    expect(checkRecord('r', 1, record)).toBe(record);
    expect(recordEvents('r', record)).toEqual([
      { type: 'text-delta', runId: 'r', iteration: 0, text: 'Hé', seq: 4 },
      { type: 'text-delta', runId: 'r', iteration: 0, text: '🙂', seq: 5 },
      { type: 'text-delta', runId: 'r', iteration: 0, text: '', seq: 6 },
      { type: 'text-delta', runId: 'r', iteration: 0, text: ' lo', seq: 7 },
    ]);
  });

  it('reads a deltas record of format 1, one string per text', () => {
    expect(recordEvents('r', { version: 1, kind: 'deltas', type: 'reasoning-delta', iteration: 2, seq: 7, texts: ['a', 'b'] })).toEqual([
      { type: 'reasoning-delta', runId: 'r', iteration: 2, text: 'a', seq: 7 },
      { type: 'reasoning-delta', runId: 'r', iteration: 2, text: 'b', seq: 8 },
    ]);
  });

  it('gives an event record its event, and nothing for other records', () => {
    const event = { type: 'iteration-start', runId: 'r', iteration: 0, seq: 2 } as const;
    expect(recordEvents('r', { version: 1, kind: 'event', event })).toEqual([event]);
    expect(recordEvents('r', { version: 1, kind: 'tool-start', iteration: 0, callId: 'c', name: 't' })).toEqual([]);
  });
});

describe('plainMessages and restoreMessages', () => {
  it('keeps arguments that were not JSON as their text and gives them back as UnparsedArguments', () => {
    const bad = new UnparsedArguments('{"n": 1', 'Unexpected end of JSON input');
    const messages: Message[] = [
      { role: 'user', content: [{ type: 'text', text: 'go' }] },
      {
        role: 'assistant',
        content: [
          { type: 'tool-call', callId: 'c1', name: 't', args: bad },
          { type: 'tool-call', callId: 'c2', name: 't', args: 'a JSON string' },
        ],
      },
    ];
    const plain = plainMessages(messages);
    expect(plain.unparsed).toEqual({ c1: 'Unexpected end of JSON input' });
    const stored = JSON.parse(JSON.stringify(plain.messages)) as Message[];
    expect(stored[1].content[0]).toEqual({ type: 'tool-call', callId: 'c1', name: 't', args: '{"n": 1' });
    const restored = restoreMessages(stored, plain.unparsed);
    expect(restored).toStrictEqual(messages);
    expect(restored[1].content[1]).toEqual({ type: 'tool-call', callId: 'c2', name: 't', args: 'a JSON string' }); // a string that did parse stays one
    expect(plainMessages([messages[0]]).messages).toEqual([messages[0]]);
    expect(plainMessages([messages[0]]).unparsed).toBeUndefined();
  });
});

describe('recordText', () => {
  it('is the JSON of a record', () => {
    expect(recordText('r1', { version: 1, kind: 'tool-start', iteration: 0, callId: 'c1', name: 'pay' })).toBe(
      '{"version":1,"kind":"tool-start","iteration":0,"callId":"c1","name":"pay"}',
    );
  });

  it('names the run, the record and why when JSON cannot hold it', () => {
    const outcome = { version: 1, kind: 'tool-outcome', iteration: 0, callId: 'c1', name: 'big', result: { n: 10n }, isError: false } as const;
    expect(() => recordText('r1', outcome)).toThrow(
      new TypeError(
        "The journal of run 'r1' cannot hold its tool-outcome record of tool 'big': Do not know how to serialize a BigInt (what a journaled run keeps must be JSON: a BigInt as a string, a cyclic object as plain data)",
      ),
    );
  });

  it('a journaled run whose tool reports and returns what JSON cannot hold goes on: the model reads an error result, the journal the stand-ins', async () => {
    const big = defineTool({
      name: 'big',
      description: 'returns a BigInt',
      parameters: z.object({}),
      execute: (_args, ctx) => {
        ctx.progress({ n: 5n });
        ctx.progress({
          get broken(): never {
            throw new Error('not readable');
          },
        });
        return { n: 10n };
      },
    });
    const inner = memoryStore({ retainMs: 60_000 });
    // A store of one's own that writes the records as JSON itself: it is handed JSON.
    const written: string[] = [];
    const store = Object.assign(Object.create(inner) as typeof inner, {
      append: (runId: string, expected: number, records: readonly JournalRecord[]) => {
        written.push(JSON.stringify(records));
        return inner.append(runId, expected, records);
      },
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'big', args: {} }] }, 'done']);
    const agent = createAgent({ model, tools: [big], store });
    const events = collectEvents(agent.run('go', { runId: 'r-big' }));
    const unsent = 'The tool result could not be sent: Do not know how to serialize a BigInt';
    expect(events.find((e) => e.type === 'tool-result')).toMatchObject({ result: unsent, isError: true });
    expect(events.find((e) => e.type === 'tool-progress')).toMatchObject({ value: { n: 5n } }); // the live consumer gets the value itself
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
    expect(model.requests[1].messages.at(-1)!.content).toEqual([
      { type: 'tool-result', callId: expect.any(String), name: 'big', result: unsent, isError: true },
    ]);
    expect(written.join('')).toContain('The value could not be sent: Do not know how to serialize a BigInt');
    const journal = (await Promise.resolve(inner.read('r-big', 0))) ?? [];
    const progress = journal.find((entry) => entry.record.kind === 'event' && entry.record.event.type === 'tool-progress');
    expect(progress?.record).toMatchObject({ event: { value: { n: 'The value could not be sent: Do not know how to serialize a BigInt' } } });
    expect(journal.find((entry) => entry.record.kind === 'tool-outcome')?.record).toMatchObject({ result: unsent, isError: true });
    // A value whose getter throws is a stand-in too, and no seq is skipped: the run reads back (a gap is a JournalFormatError).
    expect(journal.filter((entry) => entry.record.kind === 'event' && entry.record.event.type === 'tool-progress')[1]?.record).toMatchObject({
      event: { value: 'The value could not be sent: not readable' },
    });
    expect(await agent.runs.get('r-big')).toMatchObject({ status: 'finished', reason: 'completed' });
  });
});
