import { Observable, Subject, asyncScheduler, filter, lastValueFrom, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentResponse, type ModelRequest } from '../../src/index';
import { eventLabel, eventLabels, scriptedModel, eventsOfType } from '../../src/testing/index';
import { dropToolInput, withoutToolInput } from '../support/withoutToolInput';
import { CONTINUATION_DENIED_MESSAGE, continuationPermission } from '../../operators/continuationPermission';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const ids = () => {
  let n = 0;
  return (prefix: string) => `${prefix}_${++n}`;
};

const echo = defineTool({ name: 'echo', description: 'Echoes', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });
/** A model that calls `echo` forever. */
const looping = (options: { scheduler?: TestScheduler } = {}) =>
  scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'x' } }] }], { loop: true, ...options });
/** A model that calls `echo` on its first `n` calls, then answers `done`. */
const toolsThenDone = (n: number) =>
  scriptedModel([(_r: ModelRequest, call: number) => (call < n ? { toolCalls: [{ name: 'echo', args: { text: 'x' } }] } : 'done')], { loop: true });

/** Starts a run that answers every continuation request with `answer(request)`. */
function answering(
  agent: ReturnType<typeof createAgent>,
  answer: (request: Extract<AgentEvent, { type: 'continuation-request' }>) => Omit<AgentResponse, 'type' | 'requestId'> | undefined,
) {
  const handle = agent.start('go', { runId: 'r' });
  handle.events$.pipe(filter((e): e is Extract<AgentEvent, { type: 'continuation-request' }> => e.type === 'continuation-request')).subscribe((request) => {
    const response = answer(request);
    if (response) handle.respond({ type: 'continuation-response', requestId: request.requestId, ...response });
  });
  return collect(handle.events$);
}

