import { getEventListeners } from 'node:events';
import { NEVER, Subject, lastValueFrom, map, takeUntil, toArray } from 'rxjs';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineState,
  defineTool,
  InMemorySessionStore,
  textMessage,
  textOf,
  type AgentMiddleware,
  type ModelRequest,
  type SessionSnapshot,
  type LegacySessionStore,
} from '../../src/index';
import { openAIChat } from '../../src/openai/index';
import { eventLabel, eventsOfType, scriptedModel } from '../../src/testing/index';
import { mulberry32 } from '../support/random';
import { LegacyMemoryStore } from '../support/legacyStore';

/** A store that answers with Promises, like a Redis or Postgres one would. */
class AsyncStore implements LegacySessionStore {
  readonly inner = new LegacyMemoryStore();
  failSave = false;
  async load(id: string) {
    return this.inner.load(id);
  }
  async save(snapshot: SessionSnapshot) {
    if (this.failSave) throw new Error('store unavailable');
    this.inner.save(snapshot);
  }
}

/** A model that records the texts of every request's messages. */
const recording = (answers: string[]) => {
  const seen: string[][] = [];
  const base = scriptedModel(answers);
  const model = (request: ModelRequest) => (seen.push(request.messages.map(textOf)), base(request));
  return { seen, model };
};

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

  it('the history read from the store before the first run (docs/guide/state-and-sessions.md): a turn saved in between is not lost', async () => {
    const store = new AsyncStore();
    const agent = createAgent({ model: scriptedModel(['Hello Ada.', 'Noted.', 'You are Ada.']) });
    await agent.invoke('I am Ada.', { session: createSession({ id: 'u1', store }) });
    const shown = (await store.load('u1'))?.messages.map(textOf);
    expect(shown).toEqual(['I am Ada.', 'Hello Ada.']);
    const session = createSession({ id: 'u1', store });
    // Another request's object saves a turn after the page read the store.
    await agent.invoke('I like tea.', { session: createSession({ id: 'u1', store }) });
    await agent.invoke('Who am I?', { session });
    expect((await store.load('u1'))?.messages.map(textOf)).toEqual(['I am Ada.', 'Hello Ada.', 'I like tea.', 'Noted.', 'Who am I?', 'You are Ada.']);
  });

  it('a store that fails to save is an error event and run-end error; the session object keeps the turn', async () => {
    const store = new AsyncStore();
    store.failSave = true;
    const session = createSession({ id: 'u2', store });
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']) })
        .run('hi', { session })
        .pipe(toArray()),
    );
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:run', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0]).toMatchObject({ error: { message: 'store unavailable' } });
    expect(session.messages.map(textOf)).toEqual(['hi', 'ok']);
  });

  it('a snapshot in the store that is broken is reported, not loaded', async () => {
    const store = new LegacyMemoryStore();
    store.save({ version: 1, id: 'bad', messages: [{ role: 'robot' }], state: {} } as never);
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']) })
        .run('hi', { session: createSession({ id: 'bad', store }) })
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'run',
      error: { message: expect.stringContaining("Invalid session 'bad' in the store") },
    });
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

