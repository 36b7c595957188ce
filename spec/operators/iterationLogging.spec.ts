import { asyncScheduler, lastValueFrom, map, timer, toArray, type SchedulerLike } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, type AgentMiddleware, type ModelRequest } from '../../src/index';
import { eventLabels, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { withoutToolInput } from '../support/withoutToolInput';
import { INSTRUCTIONS_PREVIEW_LENGTH, iterationLogging, type IterationLogger } from '../../operators/iterationLogging';
import { contextEditing } from '../../operators/contextEditing';

/** A logger that records `<virtual ms> <level> <line>`. */
function recorder(scheduler: SchedulerLike, methods: Array<'info' | 'debug' | 'trace'> = ['info', 'debug', 'trace']) {
  const lines: string[] = [];
  const logger: IterationLogger = {};
  for (const m of methods) logger[m] = (line: string) => lines.push(`${scheduler.now()} ${m} ${line}`);
  return { logger, lines };
}

function newScheduler() {
  return new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
}

/** A tool answering after 40 virtual ms. */
const slowPing = (scheduler: SchedulerLike) =>
  defineTool({ name: 'ping', description: 'Pings', parameters: z.object({}), execute: () => timer(40, scheduler).pipe(map(() => 'pong')) });

describe('iterationLogging', () => {
  test('info (default level): start and end of each iteration, duration on the scheduler clock, tool calls, final', () => {
    const testScheduler = newScheduler();
    const { logger, lines } = recorder(testScheduler);
    testScheduler.run(({ expectObservable }) => {
      // Iteration 0: 3 updates x 100 ms, then the tool's 40 ms. Iteration 1: 2 updates x 50 ms.
      const model = scriptedModel(
        [
          { toolCalls: [{ name: 'ping', args: {} }], delay: 100 },
          { text: 'Done.', delay: 50 },
        ],
        { scheduler: testScheduler },
      );
      const agent = createAgent({
        model,
        tools: [slowPing(testScheduler)],
        middleware: [iterationLogging({ logger })],
        scheduler: testScheduler,
        instructions: 'Be terse.',
      });
      expectObservable(agent.run('hi', { runId: 'r' }).pipe(withoutToolInput(), eventLabels())).toBe('(ab) 296ms c 39ms (deb) 45ms f 49ms (gh|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:ping',
        d: 'tool-result:ping',
        e: 'iteration-end',
        f: 'text-delta:Done.',
        g: 'iteration-end',
        h: 'run-end:completed',
      });
    });
    expect(lines).toEqual([
      '0 info Iteration 0 starting (run r)',
      '340 info Iteration 0 completed in 340ms (run r) - tool calls: 1, final: false',
      '340 info Iteration 1 starting (run r)',
      '440 info Iteration 1 completed in 100ms (run r) - tool calls: 0, final: true',
    ]);
  });

  test('debug adds the message and tool counts of each model call; trace adds an instructions preview', () => {
    const testScheduler = newScheduler();
    const debug = recorder(testScheduler);
    const trace = recorder(testScheduler);
    testScheduler.run(() => {
      const turns: ScriptedTurn[] = [
        { toolCalls: [{ name: 'ping', args: {} }], delay: 10 },
        { text: 'Done.', delay: 10 },
      ];
      const tools = [slowPing(testScheduler)];
      const run = (middleware: AgentMiddleware) =>
        createAgent({
          model: scriptedModel(turns, { scheduler: testScheduler }),
          tools,
          middleware: [middleware],
          scheduler: testScheduler,
          instructions: 'Be terse.',
        })
          .run('hi', { runId: 'r' })
          .subscribe();
      run(iterationLogging({ logger: debug.logger, level: 'debug' }));
      run(iterationLogging({ logger: trace.logger, level: 'trace' }));
    });
    expect(debug.lines).toEqual([
      '0 info Iteration 0 starting (run r)',
      '0 debug Iteration 0 model call (run r) - messages: 1, tools: 1',
      '70 info Iteration 0 completed in 70ms (run r) - tool calls: 1, final: false',
      '70 info Iteration 1 starting (run r)',
      '70 debug Iteration 1 model call (run r) - messages: 3, tools: 1',
      '90 info Iteration 1 completed in 20ms (run r) - tool calls: 0, final: true',
    ]);
    expect(trace.lines).toEqual([
      '0 info Iteration 0 starting (run r)',
      '0 debug Iteration 0 model call (run r) - messages: 1, tools: 1',
      '0 trace Iteration 0 instructions (run r): Be terse.',
      '70 info Iteration 0 completed in 70ms (run r) - tool calls: 1, final: false',
      '70 info Iteration 1 starting (run r)',
      '70 debug Iteration 1 model call (run r) - messages: 3, tools: 1',
      '70 trace Iteration 1 instructions (run r): Be terse.',
      '90 info Iteration 1 completed in 20ms (run r) - tool calls: 0, final: true',
    ]);
  });

  test('the preview is cut after INSTRUCTIONS_PREVIEW_LENGTH (200) characters; no instructions shows (none)', async () => {
    const lines: string[] = [];
    const logger = { trace: (line: string) => lines.push(line) };
    const exactly = 'x'.repeat(INSTRUCTIONS_PREVIEW_LENGTH);
    for (const instructions of [exactly, `${exactly}y`, undefined]) {
      const agent = createAgent({ model: scriptedModel(['ok']), middleware: [iterationLogging({ logger, level: 'trace' })], instructions });
      await lastValueFrom(agent.run('hi', { runId: 'r' }).pipe(toArray()));
    }
    expect(INSTRUCTIONS_PREVIEW_LENGTH).toBe(200);
    expect(lines).toEqual([
      `Iteration 0 instructions (run r): ${exactly}`,
      `Iteration 0 instructions (run r): ${exactly}…`,
      'Iteration 0 instructions (run r): (none)',
    ]);
  });

  test('the preview shows the instructions actually sent (after every beforeIteration hook)', async () => {
    const lines: string[] = [];
    const addNote: AgentMiddleware = { name: 'note', beforeIteration: map((ctx) => ctx.with({ instructions: `${ctx.instructions} Note.` })) };
    const agent = createAgent({
      model: scriptedModel(['ok']),
      middleware: [iterationLogging({ logger: { trace: (l: string) => lines.push(l) }, level: 'trace' }), addNote],
      instructions: 'Base.',
    });
    await lastValueFrom(agent.run('hi', { runId: 'r' }).pipe(toArray()));
    expect(lines).toEqual(['Iteration 0 instructions (run r): Base. Note.']);
  });

  test('a terminated iteration is final; a skipped model call logs no model-call lines', async () => {
    const lines: string[] = [];
    const stop: AgentMiddleware = { name: 'stop', beforeIteration: map((ctx) => ctx.terminate('Stop.')) };
    const logger = { info: (l: string) => lines.push(l), debug: (l: string) => lines.push(l) };
    const agent = createAgent({ model: scriptedModel([]), middleware: [iterationLogging({ logger, level: 'debug' }), stop], scheduler: newScheduler() });
    await lastValueFrom(agent.run('hi', { runId: 'r' }).pipe(toArray()));
    expect(lines).toEqual(['Iteration 0 starting (run r)', 'Iteration 0 completed in 0ms (run r) - tool calls: 0, final: true']);
  });

  test('missing logger methods are skipped; the level filters the others', async () => {
    const infoOnly: string[] = [];
    const traceOnly: string[] = [];
    const run = (middleware: AgentMiddleware) =>
      lastValueFrom(
        createAgent({ model: scriptedModel(['ok']), middleware: [middleware], scheduler: newScheduler() })
          .run('hi', { runId: 'r' })
          .pipe(toArray()),
      );
    await run(iterationLogging({ logger: { info: (l: string) => infoOnly.push(l) }, level: 'trace' }));
    await run(iterationLogging({ logger: { trace: (l: string) => traceOnly.push(l) }, level: 'debug' }));
    expect(infoOnly).toEqual(['Iteration 0 starting (run r)', 'Iteration 0 completed in 0ms (run r) - tool calls: 0, final: true']);
    expect(traceOnly).toEqual([]);
  });

  test('the default logger is console (info)', async () => {
    const info = jest.spyOn(console, 'info').mockImplementation(() => undefined);
    const debug = jest.spyOn(console, 'debug').mockImplementation(() => undefined);
    try {
      await lastValueFrom(
        createAgent({ model: scriptedModel(['ok']), middleware: [iterationLogging()], scheduler: newScheduler() })
          .run('hi', { runId: 'r' })
          .pipe(toArray()),
      );
      expect(info.mock.calls).toEqual([['Iteration 0 starting (run r)'], ['Iteration 0 completed in 0ms (run r) - tool calls: 0, final: true']]);
      expect(debug).not.toHaveBeenCalled();
    } finally {
      info.mockRestore();
      debug.mockRestore();
    }
  });

  test('with the console, trace lines go to console.debug (console.trace would print a stack)', async () => {
    const debug = jest.spyOn(console, 'debug').mockImplementation(() => undefined);
    const trace = jest.spyOn(console, 'trace').mockImplementation(() => undefined);
    const info = jest.spyOn(console, 'info').mockImplementation(() => undefined);
    try {
      const agent = createAgent({
        model: scriptedModel(['ok']),
        instructions: 'Be terse.',
        middleware: [iterationLogging({ logger: console, level: 'trace' })],
        scheduler: newScheduler(),
      });
      await lastValueFrom(agent.run('hi', { runId: 'r' }).pipe(toArray()));
      expect(trace).not.toHaveBeenCalled();
      expect(debug.mock.calls.map((call) => call[0])).toContain('Iteration 0 instructions (run r): Be terse.');
    } finally {
      debug.mockRestore();
      trace.mockRestore();
      info.mockRestore();
    }
  });

  test('trace and debug are looked up per line (a logger that swaps its methods when its level changes, as pino does)', async () => {
    const lines: string[] = [];
    const logger: IterationLogger = { info: () => undefined, debug: () => undefined, trace: () => undefined }; // at 'info': no-ops
    const agent = createAgent({
      model: scriptedModel(['ok', 'ok']),
      instructions: 'Be terse.',
      middleware: [iterationLogging({ logger, level: 'trace' })],
      scheduler: newScheduler(),
    });
    logger.debug = (line) => lines.push(`debug ${line}`);
    logger.trace = (line) => lines.push(`trace ${line}`);
    await lastValueFrom(agent.run('hi', { runId: 'r' }).pipe(toArray()));
    expect(lines).toContain('trace Iteration 0 instructions (run r): Be terse.');
    // A copy of the console: its trace is console.trace, so the line goes to its debug.
    const debug = jest.spyOn(console, 'debug').mockImplementation(() => undefined);
    const trace = jest.spyOn(console, 'trace').mockImplementation(() => undefined);
    try {
      const copy = { info: () => undefined, debug: (line: string) => lines.push(`copy ${line}`), trace: console.trace };
      await lastValueFrom(
        createAgent({
          model: scriptedModel(['ok']),
          instructions: 'Be terse.',
          middleware: [iterationLogging({ logger: copy, level: 'trace' })],
          scheduler: newScheduler(),
        })
          .run('hi', { runId: 'c' })
          .pipe(toArray()),
      );
      expect(trace).not.toHaveBeenCalled();
      expect(lines).toContain('copy Iteration 0 instructions (run c): Be terse.');
    } finally {
      debug.mockRestore();
      trace.mockRestore();
    }
  });

  test('the scheduler option replaces the agent scheduler as the clock', async () => {
    const lines: string[] = [];
    let clock = 1000;
    const clockScheduler: SchedulerLike = { now: () => (clock += 250) - 250, schedule: asyncScheduler.schedule.bind(asyncScheduler) };
    const agent = createAgent({
      model: scriptedModel(['ok']),
      middleware: [iterationLogging({ logger: { info: (l: string) => lines.push(l) }, scheduler: clockScheduler })],
    });
    await lastValueFrom(agent.run('hi', { runId: 'r' }).pipe(toArray()));
    expect(lines[1]).toBe('Iteration 0 completed in 250ms (run r) - tool calls: 0, final: true');
  });

  test('two concurrent runs on one agent instance time their iterations separately', () => {
    const testScheduler = newScheduler();
    const { logger, lines } = recorder(testScheduler, ['info']);
    testScheduler.run(() => {
      const userText = (r: ModelRequest) => (r.messages[0].content[0] as { text: string }).text;
      // A: 3 updates x 10 ms + 40 ms tool, then 2 x 10 ms. B: 3 x 30 ms + 40 ms tool, then 2 x 30 ms.
      const model = scriptedModel(
        [
          (r) => {
            const delay = userText(r) === 'A' ? 10 : 30;
            return r.messages.some((m) => m.role === 'tool') ? { text: 'ok', delay } : { toolCalls: [{ name: 'ping', args: {} }], delay };
          },
        ],
        { scheduler: testScheduler, loop: true },
      );
      const agent = createAgent({ model, tools: [slowPing(testScheduler)], middleware: [iterationLogging({ logger })], scheduler: testScheduler });
      agent.run('A', { runId: 'A' }).subscribe();
      agent.run('B', { runId: 'B' }).subscribe();
    });
    expect(lines).toEqual([
      '0 info Iteration 0 starting (run A)',
      '0 info Iteration 0 starting (run B)',
      '70 info Iteration 0 completed in 70ms (run A) - tool calls: 1, final: false',
      '70 info Iteration 1 starting (run A)',
      '90 info Iteration 1 completed in 20ms (run A) - tool calls: 0, final: true',
      '130 info Iteration 0 completed in 130ms (run B) - tool calls: 1, final: false',
      '130 info Iteration 1 starting (run B)',
      '190 info Iteration 1 completed in 60ms (run B) - tool calls: 0, final: true',
    ]);
  });

  test('options are validated with TypeErrors naming the option', () => {
    expect(() => iterationLogging({ level: 'warn' as 'info' })).toThrow(
      new TypeError(`iterationLogging: 'level' must be 'info', 'debug' or 'trace', got "warn"`),
    );
    expect(() => iterationLogging({ logger: 'console' as unknown as IterationLogger })).toThrow(/'logger' must be an object/);
    expect(() => iterationLogging({ logger: { info: 'x' } as unknown as IterationLogger })).toThrow(
      new TypeError("iterationLogging: 'logger.info' must be a function, got string"),
    );
    expect(() => iterationLogging({ scheduler: {} as SchedulerLike })).toThrow(/iterationLogging: scheduler must be an rxjs SchedulerLike/);
    expect(iterationLogging().name).toBe('iterationLogging');
    expect(iterationLogging().wrapModel).toBeUndefined();
    expect(iterationLogging({ level: 'debug' }).wrapModel).toBeDefined();
  });

  it('logs a model call when it is made: once per call, after a wrapper that sends its own request (contextEditing)', async () => {
    const big = defineTool({ name: 'big', description: 'Returns a lot', parameters: z.object({ n: z.number() }), execute: ({ n }) => 'x'.repeat(400) + n });
    const { logger, lines } = recorder(asyncScheduler, ['debug']);
    const model = scriptedModel([{ toolCalls: [{ name: 'big', args: { n: 1 } }] }, { toolCalls: [{ name: 'big', args: { n: 2 } }] }, 'done']);
    const agent = createAgent({
      model,
      tools: [big],
      middleware: [contextEditing({ trigger: { tokens: 50 }, keep: { toolResults: 1 } }), iterationLogging({ logger, level: 'debug' })],
    });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.filter((e) => e.type === 'context-edited')).toHaveLength(1);
    const calls = lines.filter((line) => line.includes('model call')).map((line) => line.replace(/^\d+ debug /, '').replace(/ \(run [^)]*\)/, ''));
    expect(calls).toEqual([
      'Iteration 0 model call - messages: 1, tools: 1',
      'Iteration 1 model call - messages: 3, tools: 1',
      'Iteration 2 model call - messages: 5, tools: 1',
    ]);
  });
});
