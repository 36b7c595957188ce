import { getEventListeners } from 'node:events';
import { NEVER, Subject, VirtualTimeScheduler, filter, lastValueFrom, map, mergeMap, takeUntil, toArray, type Observable } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineState,
  defineTool,
  InMemorySessionStore,
  memoryStore,
  textMessage,
  textOf,
  type AgentEvent,
  type AgentMiddleware,
  type AgentStore,
  type JournalRecord,
  type ModelRequest,
  type Session,
  type SessionSnapshot,
  type SessionTurn,
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
        "createSession: 'store' must be a session store; missing revision, appendTurn, fork, forks, delete, acquireSession, renewSession, releaseSession, sessionReleases",
      ),
    );
    expect(() => createSession({ id: null as never })).toThrow(new TypeError('createSession: id must be a non-empty string'));
    expect(() => createSession(null as never)).toThrow(new TypeError('createSession: options must be an object, got null'));
    expect(() => createSession('user-42' as never)).toThrow(new TypeError('createSession: options must be an object, got "user-42"'));
    expect(() => createSession({ sessionId: 'x' } as never)).toThrow(
      new TypeError("createSession: unknown option(s) 'sessionId' (known: id, store, snapshot)"),
    );
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

describe('one run at a time per session, across agents sharing a store (virtual time)', () => {
  const labels = (events$: Observable<AgentEvent>) =>
    events$.pipe(
      filter((e) => e.type === 'run-start' || e.type === 'run-end' || e.type === 'error'),
      map((e) => (e.type === 'error' ? `error:${e.error.name}` : eventLabel(e))),
    );
  const values = { s: 'run-start', e: 'run-end:completed', b: 'error:SessionBusyError', x: 'run-end:error' };

  it('a second run waits for the first to end (no polling: the release wakes it), then reads its turn', () => {
    const scheduler = new TestScheduler((a, b) => expect(a).toEqual(b));
    const seen: string[][] = [];
    scheduler.run(({ cold, expectObservable }) => {
      const store = memoryStore({ scheduler });
      const a = createAgent({ model: scriptedModel([{ text: 'A', delay: 20 }], { scheduler }), store, scheduler });
      const answer = scriptedModel([{ text: 'B', delay: 20 }], { scheduler });
      const b = createAgent({ model: (request) => (seen.push(request.messages.map(textOf)), answer(request)), store, scheduler });
      expectObservable(labels(a.run('one', { sessionId: 's' }))).toBe('s 39ms (e|)', values);
      // b starts at 10 and waits; a ends at 40 and frees the session; b's model answers 40 ms later.
      expectObservable(cold('10ms x|').pipe(mergeMap(() => labels(b.run('two', { sessionId: 's' }))))).toBe('10ms s 69ms (e|)', values);
    });
    expect(seen).toEqual([['one', 'A', 'two']]);
  });

  it('a run that waits longer than sessionWaitMs ends with an error naming SessionBusyError; per run it overrides the agent', () => {
    const scheduler = new TestScheduler((a, b) => expect(a).toEqual(b));
    scheduler.run(({ cold, expectObservable }) => {
      const store = memoryStore({ scheduler });
      const agent = createAgent({ model: scriptedModel([{ text: 'long', delay: 200 }, 'never'], { scheduler }), store, scheduler, sessionWaitMs: 100 });
      expectObservable(labels(agent.run('one', { sessionId: 's' }))).toBe('s 399ms (e|)', values);
      expectObservable(cold('10ms x|').pipe(mergeMap(() => labels(agent.run('two', { sessionId: 's' }))))).toBe('10ms s 99ms (bx|)', values);
      expectObservable(cold('20ms x|').pipe(mergeMap(() => labels(agent.run('three', { sessionId: 's', sessionWaitMs: 30 }))))).toBe(
        '20ms s 29ms (bx|)',
        values,
      );
    });
  });

  it("a lease left by a process that died is waited for until it expires (the waiter wakes at the lease's end)", () => {
    const scheduler = new TestScheduler((a, b) => expect(a).toEqual(b));
    scheduler.run(({ expectObservable }) => {
      const store = memoryStore({ scheduler });
      store.acquireSession('s', 'run-of-a-dead-process', 50);
      const agent = createAgent({ model: scriptedModel([{ text: 'A', delay: 20 }], { scheduler }), store, scheduler });
      expectObservable(labels(agent.run('one', { sessionId: 's' }))).toBe('s 89ms (e|)', values);
    });
  });

  it('a session without a store waits the same way, in its object', () => {
    const scheduler = new TestScheduler((a, b) => expect(a).toEqual(b));
    scheduler.run(({ cold, expectObservable }) => {
      const session = createSession({ id: 'mine' });
      const agent = createAgent({
        model: scriptedModel(
          [
            { text: 'A', delay: 20 },
            { text: 'B', delay: 20 },
          ],
          { scheduler },
        ),
        scheduler,
        sessionWaitMs: 50,
      });
      expectObservable(labels(agent.run('one', { session }))).toBe('s 39ms (e|)', values);
      expectObservable(cold('10ms x|').pipe(mergeMap(() => labels(agent.run('two', { session }))))).toBe('10ms s 69ms (e|)', values);
    });
  });

  it('checks sessionWaitMs', async () => {
    expect(() => createAgent({ model: scriptedModel([]), sessionWaitMs: -1 })).toThrow(
      "createAgent: 'sessionWaitMs' must be a number of ms from 0 to 2147483647, or Infinity, got -1",
    );
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']) })
        .run('hi', { session: createSession(), sessionWaitMs: 'soon' as never })
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'error')[0].error.message).toBe('run: \'sessionWaitMs\' must be a number of ms from 0 to 2147483647, or Infinity, got "soon"');
  });
});

