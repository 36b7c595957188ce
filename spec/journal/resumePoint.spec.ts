import { readResumePoint, pendingRequests, eventKey } from '../../src/journal/resumePoint';
import type { JournalEntry, JournalRecord } from '../../src/index';

describe('readResumePoint', () => {
  const start = { version: 1, kind: 'start', runId: 'r', agent: 'a', input: [], onRequest: 'wait' } as const;

  it('refuses a journal whose positions have a gap, or that does not begin with its start', () => {
    expect(() =>
      readResumePoint('r', [
        { position: 1, record: start },
        { position: 3, record: start },
      ]),
    ).toThrow("Run 'r', journal entry 2: entries out of order (got position 3)");
    expect(() => readResumePoint('r', [{ position: 1, record: { version: 1, kind: 'end', reason: 'completed' } }])).toThrow(
      "the first record is 'end', not 'start'",
    );
    expect(() => readResumePoint('r', [])).toThrow('the journal has no start record');
  });

  it('refuses events whose seq has a gap', () => {
    const event = (seq: number) => ({ version: 1, kind: 'event', event: { type: 'iteration-start', runId: 'r', iteration: 0, seq } }) as const;
    expect(() =>
      readResumePoint('r', [
        { position: 1, record: start },
        { position: 2, record: event(1) },
        { position: 3, record: event(3) },
      ]),
    ).toThrow('event seq 3 follows seq 1');
  });
});

describe('a resume point', () => {
  const start: JournalRecord = { version: 1, kind: 'start', runId: 'r', sessionId: 's', agent: 'a', input: [], onRequest: 'suspend' };
  const entries = (records: JournalRecord[]): JournalEntry[] => records.map((record, i) => ({ position: i + 1, record }));
  const event = (seq: number, body: object): JournalRecord => ({ version: 1, kind: 'event', event: { runId: 'r', seq, ...body } as never });

  it('knows the last checkpoint, what the iteration after it did, and the requests still waiting', () => {
    const point = readResumePoint(
      'r',
      entries([
        start,
        event(1, { type: 'run-start', sessionId: 's' }),
        {
          version: 1,
          kind: 'checkpoint',
          iteration: 0,
          messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
          state: { run: {}, session: {} },
          usage: { inputTokens: 0, outputTokens: 0 },
          functionCalls: 0,
        },
        event(2, { type: 'iteration-start', iteration: 0 }),
        { version: 1, kind: 'model-answer', iteration: 0, message: { role: 'assistant', content: [] } },
        { version: 1, kind: 'tool-start', iteration: 0, callId: 'c1', name: 't' },
        {
          version: 1,
          kind: 'tool-outcome',
          iteration: 0,
          callId: 'c1',
          name: 't',
          result: 1,
          isError: false,
          state: { run: { n: { version: 1, value: 1 } }, session: {} },
        },
        { version: 1, kind: 'tool-outcome', iteration: 0, callId: 'c0', name: 't', result: 0, isError: false },
        { version: 1, kind: 'tool-start', iteration: 0, callId: 'c2', name: 't' },
        { version: 1, kind: 'request', requestId: 'q1', type: 'permission-request', deadline: 500 },
        { version: 1, kind: 'request', requestId: 'q2', type: 'permission-request' },
        { version: 1, kind: 'answer', requestId: 'q2', response: { type: 'permission-response', requestId: 'q2', approved: true } },
        { version: 1, kind: 'deltas', type: 'text-delta', iteration: 0, seq: 3, texts: ['a', 'b'] },
        event(5, { type: 'run-end', reason: 'suspended', text: '', usage: { inputTokens: 0, outputTokens: 0 } }),
      ]),
    );
    expect(point).toEqual(expect.objectContaining({ sessionId: 's', onRequest: 'suspend', position: 14, seq: 5, suspended: true, ended: undefined }));
    expect(point.checkpoint?.iteration).toBe(0);
    expect(point.modelAnswer).toEqual({ message: { role: 'assistant', content: [] }, usage: undefined });
    expect([...point.toolStarts]).toEqual(['c1', 'c2']);
    expect([...point.toolOutcomes.keys()]).toEqual(['c1', 'c0']);
    // The state of the last outcome that carries one (an outcome without it left the state as it was).
    expect(point.toolState).toEqual({ run: { n: { version: 1, value: 1 } }, session: {} });
    expect(pendingRequests(point)).toEqual([{ requestId: 'q1', type: 'permission-request', deadline: 500 }]);
    expect([...point.sentSinceCheckpoint]).toEqual(['iteration-start|0']);
    expect(point.partialStream).toBeUndefined(); // the deltas are those of a journaled answer
  });

  it("carries the start record's starting state (undefined for a start record without one, as older journals have)", () => {
    const state = { run: { 'shop.cart': { version: 1, value: { items: 2 } } }, session: { 'ui.prefs': { version: 2, value: { theme: 'dark' } } } };
    expect(readResumePoint('r', entries([{ ...start, state }])).state).toEqual(state);
    expect(readResumePoint('r', entries([start])).state).toBeUndefined();
  });

  it('refuses a start record whose state is not { run, session } of stored values', () => {
    for (const state of [[], { run: {} }, { run: { k: 1 }, session: {} }, { run: [], session: {} }]) {
      expect(() => readResumePoint('r', entries([{ ...start, state } as never]))).toThrow(
        "Run 'r', journal entry 1: a start record whose 'state' is not { run, session } of stored values",
      );
    }
  });

  it('names the events a resumed iteration could send twice', () => {
    expect(eventKey({ type: 'tool-call', runId: 'r', iteration: 0, callId: 'c', name: 't', args: {} })).toBe('tool-call|c');
    expect(eventKey({ type: 'request-expired', runId: 'r', requestId: 'q', reason: 'timeout' })).toBe('request-expired|q');
    expect(eventKey({ type: 'text-delta', runId: 'r', iteration: 0, text: 'x' })).toBeUndefined();
  });
});