describe('continuationPermission', () => {
  it('by default asks after 20 model calls, with the exact request event; denied: no call, the run terminates', async () => {
    const model = looping();
    const agent = createAgent({ model, tools: [echo], maxIterations: Infinity, middleware: [continuationPermission()], idGenerator: ids() });
    const events = await answering(agent, () => ({ approved: false }));
    expect(model.calls).toBe(20);
    expect(eventsOfType(events, 'continuation-request')).toEqual([{ type: 'continuation-request', runId: 'r', requestId: 'req_1', iteration: 20, limit: 20 }]);
    expect(dropToolInput(events).map(eventLabel).slice(-4)).toEqual(['iteration-start', 'continuation-request', 'iteration-end', 'run-end:terminated']);
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', text: CONTINUATION_DENIED_MESSAGE, terminationReason: CONTINUATION_DENIED_MESSAGE });
    expect(CONTINUATION_DENIED_MESSAGE).toBe('Execution terminated: maximum iteration limit reached.');
  });

  it('reads answers by own properties: one that only inherits approved (a polluted prototype) terminates the run', async () => {
    const model = looping();
    const agent = createAgent({ model, tools: [echo], maxIterations: Infinity, middleware: [continuationPermission({ maxIterations: 1 })] });
    const handle = agent.start('go', { runId: 'r' });
    handle.events$.pipe(filter((e): e is Extract<AgentEvent, { type: 'continuation-request' }> => e.type === 'continuation-request')).subscribe((request) => {
      const inherited = Object.assign(Object.create({ approved: true, extension: 5 }) as object, {
        type: 'continuation-response',
        requestId: request.requestId,
      });
      // A second question (were the first approved) is denied, so that the run ends either way.
      handle.respond(request.iteration === 1 ? (inherited as AgentResponse) : { type: 'continuation-response', requestId: request.requestId, approved: false });
    });
    const events = await collect(handle.events$);
    expect(model.calls).toBe(1);
    expect(eventsOfType(events, 'continuation-request')).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', terminationReason: CONTINUATION_DENIED_MESSAGE });
  });

  it('does not ask when the turn ends with exactly `maxIterations` model calls', async () => {
    const model = toolsThenDone(2); // calls 0 and 1 use tools, call 2 answers: 3 calls
    const agent = createAgent({ model, tools: [echo], maxIterations: Infinity, middleware: [continuationPermission({ maxIterations: 3 })] });
    const events = await collect(agent.run('go'));
    expect(model.calls).toBe(3);
    expect(eventsOfType(events, 'continuation-request')).toEqual([]);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'done' });
  });

  it('asks before the model call one past the limit (iteration i = limit)', async () => {
    const model = toolsThenDone(3); // needs 4 calls
    const agent = createAgent({ model, tools: [echo], maxIterations: Infinity, middleware: [continuationPermission({ maxIterations: 3 })] });
    const events = await answering(agent, () => ({ approved: false }));
    expect(model.calls).toBe(3);
    expect(eventsOfType(events, 'continuation-request')).toMatchObject([{ iteration: 3, limit: 3 }]);
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', terminationReason: CONTINUATION_DENIED_MESSAGE });
  });

  it('approved: extends by `extensionAmount` (default 3), then asks again at the new limit', async () => {
    const model = looping();
    const agent = createAgent({ model, tools: [echo], maxIterations: Infinity, middleware: [continuationPermission({ maxIterations: 2 })] });
    let asked = 0;
    const events = await answering(agent, () => ({ approved: ++asked === 1 }));
    expect(eventsOfType(events, 'continuation-request').map((e) => [e.iteration, e.limit])).toEqual([
      [2, 2],
      [5, 5],
    ]);
    expect(model.calls).toBe(5);
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', terminationReason: CONTINUATION_DENIED_MESSAGE });
  });

  it("approved with an `extension`: extends by the response's amount; a non-positive one falls back to extensionAmount", async () => {
    const model = looping();
    const agent = createAgent({
      model,
      tools: [echo],
      maxIterations: Infinity,
      middleware: [continuationPermission({ maxIterations: 1, extensionAmount: 2 })],
    });
    const answers = [{ approved: true, extension: 4 }, { approved: true, extension: 0 }, { approved: false }];
    const events = await answering(agent, () => answers.shift());
    expect(eventsOfType(events, 'continuation-request').map((e) => e.limit)).toEqual([1, 5, 7]);
    expect(model.calls).toBe(7);
  });

  it("the agent's own maxIterations stays the hard ceiling", async () => {
    const model = looping();
    const agent = createAgent({ model, tools: [echo], maxIterations: 4, middleware: [continuationPermission({ maxIterations: 3, extensionAmount: 10 })] });
    const events = await answering(agent, () => ({ approved: true }));
    expect(model.calls).toBe(4);
    expect(events.at(-1)).toMatchObject({ reason: 'max-iterations' });
  });

  it('keeps the limit per run: two concurrent runs on one instance do not share it', async () => {
    const middleware = continuationPermission({ maxIterations: 1, extensionAmount: 1 });
    const responses = new Subject<AgentResponse>();
    const agent = createAgent({ model: looping(), tools: [echo], maxIterations: Infinity, middleware: [middleware] });
    const a = agent.start('a', { runId: 'a', responses });
    const b = agent.start('b', { runId: 'b', responses });
    const seen: Array<[string, number]> = [];
    const answer = (run: typeof a, approvals: number) => {
      let n = 0;
      run.events$.subscribe((e) => {
        if (e.type === 'continuation-request') {
          seen.push([e.runId, e.limit]);
          run.respond({ type: 'continuation-response', requestId: e.requestId, approved: ++n <= approvals });
        }
      });
    };
    answer(a, 2);
    answer(b, 0);
    const [eventsA, eventsB] = await Promise.all([collect(a.events$), collect(b.events$)]);
    expect(seen.filter(([run]) => run === 'a').map(([, limit]) => limit)).toEqual([1, 2, 3]);
    expect(seen.filter(([run]) => run === 'b').map(([, limit]) => limit)).toEqual([1]);
    expect(eventsA.at(-1)).toMatchObject({ reason: 'terminated' });
    expect(eventsB.at(-1)).toMatchObject({ reason: 'terminated' });
    // A new run starts from maxIterations again.
    const again = await answering(agent, () => ({ approved: false }));
    expect(eventsOfType(again, 'continuation-request').map((e) => e.limit)).toEqual([1]);
  });

  it('ignores a response of another type for the same id (treated as a denial)', async () => {
    const agent = createAgent({
      model: looping(),
      tools: [echo],
      maxIterations: Infinity,
      middleware: [continuationPermission({ maxIterations: 1 })],
      idGenerator: ids(),
    });
    const events = await collect(
      agent.run('go', {
        runId: 'r',
        responses: new Observable<AgentResponse>((s) => void setTimeout(() => s.next({ type: 'permission-response', requestId: 'req_1', approved: true }))),
      }),
    );
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', terminationReason: CONTINUATION_DENIED_MESSAGE });
  });

  it.each([
    [{ maxIterations: 0 }, "'maxIterations' must be a positive integer, got 0"],
    [{ maxIterations: 1.5 }, "'maxIterations' must be a positive integer"],
    [{ extensionAmount: 0 }, "'extensionAmount' must be a positive integer, got 0"],
    [{ timeout: 0 }, 'timeout must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got 0'],
    [{ timeout: 'soon' }, 'timeout must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got "soon"'],
    [{ timeout: 2 ** 31 }, 'timeout must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got 2147483648'],
    [{ scheduler: {} }, 'scheduler must be an rxjs SchedulerLike, got {}'],
  ])('rejects bad options: %j', (options, message) => {
    expect(() => continuationPermission({ timeout: Infinity })).not.toThrow(); // no limit
    expect(() => continuationPermission(options as never)).toThrow(`continuationPermission: ${message}`);
    expect(() => continuationPermission(options as never)).toThrow(TypeError);
  });
});