describe('turns appended to the store', () => {
  const Count = defineState({ key: 'test.count', schema: z.number(), initial: () => 0, scope: 'session' });
  const Other = defineState({ key: 'test.other', schema: z.string(), initial: () => 'x', scope: 'session' });
  const count: AgentMiddleware = { name: 'count', afterMessageTurn: map((ctx) => ctx.updateState(Count, (n) => n + 1)) };

  /** An InMemorySessionStore that records what each append carries. */
  const spied = () => {
    const store = new InMemorySessionStore();
    const appends: Array<{ expected: number; turn: SessionTurn }> = [];
    const appendTurn = store.appendTurn.bind(store);
    store.appendTurn = (id, expected, turn) => (
      appends.push({ expected, turn: JSON.parse(JSON.stringify(turn)) as SessionTurn }),
      appendTurn(id, expected, turn)
    );
    return { store, appends };
  };

  it('carry the turn only: its messages, the state entries it changed, and the revision its run read', async () => {
    const { store, appends } = spied();
    const agent = createAgent({ model: scriptedModel(['one', 'two', 'three']), middleware: [count] });
    const session = createSession({ id: 's', store });
    for (const input of ['a', 'b', 'c']) await agent.invoke(input, { session });
    expect(appends.map((a) => [a.expected, a.turn.messages.map(textOf), Object.keys(a.turn.state), a.turn.replace])).toEqual([
      [0, ['a', 'one'], ['test.count'], undefined],
      [1, ['b', 'two'], ['test.count'], undefined],
      [2, ['c', 'three'], ['test.count'], undefined],
    ]);
    expect(appends.map((a) => a.turn.runId)).toEqual([expect.stringMatching(/^run_/), expect.stringMatching(/^run_/), expect.stringMatching(/^run_/)]);
    expect(new Set(appends.map((a) => a.turn.runId)).size).toBe(3);
    expect(store.load('s')).toMatchObject({ revision: 3, state: { 'test.count': { version: 1, value: 3 } } });
    // A turn that changes nothing of the state appends no state.
    await createAgent({ model: scriptedModel(['four']) }).invoke('d', { session });
    expect(appends[3].turn.state).toEqual({});
  });

  it('a middleware that rewrites earlier messages appends the whole session once (replace)', async () => {
    const { store, appends } = spied();
    const squash: AgentMiddleware = {
      name: 'squash',
      beforeMessageTurn: map((ctx) => (ctx.messages.length > 2 ? ctx.with({ messages: [textMessage('system', 'summary'), ...ctx.messages.slice(-1)] }) : ctx)),
    };
    const agent = createAgent({ model: scriptedModel(['one', 'two']), middleware: [squash] });
    const session = createSession({ id: 's', store });
    await agent.invoke('a', { session });
    await agent.invoke('b', { session });
    expect(appends[1].turn).toMatchObject({ replace: true });
    expect(store.load('s')?.messages.map(textOf)).toEqual(['summary', 'b', 'two']);
    expect(session.messages.map(textOf)).toEqual(['summary', 'b', 'two']);
  });

  it('a session made from a snapshot writes it whole over the store on its first turn, then appends', async () => {
    const { store, appends } = spied();
    store.appendTurn('s', 0, { runId: 'old', messages: [textMessage('user', 'old')], state: {} });
    const snapshot = { version: 1 as const, id: 's', messages: [textMessage('user', 'mine')], state: {} };
    const session = createSession({ snapshot, store });
    const agent = createAgent({ model: scriptedModel(['one', 'two']) });
    await agent.invoke('a', { session });
    await agent.invoke('b', { session });
    expect(appends.slice(1).map((a) => [a.expected, a.turn.replace, a.turn.messages.map(textOf)])).toEqual([
      [1, true, ['mine', 'a', 'one']],
      [2, undefined, ['b', 'two']],
    ]);
    expect(store.load('s')?.messages.map(textOf)).toEqual(['mine', 'a', 'one', 'b', 'two']);
  });

  it('a state changed by another definition of the key is appended too', async () => {
    const { store, appends } = spied();
    const both: AgentMiddleware = { name: 'both', afterMessageTurn: map((ctx) => ctx.updateState(Other, () => 'y')) };
    const session = createSession({ id: 's', store });
    await createAgent({ model: scriptedModel(['one']), middleware: [count] }).invoke('a', { session });
    await createAgent({ model: scriptedModel(['two']), middleware: [both] }).invoke('b', { session });
    expect(Object.keys(appends[1].turn.state)).toEqual(['test.other']);
    expect(store.load('s')?.state).toEqual({ 'test.count': { version: 1, value: 1 }, 'test.other': { version: 1, value: 'y' } });
  });
});

