import { lastValueFrom, toArray } from 'rxjs';
import { createAgent, createSession, InMemorySessionStore, textOf, type SessionSnapshot, type SessionStore } from '../../src/index';
import { eventLabel, scriptedModel } from '../../src/testing/index';

/** A store that answers with Promises, like a Redis or Postgres one would. */
class AsyncStore implements SessionStore {
  readonly inner = new InMemorySessionStore();
  failSave = false;
  async load(id: string) {
    return this.inner.load(id);
  }
  async save(snapshot: SessionSnapshot) {
    if (this.failSave) throw new Error('store unavailable');
    this.inner.save(snapshot);
  }
}

describe('sessions with a store', () => {
  it('save each turn and load the history on the first run of a new session object', async () => {
    const store = new AsyncStore();
    const agent = createAgent({ model: scriptedModel(['Hello Ada.', 'You are Ada.']) });
    await agent.invoke('I am Ada.', { session: createSession({ id: 'u1', store }) });
    // Another process: a new session object with the same id reads the saved turn.
    const again = createSession({ id: 'u1', store });
    await agent.invoke('Who am I?', { session: again });
    expect(again.messages.map(textOf)).toEqual(['I am Ada.', 'Hello Ada.', 'Who am I?', 'You are Ada.']);
    expect(store.inner.load('u1')?.messages).toHaveLength(4);
  });

  it('a store that fails to save is an error event and run-end error; the session object keeps the turn', async () => {
    const store = new AsyncStore();
    store.failSave = true;
    const session = createSession({ id: 'u2', store });
    const events = await lastValueFrom(createAgent({ model: scriptedModel(['ok']) }).run('hi', { session }).pipe(toArray()));
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:run', 'run-end:error']);
    expect(events.find((e) => e.type === 'error')).toMatchObject({ error: { message: 'store unavailable' } });
    expect(session.messages.map(textOf)).toEqual(['hi', 'ok']);
  });

  it('a snapshot in the store that is broken is reported, not loaded', async () => {
    const store = new InMemorySessionStore();
    store.save({ version: 1, id: 'bad', messages: [{ role: 'robot' }], state: {} } as never);
    const events = await lastValueFrom(createAgent({ model: scriptedModel(['ok']) }).run('hi', { session: createSession({ id: 'bad', store }) }).pipe(toArray()));
    expect(events.find((e) => e.type === 'error')).toMatchObject({ source: 'run', error: { message: expect.stringContaining('Invalid session snapshot') } });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });
});

describe('a signal aborted before the run starts', () => {
  it('ends the run at once as cancelled, without calling the model', async () => {
    const model = scriptedModel(['never']);
    const controller = new AbortController();
    controller.abort();
    const events = await lastValueFrom(createAgent({ model }).run('hi', { signal: controller.signal }).pipe(toArray()));
    expect(events.map(eventLabel)).toEqual(['run-start', 'run-end:cancelled']);
    expect(model.calls).toBe(0);
  });
});
