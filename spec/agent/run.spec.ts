import {
  Observable,
  catchError,
  concat,
  repeat,
  firstValueFrom,
  ignoreElements,
  lastValueFrom,
  of,
  retry,
  switchMap,
  throwError,
  toArray,
  NEVER,
  map,
  tap,
  delay,
  take,
  takeWhile,
} from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { SKIPPED_RESULT } from '../../src/agent/runTools';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineState,
  defineTool,
  mapContext,
  textOf,
  type AgentEvent,
  type ModelClient,
  type ModelRequest,
  type ModelUpdate,
  type AgentMiddleware,
  type Message,
} from '../../src/index';
import { eventLabel, scriptedModel, eventsOfType } from '../../src/testing/index';
import { signalTool } from '../support/signalTool';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const labels = (events: AgentEvent[]) => events.map(eventLabel);

const echo = defineTool({
  name: 'echo',
  description: 'Echoes its input',
  parameters: z.object({ text: z.string() }),
  execute: ({ text }) => ({ echoed: text }),
});

describe('a run', () => {
  it('streams text and ends with run-end completed, the final text and usage', async () => {
    const agent = createAgent({ model: scriptedModel([{ text: ['Hel', 'lo'], usage: { inputTokens: 3, outputTokens: 2 } }]) });
    const events = await collect(agent.run('Hi', { runId: 'r1' }));
    expect(labels(events)).toEqual(['run-start', 'iteration-start', 'text-delta:Hel', 'text-delta:lo', 'iteration-end', 'run-end:completed']);
    expect(events.every((e) => e.runId === 'r1')).toBe(true);
    expect(events.at(-1)).toEqual({ type: 'run-end', runId: 'r1', reason: 'completed', text: 'Hello', usage: { inputTokens: 3, outputTokens: 2 } });
    expect(eventsOfType(events, 'iteration-end')[0]).toEqual({ type: 'iteration-end', runId: 'r1', iteration: 0, usage: { inputTokens: 3, outputTokens: 2 } });
  });

  it('is cold: each subscription is a new run with a new model call', async () => {
    const model = scriptedModel(['a', 'b']);
    const run$ = createAgent({ model }).run('Hi');
    expect(model.calls).toBe(0);
    await collect(run$);
    await collect(run$);
    expect(model.calls).toBe(2);
  });

  it('runs tools and feeds their results to the next model call', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'x' }, callId: 'c1' }] }, 'Done']);
    const result = await createAgent({ model, tools: [echo] }).invoke('go');
    expect(result.reason).toBe('completed');
    expect(result.text).toBe('Done');
    expect(result.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(model.requests[1].messages[2]).toEqual({
      id: expect.any(String),
      role: 'tool',
      content: [{ type: 'tool-result', callId: 'c1', name: 'echo', result: { echoed: 'x' }, isError: false }],
    });
    expect(model.requests[0].tools).toEqual([
      { name: 'echo', description: 'Echoes its input', parameters: expect.objectContaining({ type: 'object', required: ['text'] }) },
    ]);
  });

  it('runs parallel calls at once and keeps the model order of results', async () => {
    const started: string[] = [];
    const slow = defineTool({
      name: 'wait',
      description: 'waits',
      parameters: z.object({ ms: z.number(), id: z.string() }),
      execute: ({ ms, id }) => {
        started.push(id);
        return new Promise((resolve) => setTimeout(() => resolve(id), ms));
      },
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'wait', args: { ms: 30, id: 'first' } },
          { name: 'wait', args: { ms: 1, id: 'second' } },
        ],
      },
      'ok',
    ]);
    const events = await collect(createAgent({ model, tools: [slow] }).run('go'));
    expect(started).toEqual(['first', 'second']);
    // Events arrive as calls finish; the message keeps the model's order.
    expect(eventsOfType(events, 'tool-result').map((e) => e.result)).toEqual(['second', 'first']);
    const toolMessage = model.requests[1].messages[2];
    expect(toolMessage.content.map((p) => (p.type === 'tool-result' ? p.result : null))).toEqual(['first', 'second']);
  });

  it("runs calls one by one with toolExecution: 'sequential'", async () => {
    const log: string[] = [];
    const step = defineTool({
      name: 'step',
      description: 'a step',
      parameters: z.object({ id: z.string() }),
      execute: ({ id }) => {
        log.push(`start ${id}`);
        return new Promise((resolve) => setTimeout(() => (log.push(`end ${id}`), resolve(id)), 5));
      },
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'step', args: { id: 'a' } },
          { name: 'step', args: { id: 'b' } },
        ],
      },
      'ok',
    ]);
    await createAgent({ model, tools: [step], toolExecution: 'sequential' }).invoke('go');
    expect(log).toEqual(['start a', 'end a', 'start b', 'end b']);
  });

  it('accepts a tool that returns an Observable (its last value) and gives it an AbortSignal', async () => {
    const count = signalTool('count', () => of(1, 2, 3));
    const model = scriptedModel([{ toolCalls: [{ name: 'count', args: {} }] }, 'ok']);
    const events = await collect(createAgent({ model, tools: [count.tool] }).run('go'));
    expect(eventsOfType(events, 'tool-result')[0].result).toBe(3);
    expect(count.signal()).toBeInstanceOf(AbortSignal);
  });

  it('stops at maxIterations with reason max-iterations (n model calls at most)', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'again' } }] }], { loop: true });
    const events = await collect(createAgent({ model, tools: [echo], maxIterations: 3 }).run('go'));
    expect(model.calls).toBe(3);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'max-iterations' });
  });

  it('does not grow the stack over a long synchronous loop', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'x' } }] }], { loop: true });
    const result = await createAgent({ model, tools: [echo], maxIterations: 3000 }).invoke('go');
    expect(result.reason).toBe('max-iterations');
    expect(model.calls).toBe(3000);
  });
});