describe('message ids', () => {
  it('every message of a turn has one, kept by the session, its snapshot and its store', async () => {
    const store = new InMemorySessionStore();
    const session = createSession({ id: 's', store });
    const echo = defineTool({ name: 'echo', description: 'Echoes', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });
    const result = await createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'x' } }] }, 'done']), tools: [echo] }).invoke('go', {
      session,
    });
    const ids = session.messages.map((m) => m.id);
    expect(ids).toHaveLength(4);
    for (const id of ids) expect(id).toMatch(/^msg_[0-9a-f-]{36}$/);
    expect(new Set(ids).size).toBe(4);
    expect(result.messages.map((m) => m.id)).toEqual(ids);
    expect(session.snapshot().messages.map((m) => m.id)).toEqual(ids);
    expect(store.load('s')?.messages.map((m) => m.id)).toEqual(ids);
    await createAgent({ model: scriptedModel(['more']) }).invoke('again', { session: createSession({ id: 's', store }) });
    expect(
      store
        .load('s')
        ?.messages.slice(0, 4)
        .map((m) => m.id),
    ).toEqual(ids);
  });

  it('an input message keeps the id it has; one without gets one', async () => {
    const session = createSession();
    await createAgent({ model: scriptedModel(['ok']) }).invoke([{ id: 'mine', role: 'user', content: [{ type: 'text', text: 'hi' }] }], { session });
    expect(session.messages[0].id).toBe('mine');
    await createAgent({ model: scriptedModel(['ok']) }).invoke([{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], { session });
    expect(session.messages[2].id).toMatch(/^msg_/);
  });

  it('a snapshot of an earlier version (messages without ids) loads, and its messages get ids', () => {
    const old = { version: 1, id: 's', messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], state: {} };
    const session = createSession({ snapshot: old });
    expect(session.messages[0].id).toMatch(/^msg_/);
    expect(session.snapshot().messages[0].id).toBe(session.messages[0].id);
  });
});

