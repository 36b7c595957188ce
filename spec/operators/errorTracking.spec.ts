import { filter, lastValueFrom, map, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, ToolError, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { eventLabel, eventLabels, scriptedModel, type ScriptedTurn, eventsOfType } from '../../src/testing/index';
import { ERROR_TRACKING_MESSAGE, errorTracking } from '../../operators/errorTracking';
import { interleavedRunsModel } from '../support/interleavedRuns';

/** `work({ out })`: returns `out`, or throws when `out` is `'throw'`. */
const work = defineTool({
  name: 'work',
  description: 'Works',
  parameters: z.object({ out: z.unknown() }),
  execute: ({ out }) => {
    if (out === 'throw') throw new Error('boom');
    return out;
  },
});

const calls = (...outs: unknown[]): ScriptedTurn => ({ toolCalls: outs.map((out) => ({ name: 'work', args: { out } })) });
const fail = calls('throw');
const ok = calls('fine');

function setup(turns: ScriptedTurn[], middleware: AgentMiddleware[] = [errorTracking()]) {
  const model = scriptedModel(turns);
  const agent = createAgent({ model, tools: [work], middleware });
  const run = async () => lastValueFrom(agent.run('go', { runId: 'r' }).pipe(toArray()));
  return { model, run };
}

const ofType = eventsOfType;
const runEnd = (events: AgentEvent[]) => ofType(events, 'run-end')[0];
const exceeded = (events: AgentEvent[]) => ofType(events, 'error-threshold-exceeded');

describe('errorTracking', () => {
  test('default message text', () => {
    expect(ERROR_TRACKING_MESSAGE).toBe('Maximum consecutive failures ({maxAllowed}) exceeded');
  });

  test('default maxConsecutiveErrors = 3: the third failing iteration in a row terminates the run', async () => {
    const { run, model } = setup([fail, fail, fail, 'never reached']);
    const events = await run();
    expect(model.calls).toBe(3);
    expect(events.map(eventLabel).slice(-5)).toEqual(['tool-call:work', 'tool-result:work', 'error-threshold-exceeded', 'iteration-end', 'run-end:terminated']);
    expect(exceeded(events)).toEqual([{ type: 'error-threshold-exceeded', runId: 'r', consecutiveErrors: 3, maxAllowed: 3, lastError: 'Error: boom' }]);
    expect(runEnd(events)).toMatchObject({
      reason: 'terminated',
      text: 'Maximum consecutive failures (3) exceeded',
      terminationReason: 'Maximum consecutive failures (3) exceeded',
    });
  });

  test('one below the limit: two failing iterations then an answer complete normally', async () => {
    const { run } = setup([fail, fail, 'Recovered.']);
    const events = await run();
    expect(exceeded(events)).toEqual([]);
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'Recovered.' });
  });

  test('a clean iteration resets the count', async () => {
    const { run, model } = setup([fail, fail, ok, fail, fail, 'Done.']);
    const events = await run();
    expect(model.calls).toBe(6);
    expect(exceeded(events)).toEqual([]);
    expect(runEnd(events).reason).toBe('completed');
  });

  test('exactly at a custom limit, and maxConsecutiveErrors: 1', async () => {
    const two = setup([fail, fail, 'never'], [errorTracking({ maxConsecutiveErrors: 2 })]);
    expect(exceeded(await two.run())).toEqual([
      { type: 'error-threshold-exceeded', runId: 'r', consecutiveErrors: 2, maxAllowed: 2, lastError: 'Error: boom' },
    ]);
    expect(two.model.calls).toBe(2);

    const one = setup([fail, 'never'], [errorTracking({ maxConsecutiveErrors: 1 })]);
    const events = await one.run();
    expect(runEnd(events).terminationReason).toBe('Maximum consecutive failures (1) exceeded');
  });

  test('string results starting with Error: or Failed: (any case) are errors; elsewhere in the text they are not', async () => {
    const { run } = setup([calls('ERROR: disk full'), calls('failed: timeout'), calls('Error:x')], [errorTracking()]);
    expect(exceeded(await run())[0]).toMatchObject({ consecutiveErrors: 3, lastError: 'Error:x' });

    const clean = setup(
      [calls('No Error: here'), calls('Failed to parse? no: it starts with F-a-i-l-e-d space'), calls(' Error: leading space'), 'Done.'],
      [errorTracking({ maxConsecutiveErrors: 1 })],
    );
    expect(runEnd(await clean.run()).reason).toBe('completed');
  });

  test('runtime error results count: an unknown tool and bad arguments', async () => {
    const { run } = setup(
      [{ toolCalls: [{ name: 'nope', args: {} }] }, { toolCalls: [{ name: 'work', args: '{bad' }] }],
      [errorTracking({ maxConsecutiveErrors: 2 })],
    );
    const events = await run();
    expect(exceeded(events)).toHaveLength(1);
    expect(exceeded(events)[0].consecutiveErrors).toBe(2);
  });

  test('one error in a batch fails the iteration; lastError is the last error result in the model order', async () => {
    const { run } = setup([calls('fine', 'throw', 'Failed: second'), calls('fine', 'Error: only one')], [errorTracking({ maxConsecutiveErrors: 2 })]);
    const first = setup([calls('fine', 'throw', 'Failed: second')], [errorTracking({ maxConsecutiveErrors: 1 })]);
    expect(exceeded(await first.run())[0].lastError).toBe('Failed: second');
    expect(exceeded(await run())[0]).toMatchObject({ consecutiveErrors: 2, lastError: 'Error: only one' });
  });

  test('isError adds a detector; it sees { name, result, isError } for every result; non-string lastError is JSON', async () => {
    const seen: unknown[] = [];
    const isError = (r: { name: string; result: unknown; isError: boolean }) => {
      seen.push(r);
      return typeof r.result === 'object' && r.result !== null && (r.result as { ok?: boolean }).ok === false;
    };
    const { run } = setup([calls({ ok: false, code: 7 }), calls('throw')], [errorTracking({ maxConsecutiveErrors: 2, isError })]);
    const events = await run();
    expect(seen).toEqual([
      { name: 'work', result: { ok: false, code: 7 }, isError: false },
      { name: 'work', result: 'Error: boom', isError: true },
    ]);
    expect(exceeded(events)[0]).toMatchObject({ consecutiveErrors: 2, lastError: 'Error: boom' });

    const json = setup([calls({ ok: false, code: 7 })], [errorTracking({ maxConsecutiveErrors: 1, isError })]);
    expect(exceeded(await json.run())[0].lastError).toBe('{"ok":false,"code":7}');
  });

  test('isError cannot clear a built-in error', async () => {
    const { run } = setup([fail], [errorTracking({ maxConsecutiveErrors: 1, isError: () => false })]);
    expect(exceeded(await run())).toHaveLength(1);
  });

  test('custom message placeholders', async () => {
    const message = '{consecutiveErrors}/{maxAllowed} failures, last: {lastError}';
    const { run } = setup([fail, fail], [errorTracking({ maxConsecutiveErrors: 2, message })]);
    expect(runEnd(await run()).text).toBe('2/2 failures, last: Error: boom');
  });

  test('a batch skipped by another middleware counts as failing: its skipped results are error results', async () => {
    const skipSecond: AgentMiddleware = {
      name: 'skipSecond',
      beforeToolExecution: map((ctx) => (ctx.iteration === 1 ? ctx.skipTools() : ctx)),
    };
    const { run } = setup([fail, ok, fail, 'never'], [errorTracking({ maxConsecutiveErrors: 2 }), skipSecond]);
    const events = await run();
    expect(exceeded(events)).toEqual([
      { type: 'error-threshold-exceeded', runId: 'r', consecutiveErrors: 2, maxAllowed: 2, lastError: 'Tool execution was skipped.' },
    ]);
  });

  test('two concurrent runs on one agent instance keep separate counts', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      // A fails every 6 ms; B fails every 9 ms twice, then answers.
      const model = interleavedRunsModel(testScheduler, { name: 'work', args: { out: 'throw' } });
      const agent = createAgent({ model, tools: [work], middleware: [errorTracking()], scheduler: testScheduler });
      const keep = new Set(['tool-result:work', 'error-threshold-exceeded', 'run-end:terminated', 'run-end:completed']);
      const labels = (input: string) =>
        agent.run(input, { runId: input }).pipe(
          eventLabels(),
          filter((l) => keep.has(l)),
        );

      expectObservable(labels('A')).toBe('------r-----r-----(rxt|)', { r: 'tool-result:work', x: 'error-threshold-exceeded', t: 'run-end:terminated' });
      expectObservable(labels('B')).toBe('---------r--------r-----(d|)', { r: 'tool-result:work', d: 'run-end:completed' });
    });
  });

  test('options are validated with TypeErrors naming the option', () => {
    expect(() => errorTracking({ maxConsecutiveErrors: 0 })).toThrow(new TypeError("errorTracking: 'maxConsecutiveErrors' must be a positive integer, got 0"));
    expect(() => errorTracking({ maxConsecutiveErrors: 1.5 })).toThrow(/'maxConsecutiveErrors'/);
    expect(() => errorTracking({ isError: true as unknown as () => boolean })).toThrow(/'isError' must be a function/);
    expect(() => errorTracking({ message: 1 as unknown as string })).toThrow(/'message' must be a string/);
    expect(errorTracking().name).toBe('errorTracking');
  });
});

describe('errorTracking message', () => {
  it("inserts the error text as is, '$' patterns included", async () => {
    const pay = defineTool({
      name: 'pay',
      description: 'Pay',
      parameters: z.object({}),
      execute: () => {
        throw new ToolError("Failed: limit is $'100 and $& {maxAllowed}");
      },
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'pay', args: {} }] }], { loop: true });
    const agent = createAgent({
      model,
      tools: [pay],
      middleware: [errorTracking({ maxConsecutiveErrors: 1, message: 'Stopped after {consecutiveErrors}/{maxAllowed}: {lastError}' })],
    });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ terminationReason: "Stopped after 1/1: Failed: limit is $'100 and $& {maxAllowed}" });
  });
});