describe('bad input gives the model an error result and the loop goes on', () => {
  const cases: Array<[string, Parameters<typeof scriptedModel>[0][number], RegExp]> = [
    ['arguments that are not JSON', { toolCalls: [{ name: 'echo', args: '{"text": "unterminated' }] }, /^Invalid arguments for tool 'echo': not valid JSON/],
    ['arguments that fail the schema', { toolCalls: [{ name: 'echo', args: { text: 42 } }] }, /^Invalid arguments for tool 'echo': .*text/],
    ['an unknown tool name', { toolCalls: [{ name: 'foo', args: {} }] }, /^Unknown tool 'foo'. Available tools: 'echo', 'boom', 'reject', 'broken'\.$/],
    ['a tool that throws', { toolCalls: [{ name: 'boom', args: {} }] }, /^Error: kaboom$/],
    ['a tool that rejects', { toolCalls: [{ name: 'reject', args: {} }] }, /^Error: nope$/],
    ['a tool whose Observable errors', { toolCalls: [{ name: 'broken', args: {} }] }, /^Error: stream broke$/],
  ];
  const boom = defineTool({
    name: 'boom',
    description: 'throws',
    parameters: z.object({}),
    execute: () => {
      throw new Error('kaboom');
    },
  });
  const reject = defineTool({ name: 'reject', description: 'rejects', parameters: z.object({}), execute: () => Promise.reject(new Error('nope')) });
  const broken = defineTool({ name: 'broken', description: 'errors', parameters: z.object({}), execute: () => throwError(() => new Error('stream broke')) });

  it.each(cases)('%s', async (_name, turn, expected) => {
    const model = scriptedModel([turn, 'recovered']);
    const events = await collect(createAgent({ model, tools: [echo, boom, reject, broken] }).run('go'));
    const [result] = eventsOfType(events, 'tool-result');
    expect(result.isError).toBe(true);
    expect(result.result).toMatch(expected);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'recovered' });
    const toolMessage = model.requests[1].messages.find((m) => m.role === 'tool');
    expect(toolMessage?.content[0]).toMatchObject({ type: 'tool-result', isError: true, result: expect.stringMatching(expected) });
  });
});