describe('forks', () => {
  const Count = defineState({ key: 'test.count', schema: z.number(), initial: () => 0, scope: 'session' });
  const count: AgentMiddleware = { name: 'count', afterMessageTurn: map((ctx) => ctx.updateState(Count, (n) => n + 1)) };
  const countRead = (session: Session) => session.snapshot().state['test.count']?.value;

  it.each([
    ['without a store', () => undefined],
    ['with a store', () => new InMemorySessionStore()],
  ])('%s: the first `at` messages and the state as it stood there; the parent goes on unchanged', async (_, makeStore) => {
    const session = createSession({ id: 'p', store: makeStore() });
    const agent = createAgent({ model: scriptedModel(['A1', 'A2', 'A3', 'A2 again']), middleware: [count] }); // answers in call order
    await agent.invoke('Q1', { session });
    await agent.invoke('Q2', { session });
    const fork = await session.fork({ at: 2 });
    expect([fork.parentId, fork.forkedAt, fork.messages.map(textOf), countRead(fork)]).toEqual(['p', 2, ['Q1', 'A1'], 1]);
    const whole = await session.fork();
    expect([whole.messages.length, countRead(whole)]).toEqual([4, 2]);
    await agent.invoke('Q3', { session });
    expect(fork.messages.map(textOf)).toEqual(['Q1', 'A1']);
    await agent.invoke('Q2 edited', { session: fork });
    expect(fork.messages.map(textOf)).toEqual(['Q1', 'A1', 'Q2 edited', 'A2 again']);
    expect(countRead(fork)).toBe(2);
    expect(session.messages.map(textOf)).toEqual(['Q1', 'A1', 'Q2', 'A2', 'Q3', 'A3']);
    expect(await session.forks()).toEqual([fork.id, whole.id]);
  });

  it.each([
    ['without a store', () => undefined],
    ['with a store', () => new InMemorySessionStore()],
  ])('%s: a session made from a snapshot, forked inside it, keeps no state from after the fork point', async (_, makeStore) => {
    const first = createSession();
    const agent = createAgent({ model: scriptedModel(['A1', 'A2', 'A3']), middleware: [count] });
    await agent.invoke('Q1', { session: first });
    await agent.invoke('Q2', { session: first });
    const session = createSession({ id: 'restored', store: makeStore(), snapshot: first.snapshot() });
    await agent.invoke('Q3', { session });
    // The state after message 2 is not in the snapshot: the fork starts without it, never with Q2's count.
    const fork = await session.fork({ at: 2 });
    expect([fork.messages.map(textOf), countRead(fork)]).toEqual([['Q1', 'A1'], undefined]);
  });

  it.each([
    ['without a store', () => undefined],
    ['with an InMemorySessionStore', () => new InMemorySessionStore()],
    ['with a memoryStore', () => memoryStore()],
  ])('%s: a fork of a fork, forked inside the history it shares with its parent, copies the state as it stood there', async (_, makeStore) => {
    const agent = createAgent({ model: scriptedModel(['a'], { loop: true }), middleware: [count] });
    const root = createSession({ id: 'root', store: makeStore() });
    await agent.invoke('q1', { session: root });
    await agent.invoke('q2', { session: root });
    const child = await root.fork({ at: 4 });
    await agent.invoke('q3', { session: child });
    expect(countRead(await root.fork({ at: 2 }))).toBe(1);
    const early = await child.fork({ at: 2 });
    expect([early.messages.map(textOf), countRead(early)]).toEqual([['q1', 'a'], 1]);
    expect([countRead(await child.fork({ at: 1 })), countRead(await child.fork({ at: 4 })), countRead(await child.fork())]).toEqual([undefined, 2, 3]);
    // Two levels up, and the fork goes on from the state it copied.
    const grandchild = await child.fork({ at: 6 });
    await agent.invoke('q4', { session: grandchild });
    const deep = await grandchild.fork({ at: 3 });
    expect([countRead(deep), countRead(await grandchild.fork({ at: 6 }))]).toEqual([1, 3]);
    await agent.invoke('q2 edited', { session: deep });
    expect([deep.messages.map(textOf), countRead(deep)]).toEqual([['q1', 'a', 'q2', 'q2 edited', 'a'], 2]);
  });

  it('at a message id: up to that message, included (regenerating an answer is a fork at its question plus a run with no input)', async () => {
    const store = new InMemorySessionStore();
    const session = createSession({ id: 'chat', store });
    const agent = createAgent({ model: scriptedModel(['first answer', 'another answer']) });
    await agent.invoke('Tell me a joke', { session });
    const question = session.messages[0];
    const retry = await session.fork({ at: question.id as string, id: 'chat-retry' });
    expect(retry.id).toBe('chat-retry');
    expect(retry.messages).toEqual([question]);
    const again = await agent.invoke([], { session: retry });
    expect(again.text).toBe('another answer');
    expect(store.load('chat-retry')).toMatchObject({ parentId: 'chat', forkedAt: 1, revision: 1 });
    expect(store.load('chat-retry')?.messages.map(textOf)).toEqual(['Tell me a joke', 'another answer']);
    expect(store.forks('chat')).toEqual(['chat-retry']);
    // Loaded by another object (another process), the fork reads its parent's prefix.
    const other = createSession({ id: 'chat-retry', store });
    await createAgent({ model: scriptedModel(['ha']) }).invoke('more', { session: other });
    expect(other.messages.map(textOf)).toEqual(['Tell me a joke', 'another answer', 'more', 'ha']);
    expect([other.parentId, other.forkedAt]).toEqual(['chat', 1]);
  });

  it('refuses a bad `at` and an unknown message id, naming them', async () => {
    const session = createSession();
    await createAgent({ model: scriptedModel(['ok']) }).invoke('hi', { session });
    await expect(session.fork({ at: 3 })).rejects.toThrow("fork: 'at' must be a message id or an integer from 0 to 2 (the message count), got 3");
    await expect(session.fork({ at: 'msg_nope' })).rejects.toThrow("fork: no message with id 'msg_nope' in the session");
    await expect(session.fork({ id: '' })).rejects.toThrow('fork: \'id\' must be a non-empty string, got ""');
  });

  it.each([
    ['without a store', () => undefined],
    ['with an InMemorySessionStore', () => new InMemorySessionStore()],
    ['with a memoryStore', () => memoryStore()],
  ])('%s: a session forks before its first turn, new or made from a snapshot', async (_, makeStore) => {
    const agent = createAgent({ model: scriptedModel(['A1', 'A2', 'A3', 'A4', 'A5']), middleware: [count] });
    const store = makeStore();
    const fresh = createSession({ id: 'fresh', store });
    const empty = await fresh.fork({ id: 'fresh-fork' });
    expect([empty.parentId, empty.forkedAt, empty.messages, countRead(empty)]).toEqual(['fresh', 0, [], undefined]);
    await agent.invoke('Q1', { session: fresh });
    await agent.invoke('Q1 elsewhere', { session: empty });
    expect([fresh.messages.map(textOf), countRead(fresh), empty.messages.map(textOf), countRead(empty)]).toEqual([['Q1', 'A1'], 1, ['Q1 elsewhere', 'A2'], 1]);
    expect(await fresh.forks()).toEqual(['fresh-fork']);

    const snapshot = fresh.snapshot();
    const restored = createSession({ id: 'restored', store, snapshot });
    const inside = await restored.fork({ at: 1 });
    const whole = await restored.fork();
    // As without a store: inside the snapshot's history no state is known; at its end, the snapshot's.
    expect([inside.messages.map(textOf), countRead(inside), whole.messages.map(textOf), countRead(whole)]).toEqual([['Q1'], undefined, ['Q1', 'A1'], 1]);
    expect([inside.parentId, whole.parentId, (await restored.forks()).length]).toEqual(['restored', 'restored', 2]);
    await agent.invoke('Q2', { session: restored });
    await agent.invoke('Q2 elsewhere', { session: whole });
    expect([restored.messages.map(textOf), countRead(restored)]).toEqual([['Q1', 'A1', 'Q2', 'A3'], 2]);
    expect([whole.messages.map(textOf), countRead(whole)]).toEqual([['Q1', 'A1', 'Q2 elsewhere', 'A4'], 2]);
    if (!store) return;
    // Another object (another process) reads what the forks wrote.
    const again = createSession({ id: 'restored', store });
    await agent.invoke('Q3', { session: again });
    expect(again.messages.map(textOf)).toEqual(['Q1', 'A1', 'Q2', 'A3', 'Q3', 'A5']);
  });

  it("with a store: a session made from a snapshot forks its snapshot's history, not what the store held before", async () => {
    const store = new InMemorySessionStore();
    const agent = createAgent({ model: scriptedModel(['old answer', 'A1']), middleware: [count] });
    await agent.invoke('old question', { session: createSession({ id: 's', store }) });
    const elsewhere = createSession();
    await agent.invoke('Q1', { session: elsewhere });
    const restored = createSession({ id: 's', store, snapshot: elsewhere.snapshot() });
    const fork = await restored.fork({ at: 2 });
    expect([fork.messages.map(textOf), countRead(fork)]).toEqual([['Q1', 'A1'], 1]);
    expect(store.load('s')?.messages.map(textOf)).toEqual(['Q1', 'A1']);
  });

  it('with a store: a fork before the first turn waits for a run holding the session, as a run would', async () => {
    const store = new InMemorySessionStore();
    store.acquireSession('busy', 'run-elsewhere', 60_000);
    let forked: Session | undefined;
    const forking = createSession({ id: 'busy', store })
      .fork({ id: 'busy-fork' })
      .then((fork) => (forked = fork));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect([forked, store.load('busy')]).toEqual([undefined, undefined]);
    store.appendTurn('busy', 0, { runId: 'run-elsewhere', messages: [textMessage('user', 'hi')], state: {} });
    store.releaseSession('busy', 'run-elsewhere');
    await forking;
    // The run wrote the session meanwhile: the fork writes nothing, and shares what the run wrote.
    expect([forked?.messages.map(textOf), store.load('busy')?.revision, store.load('busy')?.lastRunId]).toEqual([['hi'], 1, 'run-elsewhere']);
  });

  /** What `forking` settled with once the microtasks ran (a store that answers at once needs no more), or 'still waiting'. */
  const settledNow = (forking: Promise<Session>) =>
    Promise.race([
      forking.then(
        () => 'forked',
        (error: unknown) => error,
      ),
      new Promise((resolve) => setImmediate(() => resolve('still waiting'))),
    ]);

  it('with a store: a fork before the first turn with sessionWaitMs 0 is refused at once while a run holds the session, naming both; nothing is written', async () => {
    const store = new InMemorySessionStore();
    store.acquireSession('busy', 'run-elsewhere', 60_000);
    const forking = createSession({ id: 'busy', store }).fork({ id: 'busy-fork', sessionWaitMs: 0 });
    expect(await settledNow(forking)).toMatchObject({
      name: 'SessionBusyError',
      sessionId: 'busy',
      holder: 'run-elsewhere',
      message: "Session 'busy' is in use by run 'run-elsewhere' (waited 0 ms for it)",
    });
    expect([store.load('busy'), store.load('busy-fork'), store.acquireSession('busy', 'other', 1).acquired]).toEqual([undefined, undefined, false]);
    store.releaseSession('busy', 'run-elsewhere');
    await forking.catch(() => undefined);
  });

  it('with a store: the wait of a fork before the first turn runs on its scheduler, sessionWaitMs long', async () => {
    const scheduler = new VirtualTimeScheduler();
    const store = new InMemorySessionStore({ scheduler });
    store.acquireSession('busy', 'run-elsewhere', 60_000);
    const session = createSession({ id: 'busy', store });
    const refused = session.fork({ sessionWaitMs: 5_000, scheduler });
    expect(await settledNow(refused)).toBe('still waiting');
    scheduler.flush();
    expect(await settledNow(refused)).toMatchObject({ name: 'SessionBusyError', waitedMs: 5_000 });
    // Freed within the wait: the fork goes on then.
    const forking = session.fork({ id: 'busy-fork', sessionWaitMs: 5_000, scheduler });
    await settledNow(forking);
    store.releaseSession('busy', 'run-elsewhere');
    expect(await settledNow(forking)).toBe('forked');
    expect([(await forking).parentId, store.load('busy')?.revision, await session.forks()]).toEqual(['busy', 1, ['busy-fork']]);
    store.releaseSession('busy', 'run-elsewhere');
    await refused.catch(() => undefined);
  });

  it("checks a fork's sessionWaitMs and scheduler, and refuses an option it does not know", async () => {
    const session = createSession({ store: new InMemorySessionStore() });
    await expect(session.fork({ sessionWaitMS: 0 } as never)).rejects.toThrow(
      new TypeError("fork: unknown option(s) 'sessionWaitMS' (known: at, id, sessionWaitMs, scheduler)"),
    );
    await expect(session.fork({ sessionWaitMs: -1 })).rejects.toThrow(
      new TypeError("fork: 'sessionWaitMs' must be a number of ms from 0 to 2147483647, or Infinity, got -1"),
    );
    await expect(session.fork({ scheduler: {} as never })).rejects.toThrow(new TypeError("fork: 'scheduler' must be an rxjs SchedulerLike"));
    await expect(session.fork(null as never)).rejects.toThrow(new TypeError('fork: options must be an object, got null'));
    await expect(session.fork(2 as never)).rejects.toThrow(new TypeError('fork: options must be an object, got 2'));
    expect(await session.forks()).toEqual([]);
  });
});

