import { asyncScheduler, defer, filter, lastValueFrom, map, timer, toArray, type SchedulerLike } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, createSession, defineTool, textMessage, type AgentEvent, type AgentMiddleware, type ModelRequest } from '../../src/index';
import { eventLabel, eventLabels, scriptedModel, type ScriptedTurn, eventsOfType } from '../../src/testing/index';
import { dropToolInput, withoutToolInput } from '../support/withoutToolInput';
import { lifecycleEvents } from '../../operators/lifecycleEvents';

const ping = defineTool({ name: 'ping', description: 'Pings', parameters: z.object({}), execute: () => 'pong' });
const boom = defineTool({
  name: 'boom',
  description: 'Fails',
  parameters: z.object({}),
  execute: () => {
    throw new Error('kaput');
  },
});
const pings = (n: number): ScriptedTurn => ({ toolCalls: Array.from({ length: n }, () => ({ name: 'ping', args: {} })) });

function newScheduler() {
  return new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
}

async function runAll(turns: ScriptedTurn[], middleware: AgentMiddleware[] = [lifecycleEvents()], extra: { maxIterations?: number } = {}) {
  const agent = createAgent({ model: scriptedModel(turns), tools: [ping, boom], middleware, scheduler: newScheduler(), ...extra });
  return lastValueFrom(agent.run('hi', { runId: 'r' }).pipe(toArray()));
}

const ofType = eventsOfType;
const completed = (events: AgentEvent[]) => ofType(events, 'agent-run-completed');

