import { Observable, concatMap, filter, lastValueFrom, map, merge, timer, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { ModelError, createAgent, defineTool, textMessage, type AgentEvent, type AgentMiddleware, type Message, type ModelRequest } from '../../src/index';
import { eventLabel, eventLabels, scriptedModel, type ScriptedTurn, eventsOfType } from '../../src/testing/index';
import { responseCache, responseCacheKey, type ResponseCacheStore } from '../../operators/responseCache';
import { modelRetry } from '../../operators/modelRetry';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const request = (patch: Partial<ModelRequest> = {}): ModelRequest => ({ messages: [textMessage('user', 'hi')], tools: [], settings: {}, ...patch });

const ran: string[] = [];
const lookup = defineTool({
  name: 'lookup',
  description: 'Looks up',
  parameters: z.object({ q: z.string() }),
  execute: ({ q }) => (ran.push(q), `found ${q}`),
});
/** A model whose answer says which call it is. */
const counting = (options: { scheduler?: TestScheduler; delay?: number } = {}) =>
  scriptedModel(
    [(_r: ModelRequest, call: number): ScriptedTurn => ({ text: `fresh ${call}`, usage: { inputTokens: 5, outputTokens: 2 }, delay: options.delay })],
    {
      loop: true,
      scheduler: options.scheduler,
    },
  );

beforeEach(() => (ran.length = 0));

describe('responseCache', () => {
  it('stores a successful call and, for the same request, skips the model and replays the response as model output', async () => {
    const model = counting();
    const agent = createAgent({ model, middleware: [responseCache()] });
    const first = await collect(agent.run('hi', { runId: 'r1' }));
    const second = await collect(agent.run('hi', { runId: 'r2' }));
    expect(model.calls).toBe(1);
    expect(first.map(eventLabel)).toEqual(['run-start', 'iteration-start', 'text-delta:fresh 0', 'iteration-end', 'run-end:completed']);
    expect(second.map(eventLabel)).toEqual(['run-start', 'iteration-start', 'text-delta:fresh 0', 'iteration-end', 'run-end:completed']);
    expect(eventsOfType(second, 'text-delta')).toEqual([{ type: 'text-delta', runId: 'r2', iteration: 0, text: 'fresh 0' }]);
    // No tokens were spent on the hit.
    expect(second.at(-1)).toEqual({ type: 'run-end', runId: 'r2', reason: 'completed', text: 'fresh 0', usage: { inputTokens: 0, outputTokens: 0 } });
    expect(eventsOfType(second, 'iteration-end')[0]).toEqual({ type: 'iteration-end', runId: 'r2', iteration: 0 });
  });

  it('caches tool calls too: a hit replays them and the tools run again', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'lookup', args: { q: 'rxjs' }, callId: 'c1' }] }, 'RxJS is a library.']);
    const agent = createAgent({ model, tools: [lookup], middleware: [responseCache()] });
    const first = await agent.invoke('What is RxJS?');
    const events = await collect(agent.run('What is RxJS?'));
    expect(model.calls).toBe(2); // the second run made no model call
    expect(ran).toEqual(['rxjs', 'rxjs']);
    expect(events.map(eventLabel)).toEqual([
      'run-start',
      'iteration-start',
      'tool-call:lookup',
      'tool-result:lookup',
      'iteration-end',
      'iteration-start',
      'text-delta:RxJS is a library.',
      'iteration-end',
      'run-end:completed',
    ]);
    expect(eventsOfType(events, 'tool-call')[0]).toMatchObject({ callId: 'c1', name: 'lookup', args: { q: 'rxjs' } });
    expect(first.text).toBe('RxJS is a library.');
  });

  it('a different request misses: other messages, instructions, tools or settings', async () => {
    const cache = responseCache();
    const model = counting();
    const run = (input: string, options: { instructions?: string; tools?: (typeof lookup)[]; settings?: Record<string, unknown> } = {}) =>
      createAgent({ model, middleware: [cache], ...options })
        .invoke(input)
        .then((r) => r.text);
    expect(await run('hi')).toBe('fresh 0');
    expect(await run('hi')).toBe('fresh 0');
    expect(await run('hello')).toBe('fresh 1');
    expect(await run('hi', { instructions: 'Be brief.' })).toBe('fresh 2');
    expect(await run('hi', { tools: [lookup] })).toBe('fresh 3');
    expect(await run('hi', { settings: { temperature: 0 } })).toBe('fresh 4');
    expect(await run('hi', { settings: { temperature: 0 } })).toBe('fresh 4');
  });

  it('the default key is stable and independent of object key order, at every depth', () => {
    const a = request({ settings: { temperature: 0, model: 'm', extra: { x: 1, y: [{ p: 1, q: 2 }] } } });
    const b = request({ settings: { extra: { y: [{ q: 2, p: 1 }], x: 1 }, model: 'm', temperature: 0 } });
    expect(responseCacheKey(a)).toBe(responseCacheKey(b));
    expect(responseCacheKey(a)).toMatch(/^[0-9a-f]{64}$/);
    expect(responseCacheKey(request({ instructions: 'x' }))).not.toBe(responseCacheKey(request()));
    expect(responseCacheKey(request({ settings: { temperature: 1 } }))).not.toBe(responseCacheKey(request({ settings: { temperature: 0 } })));
    // Tools count by name (not by description or schema).
    const spec = (name: string, description: string) => ({ name, description, parameters: {} });
    expect(responseCacheKey(request({ tools: [spec('a', 'one')] }))).toBe(responseCacheKey(request({ tools: [spec('a', 'two')] })));
    expect(responseCacheKey(request({ tools: [spec('a', 'one')] }))).not.toBe(responseCacheKey(request({ tools: [spec('b', 'one')] })));
    // Settings that differ only in key order hit through an agent too.
    const model = counting();
    const cache = responseCache();
    return createAgent({ model, middleware: [cache], settings: a.settings })
      .invoke('hi')
      .then(() => createAgent({ model, middleware: [cache], settings: b.settings }).invoke('hi'))
      .then((r) => {
        expect(r.text).toBe('fresh 0');
        expect(model.calls).toBe(1);
      });
  });

  it('a custom `key` and a custom store (Promises allowed): set(key, response, ttl) after a miss', async () => {
    const calls: string[] = [];
    const map = new Map<string, Message>();
    const store: ResponseCacheStore = {
      get: async (k) => (calls.push(`get ${k}`), map.get(k)),
      set: async (k, v, ttl) => {
        calls.push(`set ${k} ${ttl}`);
        map.set(k, v);
      },
    };
    const model = counting();
    const agent = createAgent({ model, middleware: [responseCache({ store, ttl: 5000, key: (r) => `k:${r.messages.length}` })] });
    expect((await agent.invoke('one')).text).toBe('fresh 0');
    expect((await agent.invoke('two')).text).toBe('fresh 0'); // same custom key
    expect(calls).toEqual(['get k:1', 'set k:1 5000', 'get k:1']);
    expect(map.get('k:1')).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: 'fresh 0' }] });
  });

  it('two caches on one agent (an L1 in memory before an L2 elsewhere) each store a fresh response; a hit in the first spares the second', async () => {
    const storeOf = () => {
      const map = new Map<string, Message>();
      const store: ResponseCacheStore = { get: (k) => map.get(k), set: (k, v) => void map.set(k, v) };
      return { map, store };
    };
    const l1 = storeOf();
    const l2 = storeOf();
    const agent = createAgent({ model: counting(), middleware: [responseCache({ store: l1.store }), responseCache({ store: l2.store })] });
    expect((await agent.invoke('hi')).text).toBe('fresh 0');
    expect([l1.map.size, l2.map.size]).toEqual([1, 1]);
    l2.map.clear();
    expect((await agent.invoke('hi')).text).toBe('fresh 0'); // served by l1
    expect(l2.map.size).toBe(0);
  });

  it('a store whose value is not an assistant message is a miss', async () => {
    const store: ResponseCacheStore = { get: () => ({ nonsense: true }) as never, set: () => undefined };
    const model = counting();
    const text = (await createAgent({ model, middleware: [responseCache({ store })] }).invoke('hi')).text;
    expect(text).toBe('fresh 0');
    expect(model.calls).toBe(1);
  });

  it('a failing store fails the run, naming the middleware', async () => {
    const store: ResponseCacheStore = { get: () => Promise.reject(new Error('redis down')), set: () => undefined };
    const events = await collect(createAgent({ model: counting(), middleware: [responseCache({ store })] }).run('hi'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({ source: 'middleware', middleware: 'responseCache', error: { message: 'redis down' } });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('does not store a call that was skipped or terminated by another middleware, nor a failed call', async () => {
    const sets: string[] = [];
    const store: ResponseCacheStore = { get: () => undefined, set: (k) => void sets.push(k) };
    const skipper: AgentMiddleware = { name: 'skipper', beforeIteration: map((ctx) => ctx.skipModelCall(textMessage('assistant', 'canned'))) };
    const stopper: AgentMiddleware = { name: 'stopper', beforeIteration: map((ctx) => ctx.terminate('stop')) };
    await createAgent({ model: counting(), middleware: [responseCache({ store }), skipper] }).invoke('hi');
    await createAgent({ model: counting(), middleware: [responseCache({ store }), stopper] }).invoke('hi');
    await createAgent({ model: scriptedModel([{ error: new Error('down') }]), middleware: [responseCache({ store })] })
      .invoke('hi')
      .catch(() => undefined);
    expect(sets).toEqual([]);
  });

  it.each([
    ['registered before modelRetry', (cache: AgentMiddleware, retry: AgentMiddleware) => [cache, retry]],
    ['registered after modelRetry', (cache: AgentMiddleware, retry: AgentMiddleware) => [retry, cache]],
  ])("does not store the answer modelRetry({ onFailure: 'continue' }) gives up with (%s): the next run asks the model", async (_label, order) => {
    const down = new ModelError('Still down', { retryable: true });
    const model = scriptedModel([{ error: down }, { error: down }, 'the real answer'], { loop: false });
    const cache = responseCache();
    const retry = modelRetry({ maxRetries: 1, initialDelayMs: 0, jitter: 0, onFailure: 'continue' });
    const agent = createAgent({ model, middleware: order(cache, retry) });
    expect((await agent.invoke('hi')).text).toBe('Model call failed after 2 attempts: Still down');
    expect((await agent.invoke('hi')).text).toBe('the real answer');
    expect((await agent.invoke('hi')).text).toBe('the real answer'); // stored, served from the cache
    expect(model.calls).toBe(3);
  });

  it('one instance serves concurrent runs: each stores its own response under its own key', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const model = scriptedModel(
        [
          (r: ModelRequest) => ({
            text: `answer to ${(r.messages[0].content[0] as { text: string }).text}`,
            delay: r.messages.length === 1 && (r.messages[0].content[0] as { text: string }).text === 'a' ? 10 : 5,
          }),
        ],
        {
          loop: true,
          scheduler: testScheduler,
        },
      );
      const agent = createAgent({ model, middleware: [responseCache()], scheduler: testScheduler });
      const text = (run$: Observable<AgentEvent>) =>
        run$.pipe(
          filter((e) => e.type === 'run-end'),
          map((e) => (e as { text: string }).text),
        );
      const both$ = merge(text(agent.run('a')), text(agent.run('b')));
      const later$ = timer(25, testScheduler).pipe(concatMap(() => merge(text(agent.run('b')), text(agent.run('a')))));
      expectObservable(merge(both$, later$)).toBe('10ms b 9ms a 4ms (ba|)', { a: 'answer to a', b: 'answer to b' });
      testScheduler.flush();
      expect(model.calls).toBe(2);
    });
  });

  it.each([
    [{ store: {} }, "'store' must be an object with get(key) and set(key, value, ttlMs) methods"],
    [{ ttl: 0 }, "'ttl' must be a positive number of ms (or Infinity), got 0"],
    [{ ttl: '1h' }, "'ttl' must be a positive number of ms"],
    [{ key: 'messages' }, "'key' must be a function (request) => string"],
    [{ scheduler: {} }, 'scheduler must be an rxjs SchedulerLike'],
  ])('rejects bad options: %j', (options, message) => {
    expect(() => responseCache(options as never)).toThrow(`responseCache: ${message}`);
    expect(() => responseCache(options as never)).toThrow(TypeError);
  });
});