describe('a turn JSON cannot hold', () => {
  it('is a SessionDataError before the store is asked, and the session object does not take it either', async () => {
    const store = new InMemorySessionStore();
    const session = createSession({ id: 's', store });
    const agent = createAgent({ model: scriptedModel(['a1', 'a2', 'a3']) });
    await agent.invoke('q1', { session });
    const Big = defineState({ key: 'test.big', schema: z.bigint(), initial: () => 0n, scope: 'session' });
    const big: AgentMiddleware = { name: 'big', afterIteration: map((ctx) => ctx.updateState(Big, () => 1n)) };
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['a2']), middleware: [big] })
        .run('q2', { session })
        .pipe(toArray()),
    );
    expect(events.at(-2)).toMatchObject({
      type: 'error',
      error: { name: 'SessionDataError', message: expect.stringContaining("Session 's': the state of run") },
    });
    expect(session.messages.map((m) => textOf(m))).toEqual(['q1', 'a1']);
    await agent.invoke('q3', { session });
    expect(store.load('s')?.messages.map((m) => textOf(m))).toEqual(['q1', 'a1', 'q3', 'a2']);
    expect(session.messages.map((m) => textOf(m))).toEqual(['q1', 'a1', 'q3', 'a2']);
  });
});

describe('a turn saved twice by a run resumed after its process died between the save and the end', () => {
  it('is appended once: the store ignores the second append of the run', async () => {
    const scheduler = new TestScheduler(() => undefined); // virtual clock, never flushed: the dead run's timers never fire
    const inner = memoryStore({ scheduler });
    let dying = true;
    // The process dies just after the session append: its answer (and the journal's end) never come.
    const crashing: AgentStore = Object.assign(Object.create(inner) as AgentStore, {
      appendTurn: (id: string, expected: number, turn: SessionTurn) => {
        const appended = inner.appendTurn(id, expected, turn);
        return dying ? new Promise<never>(() => undefined) : appended;
      },
    });
    const seen: string[] = [];
    const dead = createAgent({ model: scriptedModel(['Hello']), store: crashing, scheduler })
      .run('hi', { sessionId: 's', runId: 'r1' })
      .subscribe((e) => seen.push(eventLabel(e)));
    expect(seen).not.toContain('run-end:completed');
    expect(inner.load('s')).toMatchObject({ revision: 1 });
    expect(inner.read('r1')?.some((entry) => entry.record.kind === 'end')).toBe(false);
    dead.unsubscribe();
    dying = false;
    // Its leases lapse (what their expiry does for a process that is gone).
    inner.releaseLease('r1', inner.getLease('r1')!.owner);
    inner.releaseSession('s', 'r1');

    const model = scriptedModel([]);
    const seenAfter: string[][] = [];
    const watch: AgentMiddleware = { name: 'watch', afterMessageTurn: map((ctx) => (seenAfter.push(ctx.messages.map(textOf)), ctx)) };
    const resumed = await lastValueFrom(
      createAgent({ model, store: inner, scheduler, middleware: [watch] })
        .resume('r1')
        .pipe(toArray()),
    );
    expect(seenAfter).toEqual([['hi', 'Hello']]); // the turn once, though the session held it already
    expect(resumed.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Hello' });
    expect(inner.load('s')?.lastRunId).toBe('r1');
    expect(model.calls).toBe(0);
    expect(inner.load('s')).toMatchObject({ revision: 1 });
    expect(inner.load('s')?.messages.map(textOf)).toEqual(['hi', 'Hello']);
    // The session goes on from there.
    await createAgent({ model: scriptedModel(['Again']), store: inner, scheduler }).invoke('next', { sessionId: 's' });
    expect(inner.load('s')?.messages.map(textOf)).toEqual(['hi', 'Hello', 'next', 'Again']);
  });

  it('starts from the history before its turn when the journal lags behind the saved turn', async () => {
    const scheduler = new TestScheduler(() => undefined);
    const inner = memoryStore({ scheduler });
    await createAgent({ model: scriptedModel(['First']), store: inner, scheduler }).invoke('one', { sessionId: 's' });
    let dying = false;
    // The journal's writes after the tool's outcome never land (another connection, still in
    // flight), while the session append does: the process dies with the turn saved and its last
    // checkpoint one iteration behind.
    const crashing: AgentStore = Object.assign(Object.create(inner) as AgentStore, {
      append: (runId: string, expected: number, records: readonly JournalRecord[]) => {
        if (dying) return new Promise<never>(() => undefined);
        const written = inner.append(runId, expected, records);
        if (records.some((record) => record.kind === 'tool-outcome')) dying = true;
        return written;
      },
      appendTurn: (id: string, expected: number, turn: SessionTurn) => {
        const appended = inner.appendTurn(id, expected, turn);
        return dying ? new Promise<never>(() => undefined) : appended;
      },
    });
    const look = defineTool({ name: 'look', description: 'Looks', parameters: z.object({}), execute: () => 'seen' });
    const answer = { toolCalls: [{ name: 'look', args: {}, callId: 'c1' }] };
    const dead = createAgent({ model: scriptedModel([answer, 'Second']), tools: [look], store: crashing, scheduler })
      .run('two', { sessionId: 's', runId: 'r2' })
      .subscribe();
    expect(inner.load('s')?.messages.map(textOf)).toEqual(['one', 'First', 'two', '', '', 'Second']);
    expect(inner.read('r2')?.some((entry) => entry.record.kind === 'end')).toBe(false);
    dead.unsubscribe();
    inner.releaseLease('r2', inner.getLease('r2')!.owner);
    inner.releaseSession('s', 'r2');

    const seen: string[][] = [];
    const model = scriptedModel([(request) => (seen.push(request.messages.map(textOf)), 'Second')]);
    const resumed = await lastValueFrom(
      createAgent({ model, tools: [look], store: inner, scheduler })
        .resume('r2')
        .pipe(toArray()),
    );
    expect(seen).toEqual([['one', 'First', 'two', '', '']]); // the turn's user message once
    expect(resumed.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Second' });
    expect(inner.load('s')).toMatchObject({ revision: 2 });
    expect(inner.load('s')?.messages.map(textOf)).toEqual(['one', 'First', 'two', '', '', 'Second']);
  });
});