describe('failures end the run with an error event and run-end error, keeping what was done', () => {
  it('a model stream that errors half way', async () => {
    const session = createSession();
    const model = scriptedModel([
      { toolCalls: [{ name: 'echo', args: { text: 'x' } }] },
      { text: ['partial ', 'answer'], error: new Error('socket hang up'), errorAfter: 1 },
    ]);
    const events = await collect(createAgent({ model, tools: [echo] }).run('go', { session }));
    expect(labels(events).slice(-3)).toEqual(['text-delta:partial ', 'error:model', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error).toEqual({ name: 'Error', message: 'socket hang up' });
    expect(eventsOfType(events, 'run-end')).toHaveLength(1);
    // The input and the finished first iteration are kept; the broken second one is not.
    expect(session.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
  });

  it('a hook that throws names the middleware', async () => {
    const bad: AgentMiddleware = {
      name: 'bad',
      beforeIteration: map(() => {
        throw new Error('hook broke');
      }),
    };
    const events = await collect(createAgent({ model: scriptedModel(['x']), middleware: [bad] }).run('go'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({ source: 'middleware', middleware: 'bad', error: { message: 'hook broke' } });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('a phase that emits zero contexts', async () => {
    const none: AgentMiddleware = { name: 'swallower', beforeIteration: () => of() };
    const events = await collect(createAgent({ model: scriptedModel(['x']), middleware: [none] }).run('go'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'middleware',
      middleware: 'swallower',
      error: { name: 'MiddlewareError', message: "Middleware 'swallower' beforeIteration emitted 0 contexts; a phase hook must emit exactly one" },
    });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('a phase that emits two contexts', async () => {
    const twice: AgentMiddleware = {
      name: 'twice',
      afterIteration: (source) =>
        new Observable((s) =>
          source.subscribe({
            next: (c) => {
              s.next(c);
              s.next(c);
            },
            complete: () => s.complete(),
          }),
        ),
    };
    const events = await collect(createAgent({ model: scriptedModel(['x']), middleware: [twice] }).run('go'));
    expect(eventsOfType(events, 'error')[0].error.message).toBe("Middleware 'twice' afterIteration emitted 2 contexts; a phase hook must emit exactly one");
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('a model that throws synchronously', async () => {
    const agent = createAgent({ model: () => throwError(() => new Error('no key')) });
    const events = await collect(agent.run('go'));
    expect(labels(events)).toEqual(['run-start', 'iteration-start', 'error:model', 'run-end:error']);
  });

  it('a model client that throws when called: a model error, or an error a wrapper can retry', async () => {
    let calls = 0;
    const flaky = () => {
      calls++;
      if (calls === 1) throw new Error('no connection yet');
      return of({ type: 'text-delta' as const, text: 'ok' }, { type: 'finish' as const, reason: 'stop' as const });
    };
    // No wrapper: the throw is the model's error.
    const bare = await collect(
      createAgent({
        model: () => {
          throw new Error('no key');
        },
      }).run('go'),
    );
    expect(labels(bare)).toEqual(['run-start', 'iteration-start', 'error:model', 'run-end:error']);
    // Under a wrapper the client is called on each subscription (as defer would), so a retry calls it again.
    const retryOnce: AgentMiddleware = { name: 'retryOnce', wrapModel: () => (source) => source.pipe(retry(1)) };
    const events = await collect(createAgent({ model: flaky, middleware: [retryOnce] }).run('go'));
    expect(calls).toBe(2);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'ok' });
  });

  it('invalid input is reported, not thrown', async () => {
    const events = await collect(createAgent({ model: scriptedModel(['x']) }).run({ role: 'robot', content: [] } as unknown as Message));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'run',
      error: { name: 'TypeError', message: expect.stringContaining('Invalid run input') },
    });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('invoke rejects with the error of a failed run', async () => {
    const agent = createAgent({ model: () => throwError(() => new Error('down')) });
    await expect(agent.invoke('go')).rejects.toThrow('down');
  });

  it('onError hooks see the error in reverse order and may replace it', async () => {
    const seen: string[] = [];
    const first: AgentMiddleware = { name: 'first', onError: map((ctx) => (seen.push('first'), ctx)) };
    const second: AgentMiddleware = { name: 'second', onError: map((ctx) => (seen.push('second'), ctx.with({ error: new Error('clearer') }))) };
    const events = await collect(createAgent({ model: () => throwError(() => new Error('raw')), middleware: [first, second] }).run('go'));
    expect(seen).toEqual(['second', 'first']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe('clearer');
  });

  it('state an onError hook writes is kept with the turn (a session-scoped count survives the failure)', async () => {
    const Failures = defineState({ key: 'test.failures', schema: z.number(), initial: () => 0, scope: 'session' });
    const counter: AgentMiddleware = { name: 'counter', onError: map((ctx) => ctx.updateState(Failures, (n) => n + 1)) };
    const session = createSession();
    const agent = createAgent({ model: scriptedModel([{ error: new Error('boom') }, { error: new Error('again') }]), middleware: [counter] });
    await collect(agent.run('go', { session }));
    await collect(agent.run('retry', { session }));
    expect(session.messages.map(textOf)).toEqual(['go', 'retry']);
    expect(session.snapshot().state['test.failures']).toEqual({ version: 1, value: 2 });
  });

  it('a failure before the turn begins (a store that cannot load) leaves the session as it was, onError or not', async () => {
    const counter: AgentMiddleware = { name: 'counter', onError: map((ctx) => ctx) };
    const store = { load: () => Promise.reject(new Error('store down')), save: jest.fn() };
    const events = await collect(
      createAgent({ model: scriptedModel(['never']), middleware: [counter] }).run('go', { session: createSession({ id: 's', store }) }),
    );
    expect(eventsOfType(events, 'error')[0].error.message).toBe('store down');
    expect(store.save).not.toHaveBeenCalled();
  });
});

describe('createAgent checks its options', () => {
  it.each([
    [{}, /'model' must be a ModelClient/],
    [{ model: scriptedModel([]), maxIterations: 0 }, /'maxIterations' must be a positive integer/],
    [{ model: scriptedModel([]), tools: [{ name: 'x' }] }, /tool at position 0 is not a tool/],
    [{ model: scriptedModel([]), tools: [echo, echo] }, /two tools are named 'echo'/],
    [{ model: scriptedModel([]), middleware: [{}] }, /middleware at position 0 needs a non-empty 'name'/],
    [{ model: scriptedModel([]), toolExecution: 'random' }, /'toolExecution' must be 'parallel' or 'sequential'/],
  ])('%#', (options, message) => {
    expect(() => createAgent(options as never)).toThrow(message);
  });

  it('refuses options that are not an object', () => {
    expect(() => createAgent(null as never)).toThrow(new TypeError('createAgent: options must be an object, got null'));
    expect(() => createAgent(scriptedModel([]) as never)).toThrow(new TypeError('createAgent: options must be an object, got a function'));
  });
});

describe('sessions', () => {
  it('carry history across runs', async () => {
    const session = createSession({ id: 's1' });
    const model = scriptedModel(['Nice to meet you, Ada.', 'Your name is Ada.']);
    const agent = createAgent({ model });
    await agent.invoke('My name is Ada.', { session });
    const second = await agent.invoke('What is my name?', { session });
    expect(second.text).toBe('Your name is Ada.');
    expect(model.requests[1].messages.map(textOf)).toEqual(['My name is Ada.', 'Nice to meet you, Ada.', 'What is my name?']);
    expect(second.messages.map(textOf)).toEqual(['What is my name?', 'Your name is Ada.']);
    expect(session.messages).toHaveLength(4);
  });

  it('snapshot and restore history and session state through JSON, run state is not kept', async () => {
    const Visits = defineState({ key: 'test.visits', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session' });
    const Scratch = defineState({ key: 'test.scratch', schema: z.number(), initial: () => 0, scope: 'run' });
    const seen: number[] = [];
    const counter: AgentMiddleware = {
      name: 'counter',
      beforeMessageTurn: map((ctx) => {
        seen.push(ctx.state(Visits).n, ctx.state(Scratch));
        return ctx.updateState(Visits, (v) => ({ n: v.n + 1 })).updateState(Scratch, (n) => n + 10);
      }),
    };
    const agent = createAgent({ model: scriptedModel(['a', 'b'], {}), middleware: [counter] });
    const session = createSession();
    await agent.invoke('one', { session });
    const json = JSON.parse(JSON.stringify(session.snapshot()));
    expect(json).toEqual({ version: 1, id: session.id, messages: expect.any(Array), state: { 'test.visits': { version: 1, value: { n: 1 } } } });
    const restored = createSession({ snapshot: json });
    await agent.invoke('two', { session: restored });
    expect(seen).toEqual([0, 0, 1, 0]);
    expect(restored.messages.map(textOf)).toEqual(['one', 'a', 'two', 'b']);
  });

  it('a stored state that does not fit its schema is a StateError naming the key', async () => {
    const Visits = defineState({ key: 'test.visits', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session' });
    const reader: AgentMiddleware = { name: 'reader', beforeIteration: map((ctx) => (ctx.state(Visits), ctx)) };
    const session = createSession({ snapshot: { version: 1, id: 's', messages: [], state: { 'test.visits': { version: 1, value: { n: 'many' } } } } });
    const events = await collect(createAgent({ model: scriptedModel(['x']), middleware: [reader] }).run('go', { session }));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      middleware: 'reader',
      error: { name: 'StateError', message: expect.stringContaining("State 'test.visits'") },
    });
    // Nothing silently reset: the stored value is still there.
    expect(session.snapshot().state['test.visits']).toEqual({ version: 1, value: { n: 'many' } });
  });

  it('rejects a broken snapshot with a clear error', () => {
    expect(() => createSession({ snapshot: { version: 2, id: 'x', messages: [], state: {} } })).toThrow(/Invalid session snapshot/);
  });

  it('refuses a second run on a session while one is running', async () => {
    const session = createSession({ id: 'busy' });
    const agent = createAgent({ model: () => NEVER });
    const first = agent.start('one', { session });
    const events = await collect(agent.run('two', { session, sessionWaitMs: 0 }));
    expect(eventsOfType(events, 'error')[0].error).toMatchObject({
      name: 'SessionBusyError',
      message: expect.stringMatching(/Session 'busy' is in use by run/),
    });
    first.cancel();
    expect(session.messages.map(textOf)).toEqual(['one']);
  });
});

describe('cancel or unsubscribe while a synchronous beforeMessageTurn hook runs', () => {
  /** A model that answers at once and counts its calls. */
  function countingModel() {
    let calls = 0;
    const model = (_request: ModelRequest): Observable<ModelUpdate> =>
      new Observable<ModelUpdate>((subscriber) => {
        calls++;
        subscriber.next({ type: 'text-delta', text: 'x' });
        subscriber.next({ type: 'finish', reason: 'stop' });
        subscriber.complete();
      });
    return { model, calls: () => calls };
  }

  it('the signal aborted inside the hook: run-end says cancelled and the model is never called', async () => {
    const { model, calls } = countingModel();
    const controller = new AbortController();
    const agent = createAgent({ model, middleware: [{ name: 'aborter', beforeMessageTurn: tap(() => controller.abort()) }] });
    const events = await collect(agent.run('hi', { signal: controller.signal }));
    await new Promise((r) => setTimeout(r, 10));
    expect(labels(events)).toEqual(['run-start', 'run-end:cancelled']);
    expect(calls()).toBe(0);
  });

  it('the consumer unsubscribes on an event a hook emits after an async hook: the model is never called', async () => {
    const { model, calls } = countingModel();
    const agent = createAgent({
      model,
      middleware: [
        { name: 'slow', beforeMessageTurn: delay(5) },
        { name: 'emitter', beforeMessageTurn: tap((ctx) => ctx.emit({ type: 'pii-detected', piiType: 'email', strategy: 'redact', count: 1 })) },
      ],
    });
    const seen: string[] = [];
    await new Promise<void>((resolve) => {
      agent
        .run('hi')
        .pipe(take(2))
        .subscribe({ next: (e) => seen.push(e.type), complete: () => resolve() });
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(seen).toEqual(['run-start', 'pii-detected']);
    expect(calls()).toBe(0);
  });
});

describe('a consumer that leaves during a synchronous run', () => {
  it('stops the run there: the model is not called (and so no tool or later hook runs)', () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }, 'done']);
    const types: string[] = [];
    createAgent({ model, tools: [echo] })
      .run('go')
      .pipe(take(2))
      .subscribe((e) => types.push(e.type));
    expect(types).toEqual(['run-start', 'iteration-start']);
    expect(model.calls).toBe(0);
  });
});

describe('runs at their edges', () => {
  const say = defineTool({ name: 'say', description: 'Says', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });
  const deleter = (ran: string[]) =>
    defineTool({ name: 'del', description: 'Deletes', parameters: z.object({ f: z.string() }), execute: ({ f }) => (ran.push(f), `deleted ${f}`) });

  it('a beforeToolExecution hook that drops every call: the run goes on, each dropped call gets the skipped result', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'say', args: { text: 'a' }, callId: 'c1' },
          { name: 'say', args: { text: 'b' }, callId: 'c2' },
        ],
      },
      'done',
    ]);
    const dropAll: AgentMiddleware = { name: 'dropAll', beforeToolExecution: map((ctx) => ctx.with({ toolCalls: [] })) };
    const result = await createAgent({ model, tools: [say], middleware: [dropAll] }).invoke('go');
    expect(result.reason).toBe('completed');
    const tool = result.messages.find((m) => m.role === 'tool')!;
    expect(tool.content).toEqual([
      { type: 'tool-result', callId: 'c1', name: 'say', result: SKIPPED_RESULT, isError: true },
      { type: 'tool-result', callId: 'c2', name: 'say', result: SKIPPED_RESULT, isError: true },
    ]);
  });

  it('a hook that drops one call and adds another: every call in the history has its result, in order', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'say', args: { text: 'a' }, callId: 'c1' },
          { name: 'say', args: { text: 'b' }, callId: 'c2' },
        ],
      },
      'done',
    ]);
    const swap: AgentMiddleware = {
      name: 'swap',
      beforeToolExecution: map((ctx) => ctx.with({ toolCalls: [ctx.toolCalls[1], { type: 'tool-call', callId: 'c3', name: 'say', args: { text: 'c' } }] })),
    };
    const result = await createAgent({ model, tools: [say], middleware: [swap] }).invoke('go');
    const ids = (type: string) => result.messages.flatMap((m) => m.content.filter((p) => p.type === type).map((p) => (p as { callId: string }).callId));
    expect(ids('tool-call')).toEqual(['c1', 'c2', 'c3']);
    expect(ids('tool-result')).toEqual(['c1', 'c2', 'c3']);
    expect(result.messages.find((m) => m.role === 'tool')!.content.map((p) => (p as { result: unknown }).result)).toEqual([SKIPPED_RESULT, 'b', 'c']);
  });

  it('no tool starts once the run is left or cancelled on a tool-result', async () => {
    const ran: string[] = [];
    const model = () =>
      scriptedModel([
        {
          toolCalls: [
            { name: 'del', args: { f: 'a' } },
            { name: 'del', args: { f: 'b' } },
          ],
        },
        'done',
      ]);
    await collect(
      createAgent({ model: model(), tools: [deleter(ran)], toolExecution: 'sequential' })
        .run('go')
        .pipe(takeWhile((e) => e.type !== 'tool-result')),
    );
    expect(ran).toEqual(['a']);
    ran.length = 0;
    const controller = new AbortController();
    const labelsSeen: string[] = [];
    createAgent({ model: model(), tools: [deleter(ran)], toolExecution: 'sequential' })
      .run('go', { signal: controller.signal })
      .subscribe((e) => (labelsSeen.push(eventLabel(e)), e.type === 'tool-result' && controller.abort()));
    expect(ran).toEqual(['a']);
    expect(labelsSeen.at(-1)).toBe('run-end:cancelled');
  });

  it('a run cancelled on iteration-end keeps that iteration in its session', () => {
    const session = createSession();
    const controller = new AbortController();
    const model = scriptedModel([{ toolCalls: [{ name: 'say', args: { text: 'a' } }] }, 'done']);
    createAgent({ model, tools: [say] })
      .run('go', { session, signal: controller.signal })
      .subscribe((e) => e.type === 'iteration-end' && controller.abort());
    expect(session.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
  });

  it('a consumer that leaves on run-start leaves the session free', async () => {
    const session = createSession();
    const agent = createAgent({ model: scriptedModel(['a', 'b']) });
    await firstValueFrom(agent.run('hi', { session }));
    expect((await collect(agent.run('again', { session }))).at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'a' });
  });

  it('ctx.emit refuses run-start and run-end, which are the runtime’s own', async () => {
    const mw: AgentMiddleware = {
      name: 'x',
      beforeIteration: tap((ctx) => ctx.emit({ type: 'run-end', reason: 'completed', text: '', usage: { inputTokens: 0, outputTokens: 0 } } as never)),
    };
    const events = await collect(createAgent({ model: scriptedModel(['a']), middleware: [mw] }).run('go'));
    expect(events.filter((e) => e.type === 'run-end')).toHaveLength(1);
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'middleware',
      middleware: 'x',
      error: { message: "emit: 'run-end' is sent by the runtime only" },
    });
    const starter: AgentMiddleware = { name: 'y', beforeIteration: tap((ctx) => ctx.emit({ type: 'run-start' } as never)) };
    const again = await collect(createAgent({ model: scriptedModel(['a']), middleware: [starter] }).run('go'));
    expect(again.filter((e) => e.type === 'run-start')).toHaveLength(1);
    expect(eventsOfType(again, 'error')[0]).toMatchObject({ middleware: 'y', error: { message: "emit: 'run-start' is sent by the runtime only" } });
  });

  it('a phase hook that emits something other than a context fails the run naming the middleware', async () => {
    const forgetful: AgentMiddleware = { name: 'forgetful', beforeIteration: map(() => undefined) as never };
    const events = await collect(createAgent({ model: scriptedModel(['done']), middleware: [forgetful] }).run('go'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'middleware',
      middleware: 'forgetful',
      error: { message: "Middleware 'forgetful' beforeIteration emitted undefined, not a context" },
    });
    const direct: AgentMiddleware = { name: 'direct', beforeIteration: mapContext(() => undefined) as never };
    const viaMapContext = await collect(createAgent({ model: scriptedModel(['done']), middleware: [direct] }).run('go'));
    expect(eventsOfType(viaMapContext, 'error')[0]).toMatchObject({
      middleware: 'direct',
      error: { message: "Middleware 'direct' beforeIteration emitted undefined, not a context" },
    });
    const spread: AgentMiddleware = { name: 'spread', afterIteration: (s) => s.pipe(map((ctx) => ({ ...ctx }))) as never };
    const again = await collect(createAgent({ model: scriptedModel(['done']), middleware: [spread] }).run('go'));
    expect(eventsOfType(again, 'error')[0].error.message).toBe("Middleware 'spread' afterIteration emitted an instance of Object, not a context");
  });

  it('a plain retry() in wrapModel: the answer is the successful attempt’s alone', async () => {
    const model = scriptedModel([{ text: ['Hel', 'lo'], error: new Error('cut'), errorAfter: 1 }, { text: ['Hel', 'lo'] }]);
    const events = await collect(createAgent({ model, middleware: [{ name: 'r', wrapModel: () => retry(1) }] }).run('go'));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Hello' });
  });

  it('a wrapper that subscribes to the model again after a finished answer (repeat): the answer is the last attempt’s alone', async () => {
    const model = scriptedModel(['first answer', 'second answer']);
    const events = await collect(createAgent({ model, middleware: [{ name: 'again', wrapModel: () => repeat(2) }] }).run('go'));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'second answer' });
  });

  it('arguments whose schema throws, and a tool that throws an unserialisable value, are error results; the loop goes on', async () => {
    const parsing = defineTool({
      name: 'j',
      description: 'Parses',
      parameters: z.object({ json: z.string().transform((s) => JSON.parse(s)) }),
      execute: ({ json }) => json,
    });
    const circular = defineTool({
      name: 'bad',
      description: 'Throws',
      parameters: z.object({}),
      execute: () => {
        const o: Record<string, unknown> = { code: 'E_FAIL' };
        o.self = o;
        // eslint-disable-next-line @typescript-eslint/only-throw-error -- the case under test: a tool throws a value that is not an Error
        throw o;
      },
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'j', args: { json: 'not json' } },
          { name: 'bad', args: {} },
        ],
      },
      'done',
    ]);
    const events = await collect(createAgent({ model, tools: [parsing, circular] }).run('go'));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
    const results = eventsOfType(events, 'tool-result');
    expect(results[0]).toMatchObject({ name: 'j', isError: true, result: expect.stringMatching(/^Invalid arguments for tool 'j': .*JSON/) });
    expect(results[1]).toMatchObject({ name: 'bad', isError: true, result: 'Error: [object Object]' });
  });

  it('a signal that is not an AbortSignal is an error event naming it, then run-end', () => {
    const labelsSeen: string[] = [];
    let failure: unknown;
    createAgent({ model: scriptedModel(['a']) })
      .run('go', { signal: new AbortController() as never })
      .subscribe({ next: (e) => labelsSeen.push(eventLabel(e)), error: (e) => (failure = e) });
    expect(failure).toBeUndefined();
    expect(labelsSeen).toEqual(['run-start', 'error:run', 'run-end:error']);
  });

  it('a cancel while onError hooks run tears them down and reports the error as it was', () => {
    const ts = new TestScheduler((a, e) => expect(a).toEqual(e));
    const continuedAt: number[] = [];
    ts.run(({ expectObservable, cold, flush }) => {
      const model = scriptedModel([{ text: ['a'], error: new Error('boom'), delay: 10 }], { scheduler: ts });
      const slow: AgentMiddleware = {
        name: 'slowOnError',
        onError: (s) =>
          s.pipe(
            delay(100, ts),
            tap(() => continuedAt.push(ts.now())),
          ),
      };
      const controller = new AbortController();
      cold('50ms x').subscribe(() => controller.abort());
      expectObservable(
        createAgent({ model, scheduler: ts, middleware: [slow] })
          .run('go', { signal: controller.signal })
          .pipe(map(eventLabel)),
      ).toBe('(ab) 6ms c 39ms (de|)', { a: 'run-start', b: 'iteration-start', c: 'text-delta:a', d: 'error:model', e: 'run-end:error' });
      flush();
    });
    expect(continuedAt).toEqual([]);
  });
});