describe('what a session keeps', () => {
  const echo = defineTool({ name: 'echo', description: 'Echoes', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });
  const notify = defineTool({ name: 'notify', description: 'A side effect only', parameters: z.object({}), execute: () => undefined });

  it("is plain data in its snapshot: a tool call's arguments that were not JSON are the model's text", async () => {
    const session = createSession();
    const model = scriptedModel([{ text: 'Let me echo.', toolCalls: [{ name: 'echo', args: '{"text": "x"', callId: 'c1' }] }, 'ok']);
    await createAgent({ model, tools: [echo] }).invoke('go', { session });
    const snapshot = session.snapshot();
    expect(snapshot).toEqual(JSON.parse(JSON.stringify(snapshot)));
    expect(snapshot.messages[1].content).toEqual([
      { type: 'text', text: 'Let me echo.' },
      { type: 'tool-call', callId: 'c1', name: 'echo', args: '{"text": "x"' },
    ]);
    // structuredClone (a store that keeps objects) gives the same arguments back.
    const restored = createSession({ snapshot: structuredClone(snapshot) });
    const next = scriptedModel(['again']);
    await createAgent({ model: next, tools: [echo] }).invoke('more', { session: restored });
    expect(next.requests[0].messages[1].content[1]).toEqual({ type: 'tool-call', callId: 'c1', name: 'echo', args: '{"text": "x"' });
  });

  it('unsubscribing from run() mid-turn keeps the input and the finished iterations, as cancel does', () => {
    const session = createSession();
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'never', delay: 1e9 }]);
    const stop = new Subject<void>();
    const seen: string[] = [];
    createAgent({ model, tools: [echo] })
      .run('go', { session })
      .pipe(takeUntil(stop))
      .subscribe((e) => seen.push(e.type));
    expect(seen).toContain('tool-result'); // the second model call is in flight
    stop.next();
    expect(session.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    // released: the next run may use the session
    createAgent({ model: scriptedModel(['again']) })
      .run('next', { session })
      .subscribe();
    expect(session.messages.map(textOf).slice(-2)).toEqual(['next', 'again']);
  });

  it('after unsubscribing, another object for the id may run at once and sees the turn; the first object then sees both', async () => {
    const store = new AsyncStore();
    const session = createSession({ id: 'slow', store });
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'never', delay: 1e9 }]);
    const stop = new Subject<void>();
    const run = createAgent({ model, tools: [echo] })
      .run('go', { session })
      .pipe(takeUntil(stop))
      .subscribe();
    await new Promise((r) => setTimeout(r, 10));
    stop.next();
    expect(run.closed).toBe(true);
    // Another object for the id, at once (waiting for a save still in flight is the HeldStore case below).
    const other = await createAgent({ model: scriptedModel(['ok']) }).invoke('next', { session: createSession({ id: 'slow', store }) });
    expect(other.text).toBe('ok');
    expect(store.inner.load('slow')!.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'user', 'assistant']);
    // This object, after: it reads the store again (the other object saved since).
    const again = await createAgent({ model: scriptedModel(['again']) }).invoke('third', { session });
    expect(again.reason).toBe('completed');
    expect(session.messages.map(textOf).slice(-4)).toEqual(['next', 'ok', 'third', 'again']);
  });

  it('a tool that returns undefined leaves a snapshot that restores, through JSON and through a store', async () => {
    const session = createSession();
    await createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'notify', args: {} }] }, 'done']), tools: [notify] }).invoke('go', { session });
    const again = createSession({ snapshot: JSON.parse(JSON.stringify(session.snapshot())) });
    expect(again.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    const store = new InMemorySessionStore();
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'notify', args: {} }] }, 'done', 'again']), tools: [notify] });
    await agent.invoke('go', { session: createSession({ id: 'u', store }) });
    const events = await lastValueFrom(agent.run('next', { session: createSession({ id: 'u', store }) }).pipe(toArray()));
    expect(events.filter((e) => e.type === 'error')).toEqual([]);
  });

  it('two Session objects for one id and store: an overlapping run that does not wait is refused, and a later run sees the other’s turn', async () => {
    const store = new InMemorySessionStore();
    const agent = createAgent({ model: scriptedModel([{ text: 'A', delay: 20 }, 'B', 'C']) });
    const first = createSession({ id: 'user-42', store });
    const running = lastValueFrom(agent.run('one', { session: first }).pipe(toArray()));
    const refused = await lastValueFrom(agent.run('two', { session: createSession({ id: 'user-42', store }), sessionWaitMs: 0 }).pipe(toArray()));
    expect(eventsOfType(refused, 'error')[0]).toMatchObject({
      error: { name: 'SessionBusyError', message: expect.stringContaining("Session 'user-42' is in use by run") },
    });
    await running;
    await agent.invoke('two', { session: createSession({ id: 'user-42', store }) });
    await agent.invoke('three', { session: first });
    expect(store.load('user-42')!.messages.map(textOf)).toEqual(['one', 'A', 'two', 'B', 'three', 'C']);
  });

  it("run-end's text is this turn's answer: '' when it failed or was cancelled before one", async () => {
    const session = createSession();
    const agent = createAgent({ model: scriptedModel(['Hello Ada.', { error: new Error('boom') }, { text: 'late', delay: 1000 }]) });
    await agent.invoke('I am Ada.', { session });
    const failed = await lastValueFrom(agent.run('Book a flight', { session }).pipe(toArray()));
    expect(failed.at(-1)).toMatchObject({ type: 'run-end', reason: 'error', text: '' });
    const controller = new AbortController();
    const cancelled = agent.invoke('Book it', { session, signal: controller.signal });
    controller.abort();
    expect(await cancelled).toMatchObject({ reason: 'cancelled', text: '' });
  });

  it('arguments the model wrote as broken JSON go back to it unchanged after a JSON round trip of the session', async () => {
    const bodies: Array<{ messages: Array<{ tool_calls?: Array<{ function: { arguments: string } }> }> }> = [];
    const client = {
      chat: {
        completions: {
          create: async (body: (typeof bodies)[number]) => {
            bodies.push(body);
            return (async function* () {
              yield { choices: [{ index: 0, delta: { content: 'ok' }, finish_reason: 'stop' }] };
            })();
          },
        },
      },
    } as never;
    const session = createSession();
    await createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'echo', args: '{"text": "x"' }] }, 'sorry']), tools: [echo] }).invoke('go', { session });
    const restored = createSession({ snapshot: JSON.parse(JSON.stringify(session.snapshot())) });
    await createAgent({ model: openAIChat({ client, model: 'm' }) }).invoke('next', { session });
    await createAgent({ model: openAIChat({ client, model: 'm' }) }).invoke('next', { session: restored });
    const args = bodies.map((b) => b.messages.find((m) => m.tool_calls)!.tool_calls![0].function.arguments);
    expect(args).toEqual(['{"text": "x"', '{"text": "x"']);
  });

  it('bad input is a clear error: a store without save, an id that is not a string, a session that is not one', async () => {
    expect(() => createSession({ id: 'x', store: { load: () => undefined } as never })).toThrow(
      new TypeError(
        "createSession: 'store' must be a session store; missing appendTurn, fork, forks, delete, acquireSession, renewSession, releaseSession, sessionReleases",
      ),
    );
    expect(() => createSession({ id: null as never })).toThrow(new TypeError('createSession: id must be a non-empty string'));
    expect(() => createSession(null as never)).toThrow(new TypeError('createSession: expected an options object'));
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']) })
        .run('hi', { session: { id: 'x' } as never })
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'run',
      error: { name: 'TypeError', message: "run: 'session' must be a Session made with createSession()" },
    });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });
});

