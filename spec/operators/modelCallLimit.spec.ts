import { Observable, filter, map, merge } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, createSession, defineTool, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { eventLabel, scriptedModel, collectEvents } from '../../src/testing/index';
import { ModelCallLimitExceededError, modelCallLimit } from '../../operators/modelCallLimit';

/** Runs a synchronous run to its end (scripted model without delays, plain tools). */
const collect = collectEvents;
const runEnd = (events: AgentEvent[]) => events.at(-1) as Extract<AgentEvent, { type: 'run-end' }>;

const echo = defineTool({ name: 'echo', description: 'Echo', parameters: z.object({ i: z.number() }), execute: ({ i }) => i });
/** A model that calls `echo` forever. */
const looping = () => scriptedModel([{ toolCalls: [{ name: 'echo', args: { i: 1 } }] }], { loop: true });

describe('modelCallLimit', () => {
  it('throws at construction without a limit, with a bad limit or a bad exitBehavior', () => {
    expect(() => modelCallLimit()).toThrow(new TypeError("modelCallLimit: give at least one of 'threadLimit' and 'runLimit'"));
    expect(() => modelCallLimit({ runLimit: -1 })).toThrow(TypeError);
    expect(() => modelCallLimit({ threadLimit: 1.5 })).toThrow(/'threadLimit' must be a non-negative integer/);
    expect(() => modelCallLimit({ runLimit: 1, exitBehavior: 'continue' as 'end' })).toThrow(/'exitBehavior' must be 'end' or 'error'/);
  });

  it("allows exactly runLimit calls, then terminates the run (default exitBehavior 'end')", () => {
    const model = looping();
    const agent = createAgent({ model, tools: [echo], middleware: [modelCallLimit({ runLimit: 3 })] });
    const events = collect(agent.run('go', { runId: 'r' }));
    expect(model.calls).toBe(3);
    const text = 'Model call limits exceeded: run level call limit reached with 3 model calls';
    expect(runEnd(events)).toEqual({ type: 'run-end', runId: 'r', reason: 'terminated', text, terminationReason: text, usage: expect.anything() });
    // The fourth iteration starts, but its model call is blocked: no tool-call in it.
    expect(events.map(eventLabel).slice(-3)).toEqual(['iteration-start', 'iteration-end', 'run-end:terminated']);
  });

  it('a run that needs exactly runLimit calls completes', () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { i: 1 } }] }, 'Done']);
    const agent = createAgent({ model, tools: [echo], middleware: [modelCallLimit({ runLimit: 2 })] });
    expect(runEnd(collect(agent.run('go')))).toMatchObject({ reason: 'completed', text: 'Done' });
  });

  it("runLimit 0 blocks the first call; 'error' fails the run with ModelCallLimitExceededError", () => {
    const model = looping();
    const agent = createAgent({ model, tools: [echo], middleware: [modelCallLimit({ runLimit: 0, exitBehavior: 'error' })] });
    const events = collect(agent.run('go', { runId: 'r' }));
    expect(model.calls).toBe(0);
    expect(events.find((e) => e.type === 'error')).toEqual({
      type: 'error',
      runId: 'r',
      source: 'middleware',
      middleware: 'modelCallLimit',
      hook: 'beforeIteration',
      error: { name: 'ModelCallLimitExceededError', message: 'Model call limits exceeded: run level call limit reached with 0 model calls' },
    });
    expect(runEnd(events).reason).toBe('error');
  });

  it('invoke rejects with the ModelCallLimitExceededError', async () => {
    const agent = createAgent({ model: looping(), tools: [echo], middleware: [modelCallLimit({ runLimit: 2, exitBehavior: 'error' })] });
    const error = await agent.invoke('go').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelCallLimitExceededError);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ scope: 'run', count: 2, limit: 2, message: 'Model call limits exceeded: run level call limit reached with 2 model calls' });
  });

  it('counts the thread across runs of one session, and checks the thread limit first', () => {
    const session = createSession();
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { i: 1 } }] }, 'First', { toolCalls: [{ name: 'echo', args: { i: 2 } }] }, 'never']);
    // Both limits reached at once in the second run: the thread limit is reported.
    const agent = createAgent({ model, tools: [echo], middleware: [modelCallLimit({ threadLimit: 3, runLimit: 1 })] });
    const agent2 = createAgent({ model, tools: [echo], middleware: [modelCallLimit({ threadLimit: 3, runLimit: 2 })] });
    expect(runEnd(collect(agent2.run('one', { session }))).text).toBe('First'); // 2 calls
    const second = runEnd(collect(agent.run('two', { session })));
    expect(model.calls).toBe(3);
    expect(second).toMatchObject({ reason: 'terminated', terminationReason: 'Model call limits exceeded: thread level call limit reached with 3 model calls' });
    expect(session.snapshot().state['rx-agent.modelCallLimit.threadCount']).toEqual({ version: 1, value: { count: 3 } });
    // The run count is not saved with the session.
    expect(session.snapshot().state['rx-agent.modelCallLimit.runCount']).toBeUndefined();
  });

  it('the run limit starts again for every run of a session', () => {
    const session = createSession();
    const model = scriptedModel(['a', 'b', 'c']);
    const agent = createAgent({ model, middleware: [modelCallLimit({ runLimit: 1 })] });
    for (const text of ['a', 'b', 'c']) expect(runEnd(collect(agent.run('x', { session })))).toMatchObject({ reason: 'completed', text });
  });

  it('without a session the thread limit lives for the run', () => {
    const agent = createAgent({ model: scriptedModel(['a', 'b']), middleware: [modelCallLimit({ threadLimit: 1 })] });
    expect(runEnd(collect(agent.run('x'))).text).toBe('a');
    expect(runEnd(collect(agent.run('x'))).text).toBe('b');
  });

  it('a model call skipped by another middleware does not count', () => {
    const skipFirst: AgentMiddleware = {
      name: 'skipFirst',
      beforeIteration: (source) =>
        new Observable((s) =>
          source.subscribe((ctx) => {
            s.next(
              ctx.iteration === 0 ? ctx.skipModelCall({ role: 'assistant', content: [{ type: 'tool-call', callId: 'k', name: 'echo', args: { i: 0 } }] }) : ctx,
            );
            s.complete();
          }),
        ),
    };
    const model = scriptedModel(['Done']);
    const agent = createAgent({ model, tools: [echo], middleware: [modelCallLimit({ runLimit: 1 }), skipFirst] });
    expect(runEnd(collect(agent.run('x')))).toMatchObject({ reason: 'completed', text: 'Done' });
  });

  it('keeps two concurrent runs of one instance apart', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const limit = modelCallLimit({ runLimit: 2 });
      // One agent, one middleware instance; each model call takes 3 virtual ms.
      const agent = createAgent({
        model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { i: 1 } }], delay: 1 }], { scheduler: testScheduler, loop: true }),
        tools: [echo],
        middleware: [limit],
        scheduler: testScheduler,
      });
      const ends = merge(agent.run('a', { runId: 'a' }), agent.run('b', { runId: 'b' })).pipe(
        filter((e) => e.type === 'run-end' || (e.type === 'tool-call' && e.runId === 'a')),
        map((e) => (e.type === 'run-end' ? `${e.runId}:${e.terminationReason}` : `${e.runId}:call`)),
      );
      const reason = 'Model call limits exceeded: run level call limit reached with 2 model calls';
      // Run a's calls at 3 and 6 ms; both runs are stopped at 6 ms, after 2 calls each.
      expectObservable(ends).toBe('---a--(abc|)', { a: 'a:call', b: `a:${reason}`, c: `b:${reason}` });
    });
  });
});

describe('modelCallLimit instances', () => {
  it('a thread limit and a run limit as two instances count each call once', () => {
    const model = looping();
    const session = createSession();
    const agent = createAgent({ model, tools: [echo], middleware: [modelCallLimit({ threadLimit: 50 }), modelCallLimit({ runLimit: 4 })] });
    const events = collectEvents(agent.run('go', { session }));
    expect(model.calls).toBe(4);
    expect(events.at(-1)).toMatchObject({ terminationReason: 'Model call limits exceeded: run level call limit reached with 4 model calls' });
    expect(session.snapshot().state['rx-agent.modelCallLimit.threadCount']).toEqual({ version: 1, value: { count: 4 } });
  });
});