describe('more edges', () => {
  it('a session whose id getter throws is an error event, then run-end; invoke rejects with that error', async () => {
    const agent = createAgent({ model: scriptedModel(['hi', 'hi']) });
    const real = createSession({ id: 's' });
    const session = Object.create(real, {
      id: {
        get(): string {
          throw new Error('id getter');
        },
      },
    });
    const events = await lastValueFrom(agent.run('x', { session }).pipe(toArray()));
    expect(events.map(eventLabel)).toEqual(['run-start', 'error:run', 'run-end:error']);
    expect(events[1]).toMatchObject({ error: { message: 'id getter' } });
    expect(events[0]).not.toHaveProperty('sessionId');
    await expect(agent.invoke('x', { session })).rejects.toThrow('id getter');
  });

  it('a null session is bad input: an error event naming it, then run-end', async () => {
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['hi']) })
        .run('x', { session: null as never })
        .pipe(toArray()),
    );
    expect(events.map(eventLabel)).toEqual(['run-start', 'error:run', 'run-end:error']);
    expect(events[1]).toMatchObject({ error: { name: 'TypeError', message: "run: 'session' must be a Session made with createSession()" } });
  });

  it('a cancel while an onError hook waits for an answer expires that request, then reports the error', () => {
    const asking: AgentMiddleware = {
      name: 'asking',
      onError: switchMap((ctx) => ctx.request({ type: 'retry-request', requestId: 'q1' } as never).pipe(map(() => ctx))),
    };
    const model = () => {
      throw new Error('model down');
    };
    const handle = createAgent({ model, middleware: [asking] }).start('hi');
    const seen: string[] = [];
    handle.events$.subscribe((e) => seen.push(e.type));
    handle.cancel();
    expect(seen).toEqual(['run-start', 'iteration-start', 'retry-request', 'request-expired', 'error', 'run-end']);
    expect(handle.respond({ type: 'retry-response', requestId: 'q1' } as never)).toBe(false);
  });

  it("start()'s respond() says true for an answer taken, also when the run at once asks the same id again", () => {
    const goOn: AgentMiddleware = {
      name: 'goOn',
      beforeIteration: switchMap((ctx) => ctx.request({ type: 'go-on-request', requestId: 'go-on' } as never).pipe(map(() => ctx))),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'noop', args: {}, callId: 'c1' }] }, 'done']);
    const noop = defineTool({ name: 'noop', description: 'Does nothing', parameters: z.object({}), execute: () => 'ok' });
    const handle = createAgent({ model, tools: [noop], middleware: [goOn] }).start('hi');
    const asked: string[] = [];
    handle.events$.subscribe((e) => (e.type as string) === 'go-on-request' && asked.push(e.type));
    const answer = () => handle.respond({ type: 'go-on-response', requestId: 'go-on' } as never);
    expect([answer(), asked.length]).toEqual([true, 2]); // taken; the next iteration asked again at once
    expect([answer(), asked.length]).toEqual([true, 2]); // taken; the run ended
    expect(answer()).toBe(false); // nothing waits any more
  });

  it('a fallback through ctx.call() after a failure keeps only the fallback’s answer', async () => {
    const primary = () =>
      concat(
        of<ModelUpdate>({ type: 'text-delta', text: 'partial ' }),
        throwError(() => new Error('cut')),
      );
    const backup = () => of<ModelUpdate[]>({ type: 'text-delta', text: 'backup' }, { type: 'finish', reason: 'stop' });
    const fallback: AgentMiddleware = { name: 'fb', wrapModel: (ctx) => (source) => source.pipe(catchError(() => ctx.call(undefined, backup))) };
    expect((await createAgent({ model: primary, middleware: [fallback] }).invoke('hi')).text).toBe('backup');
  });

  it('a hand-written fallback that calls another model itself (no ctx.call()) and emits model-fallback drops the failed attempt’s partial text', async () => {
    const primary = () =>
      concat(
        of<ModelUpdate>({ type: 'text-delta', text: 'partial ' }),
        throwError(() => new Error('cut')),
      );
    const backup = () => of<ModelUpdate[]>({ type: 'text-delta', text: 'backup' }, { type: 'finish', reason: 'stop' });
    const fallback: AgentMiddleware = {
      name: 'fb',
      wrapModel: (ctx) => (source) =>
        source.pipe(
          catchError((error: Error) => {
            ctx.emit({ type: 'model-fallback', from: 0, to: 1, error: { name: error.name, message: error.message } });
            return backup();
          }),
        ),
    };
    const agent = createAgent({ model: primary, middleware: [fallback] });
    const events = await collect(agent.run('hi'));
    // The partial text was streamed as it came; the answer and the messages keep only the backup's.
    expect(labels(events).filter((l) => l.startsWith('text-delta') || l.startsWith('model-fallback'))).toEqual([
      'text-delta:partial ',
      'model-fallback',
      'text-delta:backup',
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'backup' });
    const result = await agent.invoke('hi');
    expect(result.messages.at(-1)).toEqual({ id: expect.any(String), role: 'assistant', content: [{ type: 'text', text: 'backup' }] });
  });

  it("a wrapper's side request through ctx.call() leaves the answer already streamed alone", async () => {
    const judge = () => of<ModelUpdate[]>({ type: 'text-delta', text: 'fine' }, { type: 'finish', reason: 'stop' });
    const audit: AgentMiddleware = { name: 'audit', wrapModel: (ctx) => (source) => concat(source, ctx.call(ctx.request, judge).pipe(ignoreElements())) };
    const inner: AgentMiddleware = { name: 'inner', wrapModel: () => (source) => source };
    expect((await createAgent({ model: scriptedModel(['The answer is 42.']), middleware: [audit, inner] }).invoke('q')).text).toBe('The answer is 42.');
  });
});