describe('a session and its store, across objects and copies', () => {
  it('a turn whose save failed stays with the session object, and its next save carries it', async () => {
    const store = new AsyncStore();
    const { seen, model } = recording(['one', 'two', 'three']);
    const session = createSession({ id: 's', store });
    await createAgent({ model }).invoke('first', { session });
    store.failSave = true;
    await expect(createAgent({ model }).invoke('second', { session })).rejects.toThrow('store unavailable');
    store.failSave = false;
    await createAgent({ model }).invoke('third', { session });
    expect(seen[2]).toEqual(['first', 'one', 'second', 'two', 'third']);
    expect(store.inner.load('s')!.messages.map(textOf)).toEqual(['first', 'one', 'second', 'two', 'third', 'three']);
  });

  it('a session restored from a snapshot keeps it while the store has nothing newer', async () => {
    const store = new LegacyMemoryStore();
    store.save({ version: 1, id: 's', messages: [textMessage('user', 'old')], state: {} });
    const snapshot = { version: 1 as const, id: 's', messages: [textMessage('user', 'new'), textMessage('assistant', 'newer answer')], state: {} };
    const { seen, model } = recording(['ok']);
    const guard: AgentMiddleware = {
      name: 'guard',
      beforeMessageTurn: map((ctx) => {
        if (ctx.messages.some((m) => textOf(m) === 'bad')) throw new Error('rejected');
        return ctx;
      }),
    };
    const session = createSession({ snapshot, store });
    await expect(createAgent({ model, middleware: [guard] }).invoke('bad', { session })).rejects.toThrow('rejected');
    await createAgent({ model, middleware: [guard] }).invoke('hello', { session });
    expect(seen[0]).toEqual(['new', 'newer answer', 'hello']);
  });

  it("a Session from the package's other build (ESM beside CJS) is accepted, and shares the lock", async () => {
    let other: typeof import('../../src/index') | undefined;
    jest.isolateModules(() => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- jest.isolateModules loads the second copy only through require()
      other = require('../../src/index');
    });
    const store = new InMemorySessionStore();
    const theirs = other!.createSession({ id: 'u', store });
    expect((await createAgent({ model: scriptedModel(['hi']) }).invoke('hello', { session: theirs })).reason).toBe('completed');
    const slow = createAgent({ model: scriptedModel([{ text: 'late', delay: 20 }]) });
    const running = slow.invoke('one', { session: createSession({ id: 'u', store }) });
    await expect(
      other!.createAgent({ model: scriptedModel(['x']) }).invoke('two', { session: other!.createSession({ id: 'u', store }), sessionWaitMs: 0 }),
    ).rejects.toThrow("Session 'u' is in use by run");
    await running;
  });
});