describe('lifecycleEvents', () => {
  test('a completed run: started after run-start, completed just before run-end, durationMs on the scheduler clock', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable }) => {
      // Iteration 0: tool call streamed in 3 updates x 100 ms; iteration 1: text in 2 updates x 100 ms.
      // A new scripted model per subscription: each expectObservable below subscribes to its own run.
      const events$ = defer(() => {
        const model = scriptedModel(
          [
            { toolCalls: [{ name: 'ping', args: {} }], delay: 100 },
            { text: 'Done.', delay: 100 },
          ],
          { scheduler: testScheduler },
        );
        const agent = createAgent({ model, tools: [ping], middleware: [lifecycleEvents()], scheduler: testScheduler });
        return agent.run('hi', { runId: 'r' });
      });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abc) 295ms (degc) 94ms h 99ms (gij|)', {
        a: 'run-start',
        b: 'agent-run-started',
        c: 'iteration-start',
        d: 'tool-call:ping',
        e: 'tool-result:ping',
        g: 'iteration-end',
        h: 'text-delta:Done.',
        i: 'agent-run-completed',
        j: 'run-end:completed',
      });
      const lifecycle = events$.pipe(filter((e) => e.type === 'agent-run-started' || e.type === 'agent-run-completed'));
      expectObservable(lifecycle).toBe('a 499ms (b|)', {
        a: { type: 'agent-run-started', runId: 'r', inputMessageCount: 1 },
        b: { type: 'agent-run-completed', runId: 'r', durationMs: 500, iterations: 2, functionCalls: 1, success: true },
      });
    });
  });

  test('sessionId (with a session only) and inputMessageCount (the turn input, not the history)', async () => {
    const agent = createAgent({ model: scriptedModel(['one', 'two']), middleware: [lifecycleEvents()], scheduler: newScheduler() });
    const session = createSession({ id: 's1' });
    const first = await lastValueFrom(agent.run([textMessage('user', 'a'), textMessage('user', 'b')], { session, runId: 'r1' }).pipe(toArray()));
    const second = await lastValueFrom(agent.run('c', { session, runId: 'r2' }).pipe(toArray()));
    expect(ofType(first, 'agent-run-started')).toEqual([{ type: 'agent-run-started', runId: 'r1', sessionId: 's1', inputMessageCount: 2 }]);
    expect(ofType(second, 'agent-run-started')).toEqual([{ type: 'agent-run-started', runId: 'r2', sessionId: 's1', inputMessageCount: 1 }]);

    const noSession = await runAll(['ok']);
    expect(ofType(noSession, 'agent-run-started')).toEqual([{ type: 'agent-run-started', runId: 'r', inputMessageCount: 1 }]);
    expect('sessionId' in ofType(noSession, 'agent-run-started')[0]).toBe(false);
  });

  test('iterations and functionCalls count the whole turn', async () => {
    const events = await runAll([pings(2), pings(1), 'Done.']);
    expect(completed(events)).toEqual([{ type: 'agent-run-completed', runId: 'r', durationMs: 0, iterations: 3, functionCalls: 3, success: true }]);
  });

  test('a terminated run: success false and the terminationReason', async () => {
    const stop: AgentMiddleware = { name: 'stop', beforeIteration: map((ctx) => (ctx.iteration === 1 ? ctx.terminate('Enough.') : ctx)) };
    const events = await runAll([pings(1), 'never'], [lifecycleEvents(), stop]);
    expect(completed(events)).toEqual([
      { type: 'agent-run-completed', runId: 'r', durationMs: 0, iterations: 2, functionCalls: 1, success: false, terminationReason: 'Enough.' },
    ]);
    expect(dropToolInput(events).map(eventLabel).slice(-2)).toEqual(['agent-run-completed', 'run-end:terminated']);
  });

  test('terminated before any iteration (beforeMessageTurn): 0 iterations', async () => {
    const gate: AgentMiddleware = { name: 'gate', beforeMessageTurn: map((ctx) => ctx.terminate('Closed.')) };
    const events = await runAll([], [lifecycleEvents(), gate]);
    expect(completed(events)).toEqual([
      { type: 'agent-run-completed', runId: 'r', durationMs: 0, iterations: 0, functionCalls: 0, success: false, terminationReason: 'Closed.' },
    ]);
  });

  test('a termination decided by a later-registered afterMessageTurn hook is seen', async () => {
    const veto: AgentMiddleware = { name: 'veto', afterMessageTurn: map((ctx) => ctx.terminate('Vetoed.')) };
    const events = await runAll(['ok'], [lifecycleEvents(), veto]);
    expect(completed(events)[0]).toMatchObject({ success: false, terminationReason: 'Vetoed.' });
    expect(ofType(events, 'run-end')[0]).toMatchObject({ reason: 'terminated', terminationReason: 'Vetoed.' });
  });

  test('max-iterations: success false, no terminationReason', async () => {
    const events = await runAll([pings(1), pings(1)], [lifecycleEvents()], { maxIterations: 2 });
    expect(completed(events)).toEqual([{ type: 'agent-run-completed', runId: 'r', durationMs: 0, iterations: 2, functionCalls: 2, success: false }]);
    expect(ofType(events, 'run-end')[0].reason).toBe('max-iterations');
  });

  test('a failed run: completed with success false before the error event; tool errors emit nothing', async () => {
    const events = await runAll([{ toolCalls: [{ name: 'boom', args: {} }] }, { error: new Error('model down') }]);
    expect(dropToolInput(events).map(eventLabel)).toEqual([
      'run-start',
      'agent-run-started',
      'iteration-start',
      'tool-call:boom',
      'tool-result:boom',
      'iteration-end',
      'iteration-start',
      'agent-run-completed',
      'error:model',
      'run-end:error',
    ]);
    expect(completed(events)).toEqual([{ type: 'agent-run-completed', runId: 'r', durationMs: 0, iterations: 1, functionCalls: 1, success: false }]);
  });

  test('registered after a middleware whose afterMessageTurn throws: the run is reported once, as the turn ended', async () => {
    const failing: AgentMiddleware = {
      name: 'failing',
      afterMessageTurn: map(() => {
        throw new Error('audit store down');
      }),
    };
    const lifecycle = lifecycleEvents();
    const events = await runAll(['hello'], [failing, lifecycle]);
    expect(dropToolInput(events).map(eventLabel)).toEqual([
      'run-start',
      'agent-run-started',
      'iteration-start',
      'text-delta:hello',
      'iteration-end',
      'agent-run-completed',
      'error:middleware',
      'run-end:error',
    ]);
    expect(completed(events)).toEqual([{ type: 'agent-run-completed', runId: 'r', durationMs: 0, iterations: 1, functionCalls: 0, success: true }]);
    // The instance's next run is reported once too.
    expect(completed(await runAll(['again'], [failing, lifecycle]))).toHaveLength(1);
  });

  test('a cancelled run gets no agent-run-completed', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable }) => {
      const model = scriptedModel([{ text: 'slow', delay: 100 }], { scheduler: testScheduler });
      const agent = createAgent({ model, middleware: [lifecycleEvents()], scheduler: testScheduler });
      const controller = new AbortController();
      testScheduler.schedule(() => controller.abort(), 50);
      expectObservable(agent.run('hi', { runId: 'r', signal: controller.signal }).pipe(withoutToolInput(), eventLabels())).toBe('(abc) 45ms (d|)', {
        a: 'run-start',
        b: 'agent-run-started',
        c: 'iteration-start',
        d: 'run-end:cancelled',
      });
    });
  });

  test('the scheduler option replaces the agent scheduler as the clock', async () => {
    let clock = 0;
    const clockScheduler: SchedulerLike = { now: () => (clock += 1234) - 1234, schedule: asyncScheduler.schedule.bind(asyncScheduler) };
    const events = await runAll(['ok'], [lifecycleEvents({ scheduler: clockScheduler })]);
    expect(completed(events)[0].durationMs).toBe(1234);
  });

  test('two concurrent runs on one agent instance measure their own durations', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable }) => {
      const userText = (r: ModelRequest) => (r.messages[0].content[0] as { text: string }).text;
      const slowTool = defineTool({
        name: 'wait',
        description: 'Waits',
        parameters: z.object({ ms: z.number() }),
        execute: ({ ms }) => timer(ms, testScheduler).pipe(map(() => 'done')),
      });
      // A: one 30 ms tool then an instant answer; B: two 20 ms tools in two iterations then an instant answer.
      const model = scriptedModel(
        [
          (r) => {
            const results = r.messages.filter((m) => m.role === 'tool').length;
            if (userText(r) === 'A') return results === 0 ? { toolCalls: [{ name: 'wait', args: { ms: 30 } }] } : 'A done';
            return results < 2 ? { toolCalls: [{ name: 'wait', args: { ms: 20 } }] } : 'B done';
          },
        ],
        { scheduler: testScheduler, loop: true },
      );
      const agent = createAgent({ model, tools: [slowTool], middleware: [lifecycleEvents()], scheduler: testScheduler });
      const lifecycle = (input: string) =>
        agent.run(input, { runId: input }).pipe(filter((e) => e.type === 'agent-run-started' || e.type === 'agent-run-completed'));
      expectObservable(lifecycle('A')).toBe('a 29ms (b|)', {
        a: { type: 'agent-run-started', runId: 'A', inputMessageCount: 1 },
        b: { type: 'agent-run-completed', runId: 'A', durationMs: 30, iterations: 2, functionCalls: 1, success: true },
      });
      expectObservable(lifecycle('B')).toBe('a 39ms (b|)', {
        a: { type: 'agent-run-started', runId: 'B', inputMessageCount: 1 },
        b: { type: 'agent-run-completed', runId: 'B', durationMs: 40, iterations: 3, functionCalls: 2, success: true },
      });
    });
  });

  test('options are validated with TypeErrors naming the option', () => {
    expect(() => lifecycleEvents({ scheduler: {} as SchedulerLike })).toThrow(
      new TypeError('lifecycleEvents: scheduler must be an rxjs SchedulerLike, got {}'),
    );
    expect(() => lifecycleEvents(null as never)).toThrow(TypeError);
    expect(lifecycleEvents().name).toBe('lifecycleEvents');
  });
});
