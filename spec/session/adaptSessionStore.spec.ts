import { createAgent, createSession, memoryStore, SessionConflictError, textOf } from '../../src/index';
import { adaptSessionStore, isLegacySessionStore } from '../../src/session/adaptSessionStore';
import { scriptedModel } from '../../src/testing/index';
import { LegacyMemoryStore } from '../support/legacyStore';

const turn = (runId: string, text: string) => ({
  runId,
  messages: [{ id: `m-${text}`, role: 'user' as const, content: [{ type: 'text' as const, text }] }],
  state: {},
});

describe('adaptSessionStore', () => {
  it('recognises a store of the earlier contract: save without appendTurn', () => {
    expect(isLegacySessionStore(new LegacyMemoryStore())).toBe(true);
    expect(isLegacySessionStore(memoryStore())).toBe(false);
    expect(isLegacySessionStore({ load: () => undefined })).toBe(false);
  });

  it('appends by load, check, apply, save: revisions, one turn per run, conflicts', async () => {
    const legacy = new LegacyMemoryStore();
    const store = adaptSessionStore(legacy);
    expect(adaptSessionStore(legacy)).toBe(store); // one adapter per store
    expect(await store.appendTurn('s', 0, turn('r1', 'one'))).toEqual({ revision: 1, appended: true });
    expect(await store.appendTurn('s', 1, turn('r2', 'two'))).toEqual({ revision: 2, appended: true });
    expect(await store.appendTurn('s', 0, turn('r1', 'one'))).toEqual({ revision: 2, appended: false });
    await expect(Promise.resolve().then(() => store.appendTurn('s', 1, turn('r3', 'three')))).rejects.toThrow(SessionConflictError);
    expect(await store.load('s')).toMatchObject({ revision: 2, messages: [{ id: 'm-one' }, { id: 'm-two' }] });
    expect(await store.revision('s')).toBe(2);
    // What the user's store holds: the whole snapshot, with the adapter's own fields.
    expect(legacy.load('s')).toMatchObject({ version: 1, id: 's', revision: 2, runs: ['r1', 'r2'] });
  });

  it('forks by copying the prefix, lists them, and refuses to delete a parent with forks', async () => {
    const store = adaptSessionStore(new LegacyMemoryStore());
    await store.appendTurn('p', 0, { ...turn('r1', 'q'), messages: [...turn('r1', 'q').messages, ...turn('r1', 'a').messages] });
    await store.fork('p', 'f', 1);
    expect(await store.load('f')).toMatchObject({ revision: 0, parentId: 'p', forkedAt: 1, messages: [{ id: 'm-q' }] });
    expect(await store.forks('p')).toEqual(['f']);
    await expect(Promise.resolve().then(() => store.delete('p'))).rejects.toThrow("Session 'p' has forks ('f') that read its history: delete them first");
    await store.delete('f');
    expect(await store.forks('p')).toEqual([]);
  });

  it('serves runs as before, with a deprecation warning once per process', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    const legacy = new LegacyMemoryStore();
    const agent = createAgent({ model: scriptedModel(['one', 'two']) });
    await agent.invoke('a', { session: createSession({ id: 's', store: legacy }) });
    await agent.invoke('b', { session: createSession({ id: 's', store: legacy }) });
    expect(legacy.load('s')?.messages.map(textOf)).toEqual(['a', 'one', 'b', 'two']);
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    expect(warnings.filter((name) => name === 'DeprecationWarning').length).toBeLessThanOrEqual(1);
  });
});

describe('an AgentStore of the earlier contract', () => {
  it('keeps its journal; createAgent adapts its sessions', async () => {
    const journal = memoryStore();
    const legacy = new LegacyMemoryStore();
    const store = {
      append: journal.append.bind(journal),
      read: journal.read.bind(journal),
      follow: journal.follow.bind(journal),
      putAnswer: journal.putAnswer.bind(journal),
      answers: journal.answers.bind(journal),
      requestCancel: journal.requestCancel.bind(journal),
      cancellations: journal.cancellations.bind(journal),
      acquireLease: journal.acquireLease.bind(journal),
      renewLease: journal.renewLease.bind(journal),
      releaseLease: journal.releaseLease.bind(journal),
      getLease: journal.getLease.bind(journal),
      load: legacy.load.bind(legacy),
      save: legacy.save.bind(legacy),
    };
    const agent = createAgent({ model: scriptedModel(['one']), store });
    const result = await agent.invoke('hi', { sessionId: 's', runId: 'r1' });
    expect(result.reason).toBe('completed');
    expect(legacy.load('s')?.messages.map(textOf)).toEqual(['hi', 'one']);
  });
});