describe('a save in flight and other Session objects', () => {
  /** A store whose saves wait until released. */
  class HeldStore implements LegacySessionStore {
    readonly inner = new LegacyMemoryStore();
    readonly held: Array<() => void> = [];
    hold = false;
    async load(id: string) {
      return this.inner.load(id);
    }
    save(snapshot: SessionSnapshot): Promise<void> {
      if (!this.hold) return Promise.resolve(this.inner.save(snapshot));
      return new Promise((resolve) => this.held.push(() => resolve(this.inner.save(snapshot))));
    }
  }

  it("an object that ran before waits for another object's save in flight", async () => {
    const store = new HeldStore();
    const agent = createAgent({ model: scriptedModel(['one', 'three']) });
    const b = createSession({ id: 's', store });
    await agent.invoke('first', { session: b });
    const a = createSession({ id: 's', store });
    store.hold = true;
    const left = createAgent({ model: () => NEVER })
      .run('second', { session: a })
      .subscribe();
    await new Promise((r) => setTimeout(r, 5));
    left.unsubscribe(); // a's save of 'second' is in flight, the session free
    store.hold = false;
    const run = agent.invoke('third', { session: b });
    await new Promise((r) => setTimeout(r, 5));
    store.held.forEach((release) => release());
    await run;
    expect(b.messages.map(textOf)).toEqual(['first', 'one', 'second', 'third', 'three']);
    expect(store.inner.load('s')!.messages.map(textOf)).toEqual(['first', 'one', 'second', 'third', 'three']);
  });

  it('a run left while its final save is in flight frees the session at once; the next run on another object waits for that save', async () => {
    const store = new HeldStore();
    const { seen, model } = recording(['one', 'two']);
    const agent = createAgent({ model });
    store.hold = true;
    const types: string[] = [];
    const left = agent.run('first', { session: createSession({ id: 's', store }) }).subscribe((e) => types.push(e.type));
    await new Promise((r) => setTimeout(r, 5));
    expect(store.held).toHaveLength(1); // answered: the final save is in flight, run-end waits for it
    expect(types).not.toContain('run-end');
    left.unsubscribe();
    store.hold = false;
    const next = agent.invoke('second', { session: createSession({ id: 's', store }) });
    await new Promise((r) => setTimeout(r, 5));
    expect(seen).toHaveLength(1); // the second run waits for the save before it reads the store
    store.held.forEach((release) => release());
    await expect(next).resolves.toMatchObject({ reason: 'completed', text: 'two' });
    expect(seen[1]).toEqual(['first', 'one', 'second']);
    expect(store.inner.load('s')!.messages.map(textOf)).toEqual(['first', 'one', 'second', 'two']);
  });

  it("a run removes its signal's abort listener when it ends, while its final save is still in flight: an abort then changes nothing", async () => {
    const store = new HeldStore();
    const controller = new AbortController();
    const session = createSession({ id: 's', store });
    store.hold = true;
    const types: string[] = [];
    let ended: (value?: unknown) => void = () => undefined;
    const over = new Promise((resolve) => (ended = resolve));
    createAgent({ model: scriptedModel(['one']) })
      .run('first', { session, signal: controller.signal })
      .subscribe({ next: (e) => types.push(eventLabel(e)), complete: () => ended() });
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1); // listening from run-start
    await new Promise((r) => setTimeout(r, 5));
    expect(store.held).toHaveLength(1); // the answer is in, the final save in flight
    expect(types).not.toContain('run-end:completed');
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    controller.abort();
    store.held.forEach((release) => release());
    await over;
    expect(types.filter((t) => t.startsWith('run-end') || t.startsWith('request-expired') || t.startsWith('error'))).toEqual(['run-end:completed']);
    expect(store.inner.load('s')!.messages.map(textOf)).toEqual(['first', 'one']);
  });

  it('two objects on a frozen store may not run one id at once', async () => {
    const inner = new LegacyMemoryStore();
    const store: LegacySessionStore = Object.freeze({ load: (id: string) => inner.load(id), save: (s: SessionSnapshot) => inner.save(s) });
    const agent = createAgent({ model: () => NEVER });
    const first = agent.run('one', { session: createSession({ id: 's', store }) }).subscribe();
    const second = await lastValueFrom(agent.run('two', { session: createSession({ id: 's', store }), sessionWaitMs: 0 }).pipe(toArray()));
    first.unsubscribe();
    expect(eventsOfType(second, 'error')[0]).toMatchObject({ error: { message: expect.stringContaining("Session 's' is in use by run") } });
  });
});