describe('usage at the end of a run', () => {
  const t = defineTool({ name: 't', description: 'T', parameters: z.object({}), execute: () => 'ok' });
  const paidCall = { toolCalls: [{ name: 't', args: {} }], usage: { inputTokens: 10, outputTokens: 5 } };

  it('counts a model call whose iteration failed afterwards', async () => {
    const boom: AgentMiddleware = {
      name: 'boom',
      beforeToolExecution: map(() => {
        throw new Error('x');
      }),
    };
    const events = await collect(createAgent({ model: scriptedModel([paidCall]), tools: [t], middleware: [boom] }).run('go'));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error', usage: { inputTokens: 10, outputTokens: 5 } });
  });

  it('counts a model call whose iteration was cancelled in its tools, once', async () => {
    const controller = new AbortController();
    const slow = defineTool({ name: 't', description: 'T', parameters: z.object({}), execute: () => new Promise<string>(() => undefined) });
    const model = scriptedModel([{ text: 'a', usage: { inputTokens: 1, outputTokens: 1 } }, paidCall]);
    const agent = createAgent({ model, tools: [slow] });
    await agent.invoke('first');
    const running = agent.invoke('go', { signal: controller.signal });
    controller.abort();
    expect(await running).toMatchObject({ reason: 'cancelled', usage: { inputTokens: 10, outputTokens: 5 } });
  });
});