describe('responseCache TTL in virtual time (default store, scheduler clock)', () => {
  let testScheduler: TestScheduler;
  beforeEach(() => {
    testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
  });
  /** The final text of a run of 'hi' started at each of `times` (ms). */
  const textsAt = (agent: ReturnType<typeof createAgent>, times: number[]) =>
    merge(
      ...times.map((t) =>
        timer(t, testScheduler).pipe(
          concatMap(() => agent.run('hi')),
          filter((e) => e.type === 'run-end'),
          map((e) => (e as { text: string }).text),
        ),
      ),
    );

  it('default ttl 600000 ms: a hit at age 599999, a miss at age 600000 (age >= ttl expires)', () => {
    testScheduler.run(({ expectObservable }) => {
      const agent = createAgent({ model: counting({ scheduler: testScheduler }), middleware: [responseCache()], scheduler: testScheduler });
      expectObservable(textsAt(agent, [0, 599999, 600000, 600001])).toBe('a 599998ms ab(b|)', { a: 'fresh 0', b: 'fresh 1' });
    });
  });

  it('a hit does not refresh the entry; the new response is stored again after expiry', () => {
    testScheduler.run(({ expectObservable }) => {
      const agent = createAgent({ model: counting({ scheduler: testScheduler }), middleware: [responseCache({ ttl: 100 })], scheduler: testScheduler });
      expectObservable(textsAt(agent, [0, 50, 99, 100, 150, 199, 200])).toBe('a 49ms a 48ms ab 49ms b 48ms b(c|)', {
        a: 'fresh 0',
        b: 'fresh 1',
        c: 'fresh 2',
      });
    });
  });

  it('the entry is stored when the call completes (its age counts from then)', () => {
    testScheduler.run(({ expectObservable }) => {
      // The model takes 3 ms (text, usage and finish, 1 ms apart).
      const agent = createAgent({
        model: counting({ scheduler: testScheduler, delay: 1 }),
        middleware: [responseCache({ ttl: 10 })],
        scheduler: testScheduler,
      });
      // Run at 0 completes (and stores) at 3; a run at 12 (age 9) hits; a run at 13 (age 10) misses and completes at 16.
      expectObservable(textsAt(agent, [0, 12, 13])).toBe('3ms a 8ms a 3ms (b|)', { a: 'fresh 0', b: 'fresh 1' });
    });
  });

  it('a hit replays at once, in the marble path (no Promise involved)', () => {
    testScheduler.run(({ expectObservable }) => {
      const agent = createAgent({ model: counting({ scheduler: testScheduler, delay: 5 }), middleware: [responseCache()], scheduler: testScheduler });
      const second$ = timer(100, testScheduler).pipe(
        concatMap(() => agent.run('hi', { runId: 'r2' })),
        eventLabels(),
      );
      expectObservable(
        merge(
          agent.run('hi', { runId: 'r1' }).pipe(
            filter((e) => e.type === 'run-end'),
            eventLabels(),
          ),
          second$,
        ),
      ).toBe('15ms a 84ms (bcdea|)', {
        a: 'run-end:completed',
        b: 'run-start',
        c: 'iteration-start',
        d: 'text-delta:fresh 0',
        e: 'iteration-end',
      });
    });
  });
});