describe('a session-scoped state whose value is undefined', () => {
  const Optional = defineState({ key: 'test.optional', schema: z.string().optional(), initial: () => 'set', scope: 'session' });
  const clear: AgentMiddleware = { name: 'clear', afterMessageTurn: map((ctx) => ctx.updateState(Optional, () => undefined)) };

  it('survives a JSON snapshot and a store that keeps JSON (JSON drops the value key)', async () => {
    const store = new InMemorySessionStore();
    const session = createSession({ id: 'u', store });
    await createAgent({ model: scriptedModel(['ok']), middleware: [clear] }).invoke('hi', { session });
    const restored = createSession({ snapshot: JSON.parse(JSON.stringify(session.snapshot())) });
    const read: unknown[] = [];
    const reader: AgentMiddleware = { name: 'reader', beforeMessageTurn: map((ctx) => (read.push(ctx.state(Optional)), ctx)) };
    await createAgent({ model: scriptedModel(['again']), middleware: [reader] }).invoke('next', { session: restored });
    expect(read).toEqual([undefined]);
    expect((await createAgent({ model: scriptedModel(['again']) }).invoke('next', { session: createSession({ id: 'u', store }) })).text).toBe('again');
  });
});

describe('a session deleted from its store', () => {
  it('is not brought back by an object that read it before: that object starts over when the store has nothing', async () => {
    const store = new AsyncStore();
    const { seen, model } = recording(['one', 'two', 'three']);
    const agent = createAgent({ model });
    const a = createSession({ id: 's', store });
    await agent.invoke('first', { session: a });
    await agent.invoke('second', { session: createSession({ id: 's', store }) }); // another object saves: a reads again next time
    store.inner.delete('s'); // the conversation is deleted (or expired)
    await agent.invoke('third', { session: a });
    expect(seen[2]).toEqual(['third']);
    expect(store.inner.load('s')!.messages.map(textOf)).toEqual(['third', 'three']);
  });
});

describe('loads and saves that race', () => {
  const tick = (ms = 5) => new Promise((resolve) => setTimeout(resolve, ms));

  /** Loads read the store when called but answer only when released (a slow read). */
  class HeldLoadStore implements LegacySessionStore {
    readonly inner = new LegacyMemoryStore();
    holdLoads = false;
    readonly heldLoads: Array<() => void> = [];
    load(id: string): Promise<SessionSnapshot | undefined> {
      const value = this.inner.load(id);
      if (!this.holdLoads) return Promise.resolve(value);
      return new Promise((resolve) => this.heldLoads.push(() => resolve(value)));
    }
    async save(snapshot: SessionSnapshot) {
      this.inner.save(snapshot);
    }
  }

  it("a load left behind by an unsubscribed run changes nothing: another object's later turn is read", async () => {
    const store = new HeldLoadStore();
    const { seen, model } = recording(['one', 'two', 'three']);
    const agent = createAgent({ model });
    await agent.invoke('first', { session: createSession({ id: 's', store }) });
    const b = createSession({ id: 's', store });
    store.holdLoads = true;
    const left = agent.run('abandoned', { session: b }).subscribe();
    await tick();
    left.unsubscribe(); // b's load is still pending; the session is free
    store.holdLoads = false;
    await agent.invoke('second', { session: createSession({ id: 's', store }) });
    store.heldLoads.forEach((release) => release()); // b's stale load answers now
    await tick();
    await agent.invoke('third', { session: b });
    expect(seen[2]).toEqual(['first', 'one', 'second', 'two', 'third']);
    expect(store.inner.load('s')!.messages.map(textOf)).toEqual(['first', 'one', 'second', 'two', 'third', 'three']);
  });

  it("one object's saves land in the order of its turns, a slow save in flight included", async () => {
    const inner = new LegacyMemoryStore();
    let saves = 0;
    const store: LegacySessionStore = {
      load: async (id) => inner.load(id),
      save: (snapshot) => new Promise((resolve) => setTimeout(() => resolve(inner.save(snapshot)), saves++ === 0 ? 50 : 0)),
    };
    const session = createSession({ id: 's', store });
    const left = createAgent({ model: () => NEVER })
      .run('go', { session })
      .subscribe();
    await tick();
    left.unsubscribe(); // the save of 'go' is in flight, slow; the session is free at once
    expect((await createAgent({ model: scriptedModel(['answer']) }).invoke('next', { session })).reason).toBe('completed');
    await tick(100);
    expect(inner.load('s')!.messages.map(textOf)).toEqual(['go', 'next', 'answer']);
  });
});