describe('definitions are checked', () => {
  it('createAgent names a malformed option', () => {
    const model = scriptedModel(['a']);
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ idGenerator: 'x' }, /^createAgent: 'idGenerator' must be a function/],
      [{ instructions: 42 }, /^createAgent: 'instructions' must be a string/],
      [{ toolChoice: { name: 'no_such_tool' } }, /^createAgent: 'toolChoice' must be 'auto', 'none', 'required' or \{ name \} of a tool/],
      [{ settings: 'x' }, /^createAgent: 'settings' must be an object/],
      [{ scheduler: {} }, /^createAgent: 'scheduler' must be an rxjs SchedulerLike/],
      [{ name: 5 }, /^createAgent: 'name' must be a string/],
    ];
    for (const [options, message] of cases) expect(() => createAgent({ model, ...options })).toThrow(message);
    expect(() => createAgent({ model, tools: [echo], toolChoice: { name: 'echo' } })).not.toThrow();
  });
});

describe('a run ends with one run-end whatever its parts do', () => {
  /** A tool that never ends and whose teardown throws. */
  const sticky = signalTool(
    'sticky',
    () =>
      new Observable<string>(() => () => {
        throw new Error('teardown failed');
      }),
  ).tool;

  it('a consumer that cancels on the error event sees that error once', async () => {
    const handle = createAgent({ model: scriptedModel([{ error: new Error('model down'), delay: 1 }]) }).start('hi');
    const seen: AgentEvent[] = [];
    handle.events$.subscribe((event) => {
      seen.push(event);
      if (event.type === 'error') handle.cancel();
    });
    await lastValueFrom(handle.events$.pipe(toArray()));
    expect(seen.map(eventLabel)).toEqual(['run-start', 'iteration-start', 'error:model', 'run-end:error']);
  });

  it('a tool whose teardown throws during a cancel: cancel() does not throw, and the run ends with that error', () => {
    const handle = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'sticky', args: {} }] }]), tools: [sticky] }).start('go');
    const events: AgentEvent[] = [];
    handle.events$.subscribe((event) => events.push(event));
    expect(() => handle.cancel()).not.toThrow();
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:run', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toContain('teardown failed');
  });

  it('a model stream whose teardown throws when it completes fails the call (source model), not the run’s end', async () => {
    const model: ModelClient = () =>
      new Observable<ModelUpdate>((subscriber) => {
        subscriber.next({ type: 'text-delta', text: 'hi' });
        subscriber.next({ type: 'finish', reason: 'stop' });
        setTimeout(() => subscriber.complete(), 1);
        return () => {
          throw new Error('teardown failed');
        };
      });
    const events = await lastValueFrom(createAgent({ model }).run('go').pipe(toArray()));
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:model', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toContain('teardown failed');
  });

  it('a tool whose teardown throws when the consumer unsubscribes: unsubscribe() throws it (as rxjs does), after the session is released', () => {
    const session = createSession({ id: 'u' });
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'sticky', args: {} }] }, 'again']), tools: [sticky] });
    const subscription = agent.run('go', { session }).subscribe();
    expect(() => subscription.unsubscribe()).toThrow(/teardown failed/);
    // Released all the same: a run that does not wait gets the session.
    const next: string[] = [];
    createAgent({ model: scriptedModel(['ok']) })
      .run('next', { session, sessionWaitMs: 0 })
      .subscribe((e) => next.push(eventLabel(e)));
    expect(next).toEqual(['run-start', 'iteration-start', 'text-delta:ok', 'iteration-end', 'run-end:completed']);
  });

  it('an id generator that throws, and run options that are not an object, end the run with error and run-end', async () => {
    const failingIds = createAgent({
      model: scriptedModel(['hi']),
      idGenerator: () => {
        throw new Error('no ids');
      },
    });
    const events = await lastValueFrom(failingIds.run('hi').pipe(toArray()));
    expect(events.map(eventLabel)).toEqual(['run-start', 'error:run', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe('no ids');
    await expect(createAgent({ model: scriptedModel(['hi']) }).invoke('hi', null as never)).rejects.toThrow('run: options must be an object, got null');
  });

  it('an id generator that gives no string, or an empty runId, ends the run with error and run-end naming it', async () => {
    const numbered = createAgent({ model: scriptedModel(['hi']), idGenerator: (() => 42) as never });
    const events = await lastValueFrom(numbered.run('hi').pipe(toArray()));
    expect(events.map(eventLabel)).toEqual(['run-start', 'error:run', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe('run: a run id must be a non-empty string, got 42');
    await expect(createAgent({ model: scriptedModel(['hi']) }).invoke('hi', { runId: '' })).rejects.toThrow('run: a run id must be a non-empty string, got ""');
  });

  it("'responses' that is not an Observable is named, not blamed on the middleware that asks", async () => {
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['hi']) })
        .run('go', { responses: {} as never })
        .pipe(toArray()),
    );
    expect(events.map(eventLabel)).toEqual(['run-start', 'error:run', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe("run: 'responses' must be an Observable of responses (a Subject, say), got {}");
  });

  it('a model client that returns a Promise instead of an Observable is told so', async () => {
    const model = (async () => ({})) as unknown as ModelClient;
    const events = await lastValueFrom(createAgent({ model }).run('go').pipe(toArray()));
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:model', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe(
      'The model client must return an Observable of model updates (see fromAsyncIterable), got a Promise',
    );
  });

  it('a model client that returns something else (an array of updates) is told what it returned', async () => {
    const model = (() => [{ type: 'finish', reason: 'stop' }]) as unknown as ModelClient;
    const events = await lastValueFrom(createAgent({ model }).run('go').pipe(toArray()));
    expect(eventsOfType(events, 'error')[0].error.message).toBe(
      'The model client must return an Observable of model updates (see fromAsyncIterable), got [{"type":"finish","reason":"stop"}]',
    );
  });
});
