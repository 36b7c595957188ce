import { InMemorySessionStore } from '../../src/index';
import { describeSessionStoreConformance } from '../../src/testing/index';

describeSessionStoreConformance('InMemorySessionStore', () => new InMemorySessionStore());

describe('InMemorySessionStore', () => {
  it('checks its options and arguments', () => {
    expect(() => new InMemorySessionStore({ scheduler: {} as never })).toThrow("InMemorySessionStore: 'scheduler' must be an rxjs SchedulerLike");
    const store = new InMemorySessionStore();
    expect(() => store.load('')).toThrow('load: a session id must be a non-empty string, got ""');
    expect(() => store.appendTurn('s', -1, { runId: 'r', messages: [], state: {} })).toThrow(
      'appendTurn: the expected revision must be an integer >= 0, got -1',
    );
    expect(() => store.appendTurn('s', 0, { runId: '', messages: [], state: {} })).toThrow("appendTurn: a turn's 'runId' must be a non-empty string, got \"\"");
    expect(() => store.appendTurn('s', 0, { runId: 'r', messages: 'no' as never, state: {} })).toThrow("appendTurn: a turn's 'messages' must be an array");
    expect(() => store.acquireSession('s', 'o', 0)).toThrow('acquireSession: ttlMs must be a finite number of ms above 0, got 0');
  });

  it('keeps turns as JSON: what is loaded is a copy, not the objects appended', () => {
    const store = new InMemorySessionStore();
    const message = { id: 'm1', role: 'user' as const, content: [{ type: 'text' as const, text: 'hi' }] };
    store.appendTurn('s', 0, { runId: 'r', messages: [message], state: {} });
    const loaded = store.load('s');
    expect(loaded?.messages[0]).toEqual(message);
    expect(loaded?.messages[0]).not.toBe(message);
  });
});