describe('responseCacheKey and the tool choice', () => {
  it('a set toolChoice changes the key; an unset one leaves it as it was', () => {
    const base = { messages: [textMessage('user', 'hi')], tools: [], settings: {} };
    const required = responseCacheKey({ ...base, toolChoice: 'required' });
    expect(required).not.toBe(responseCacheKey({ ...base, toolChoice: 'none' }));
    expect(responseCacheKey(base)).toBe(responseCacheKey({ ...base, toolChoice: undefined }));
    expect(responseCacheKey(base)).not.toBe(required);
  });
});

describe('responseCacheKey and structured output', () => {
  it('a request asking for structured output has a key of its own; one without keeps the key it had', () => {
    const base: ModelRequest = { messages: [textMessage('user', 'Weather?')], tools: [], settings: {} };
    const withOutput: ModelRequest = { ...base, output: { name: 'final_answer', schema: { type: 'object' }, strict: false } };
    const other: ModelRequest = { ...base, output: { name: 'final_answer', schema: { type: 'object', properties: {} }, strict: false } };
    expect(responseCacheKey(withOutput)).not.toBe(responseCacheKey(base));
    expect(responseCacheKey(other)).not.toBe(responseCacheKey(withOutput));
    expect(responseCacheKey({ ...base, output: undefined })).toBe(responseCacheKey(base));
  });
});