describe('continuationPermission in virtual time', () => {
  const labels = {
    a: 'run-start',
    b: 'iteration-start',
    c: 'tool-call:echo',
    d: 'tool-result:echo',
    e: 'iteration-end',
    f: 'iteration-start',
    g: 'continuation-request',
  };
  const approved = { type: 'continuation-response', requestId: 'req_1', approved: true } as const;
  const denied = { type: 'continuation-response', requestId: 'req_1', approved: false } as const;
  let testScheduler: TestScheduler;
  beforeEach(() => {
    testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
  });
  const agentWith = (middleware = continuationPermission({ maxIterations: 1 })) =>
    createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'x' } }] }, 'done'], { scheduler: testScheduler }),
      tools: [echo],
      maxIterations: Infinity,
      middleware: [middleware],
      scheduler: testScheduler,
      idGenerator: ids(),
    });

  it('waits for the response: approved, the model call goes ahead when it arrives', () => {
    testScheduler.run(({ cold, expectObservable }) => {
      const events$ = agentWith().run('go', { runId: 'r', responses: cold('1s a', { a: approved }) });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcdefg) 991ms (hij|)', {
        ...labels,
        h: 'text-delta:done',
        i: 'iteration-end',
        j: 'run-end:completed',
      });
    });
  });

  it('waits for the response: denied, the run terminates when it arrives', () => {
    testScheduler.run(({ cold, expectObservable }) => {
      const events$ = agentWith().run('go', { runId: 'r', responses: cold('5s a', { a: denied }) });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcdefg) 4991ms (ij|)', {
        ...labels,
        i: 'iteration-end',
        j: 'run-end:terminated',
      });
    });
  });

  it('an answer 1 ms before the default timeout (120000 ms) is in time', () => {
    testScheduler.run(({ cold, expectObservable }) => {
      const events$ = agentWith().run('go', { runId: 'r', responses: cold('119999ms a', { a: approved }) });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcdefg) 119990ms (hij|)', {
        ...labels,
        h: 'text-delta:done',
        i: 'iteration-end',
        j: 'run-end:completed',
      });
    });
  });

  it('times out after 120000 ms by default: request-expired timeout, then terminated; a late answer is refused', () => {
    testScheduler.run(({ expectObservable }) => {
      const handle = agentWith().start('go', { runId: 'r' });
      const late: boolean[] = [];
      testScheduler.schedule(() => late.push(handle.respond(approved)), 120001);
      expectObservable(handle.events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcdefg) 119991ms (hij|)', {
        ...labels,
        h: 'request-expired:timeout',
        i: 'iteration-end',
        j: 'run-end:terminated',
      });
      testScheduler.flush();
      expect(late).toEqual([false]);
    });
  });

  it('a custom timeout, and the expired event has the request id and reason', () => {
    testScheduler.run(({ expectObservable }) => {
      const events$ = agentWith(continuationPermission({ maxIterations: 1, timeout: 50 })).run('go', { runId: 'r' });
      expectObservable(events$.pipe(filter((e) => e.type === 'request-expired' || e.type === 'run-end'))).toBe('50ms (ab|)', {
        a: { type: 'request-expired', runId: 'r', requestId: 'req_1', reason: 'timeout' },
        b: {
          type: 'run-end',
          runId: 'r',
          reason: 'terminated',
          text: CONTINUATION_DENIED_MESSAGE,
          usage: { inputTokens: 0, outputTokens: 0 },
          terminationReason: CONTINUATION_DENIED_MESSAGE,
        },
      });
    });
  });

  it('the `scheduler` option runs the timeout on another scheduler', () => {
    testScheduler.run(({ expectObservable }) => {
      // In run mode asyncScheduler is virtual too, but it is not the agent's scheduler.
      const events$ = agentWith(continuationPermission({ maxIterations: 1, timeout: 30, scheduler: asyncScheduler })).run('go', { runId: 'r' });
      expectObservable(events$.pipe(filter((e) => e.type === 'continuation-request' || e.type === 'request-expired' || e.type === 'run-end'))).toBe(
        'a 29ms (bc|)',
        {
          a: { type: 'continuation-request', runId: 'r', requestId: expect.stringMatching(/^req_/), iteration: 1, limit: 1 },
          b: expect.objectContaining({ type: 'request-expired', runId: 'r', reason: 'timeout' }),
          c: expect.objectContaining({ type: 'run-end', reason: 'terminated', terminationReason: CONTINUATION_DENIED_MESSAGE }),
        },
      );
    });
  });

  it('cancelled while waiting (handle.cancel()): request-expired cancelled, then run-end cancelled', () => {
    testScheduler.run(({ expectObservable }) => {
      const handle = agentWith().start('go', { runId: 'r' });
      testScheduler.schedule(() => handle.cancel(), 500);
      expectObservable(handle.events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcdefg) 491ms (hi|)', {
        ...labels,
        h: 'request-expired:cancelled',
        i: 'run-end:cancelled',
      });
    });
  });

  it('cancelled while waiting (AbortSignal): request-expired cancelled, then run-end cancelled', () => {
    testScheduler.run(({ expectObservable }) => {
      const controller = new AbortController();
      const events$ = agentWith().run('go', { runId: 'r', signal: controller.signal });
      testScheduler.schedule(() => controller.abort(), 2000);
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcdefg) 1991ms (hi|)', {
        ...labels,
        h: 'request-expired:cancelled',
        i: 'run-end:cancelled',
      });
    });
  });
});