describe('runs on one id through several objects, left at random moments', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** A store whose loads and saves take a random few ms, keeping JSON as a remote store would. */
  class JitterStore implements LegacySessionStore {
    readonly inner = new LegacyMemoryStore();
    constructor(private readonly next: () => number) {}
    async load(id: string) {
      const stored = this.inner.load(id);
      await sleep(Math.floor(this.next() * 4));
      return stored;
    }
    async save(snapshot: SessionSnapshot) {
      const copy = JSON.parse(JSON.stringify(snapshot)) as SessionSnapshot;
      await sleep(Math.floor(this.next() * 4));
      this.inner.save(copy);
    }
  }

  it.each([1, 2, 3, 4, 5, 6])('every run reads exactly the turns before it, and none is refused (seed %i)', async (seed) => {
    const next = mulberry32(seed);
    const store = new JitterStore(next);
    const objects = [0, 1, 2].map(() => createSession({ id: 's', store }));
    const seen = new Map<string, string[]>();
    const errors: string[] = [];
    for (let k = 0; k < 20; k++) {
      const input = `t${k}`;
      const answer = scriptedModel([{ text: `a${k}`, delay: Math.floor(next() * 4) }]);
      const model = (request: ModelRequest) => (seen.set(input, request.messages.map(textOf)), answer(request));
      const leaveAfter = next() < 0.5 ? Math.floor(next() * 10) : undefined; // during the load, the answer or the save
      await new Promise<void>((done) => {
        const sub = createAgent({ model })
          .run(input, { session: objects[Math.floor(next() * 3)] })
          .subscribe({ next: (e) => e.type === 'error' && errors.push(`${input}: ${e.error.message}`), complete: done });
        if (leaveAfter !== undefined) setTimeout(() => (sub.unsubscribe(), done()), leaveAfter);
      });
    }
    const final = createSession({ id: 's', store });
    await createAgent({ model: (request: ModelRequest) => (seen.set('final', request.messages.map(textOf)), scriptedModel(['end'])(request)) }).invoke(
      'final',
      {
        session: final,
      },
    );
    const history = seen.get('final')!;
    const wrong: string[] = [];
    for (const [input, messages] of seen) {
      const at = history.indexOf(input);
      if (input !== 'final' && JSON.stringify(messages) !== JSON.stringify(history.slice(0, at + 1))) wrong.push(`${input} read ${messages.join(',')}`);
    }
    expect({ wrong, errors }).toEqual({ wrong: [], errors: [] });
    expect(seen.size).toBeGreaterThan(10); // most runs reached the model
  });
});

describe('a snapshot whose state has a key named __proto__', () => {
  it('is restored with that key (zod records leave it out), and a misfit entry is refused naming it', () => {
    const text = '{"version":1,"id":"s","messages":[],"state":{"__proto__":{"version":1,"value":7},"n":{"version":1,"value":1}}}';
    const restored = createSession({ snapshot: JSON.parse(text) });
    expect(Object.keys(restored.snapshot().state).sort()).toEqual(['__proto__', 'n']);
    expect(JSON.stringify(restored.snapshot().state)).toContain('"__proto__":{"version":1,"value":7}');
    const bad = '{"version":1,"id":"s","messages":[],"state":{"__proto__":{"version":0,"value":7}}}';
    expect(() => createSession({ snapshot: JSON.parse(bad) })).toThrow(/^Invalid session snapshot: .*\(state '__proto__'\)$/s);
  });
});
