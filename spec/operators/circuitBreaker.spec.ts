import { filter, lastValueFrom, map, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, createSession, defineTool, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { eventLabel, eventLabels, scriptedModel, type ScriptedTurn, eventsOfType } from '../../src/testing/index';
import { dropToolInput, withoutToolInput } from '../support/withoutToolInput';
import { CIRCUIT_BREAKER_MESSAGE, circuitBreaker } from '../../operators/circuitBreaker';
import { interleavedRunsModel } from '../support/interleavedRuns';

const DEFAULT_TEXT_3 = "Circuit breaker triggered: 'search' was called 3 times in a row with identical arguments.";

function setup(turns: ScriptedTurn[], middleware: AgentMiddleware[] = [circuitBreaker()]) {
  const executed: string[] = [];
  const search = defineTool({
    name: 'search',
    description: 'Searches',
    parameters: z.object({ q: z.string(), filters: z.record(z.string(), z.unknown()).optional() }),
    execute: ({ q }) => {
      executed.push(`search:${q}`);
      return `results for ${q}`;
    },
  });
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks up',
    parameters: z.object({ id: z.number() }),
    execute: ({ id }) => {
      executed.push(`lookup:${id}`);
      return `item ${id}`;
    },
  });
  const model = scriptedModel(turns);
  const agent = createAgent({ model, tools: [search, lookup], middleware });
  const run = async (input = 'go') => lastValueFrom(agent.run(input, { runId: 'r' }).pipe(toArray()));
  return { agent, model, executed, run };
}

const call = (name: string, args: unknown): ScriptedTurn => ({ toolCalls: [{ name, args }] });
const searchX = call('search', { q: 'x' });
const ofType = eventsOfType;
const runEnd = (events: AgentEvent[]) => ofType(events, 'run-end')[0];

describe('circuitBreaker', () => {
  test('default message text', () => {
    expect(CIRCUIT_BREAKER_MESSAGE).toBe("Circuit breaker triggered: '{toolName}' was called {count} times in a row with identical arguments.");
  });

  test('default maxConsecutiveCalls = 3: two identical calls run, the third is stopped before any tool runs', async () => {
    const { run, executed, model } = setup([searchX, searchX, searchX, 'never reached']);
    const events = await run();

    expect(executed).toEqual(['search:x', 'search:x']);
    expect(model.calls).toBe(3);
    expect(dropToolInput(events).map(eventLabel)).toEqual([
      'run-start',
      'iteration-start',
      'tool-call:search',
      'tool-result:search',
      'iteration-end',
      'iteration-start',
      'tool-call:search',
      'tool-result:search',
      'iteration-end',
      // The stopped call still gets an answer: the skipped result the session keeps.
      'iteration-start',
      'tool-call:search',
      'circuit-breaker-triggered',
      'tool-result:search',
      'iteration-end',
      'run-end:terminated',
    ]);
    expect(ofType(events, 'circuit-breaker-triggered')).toEqual([
      { type: 'circuit-breaker-triggered', runId: 'r', toolName: 'search', count: 3, iteration: 2 },
    ]);
    expect(runEnd(events)).toMatchObject({ reason: 'terminated', text: DEFAULT_TEXT_3, terminationReason: DEFAULT_TEXT_3 });
  });

  test('one below the limit (2 identical calls with the default 3) does not trigger', async () => {
    const { run, executed } = setup([searchX, searchX, 'Done.']);
    const events = await run();
    expect(executed).toEqual(['search:x', 'search:x']);
    expect(ofType(events, 'circuit-breaker-triggered')).toEqual([]);
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'Done.' });
  });

  test('exactly at a custom limit triggers; one below it does not', async () => {
    const atLimit = setup([searchX, searchX, searchX, searchX, searchX], [circuitBreaker({ maxConsecutiveCalls: 5 })]);
    const events = await atLimit.run();
    expect(atLimit.executed).toHaveLength(4);
    expect(ofType(events, 'circuit-breaker-triggered')).toEqual([
      { type: 'circuit-breaker-triggered', runId: 'r', toolName: 'search', count: 5, iteration: 4 },
    ]);

    const below = setup([searchX, searchX, searchX, searchX, 'Done.'], [circuitBreaker({ maxConsecutiveCalls: 5 })]);
    expect(runEnd(await below.run())).toMatchObject({ reason: 'completed' });
    expect(below.executed).toHaveLength(4);
  });

  test('maxConsecutiveCalls: 1 stops the first call', async () => {
    const { run, executed } = setup([searchX], [circuitBreaker({ maxConsecutiveCalls: 1 })]);
    const events = await run();
    expect(executed).toEqual([]);
    expect(runEnd(events).terminationReason).toBe("Circuit breaker triggered: 'search' was called 1 times in a row with identical arguments.");
  });

  test('custom message: every {toolName} and {count} is replaced', async () => {
    const message = '{toolName} looped {count}x; stopping {toolName}.';
    const { run } = setup([searchX, searchX], [circuitBreaker({ maxConsecutiveCalls: 2, message })]);
    const events = await run();
    expect(runEnd(events)).toMatchObject({
      reason: 'terminated',
      text: 'search looped 2x; stopping search.',
      terminationReason: 'search looped 2x; stopping search.',
    });
  });

  test('the signature sorts object keys at every depth', async () => {
    const { run, executed } = setup(
      [
        call('search', { q: 'x', filters: { lang: 'en', year: { from: 2000, to: 2020 } } }),
        call('search', { filters: { year: { to: 2020, from: 2000 }, lang: 'en' }, q: 'x' }),
        'Done.',
      ],
      [circuitBreaker({ maxConsecutiveCalls: 2 })],
    );
    const events = await run();
    expect(executed).toEqual(['search:x']);
    expect(ofType(events, 'circuit-breaker-triggered')).toEqual([
      { type: 'circuit-breaker-triggered', runId: 'r', toolName: 'search', count: 2, iteration: 1 },
    ]);
  });

  test('different arguments reset the count to 1 (array order matters)', async () => {
    const { run, executed } = setup([
      searchX,
      searchX,
      call('search', { q: 'y' }),
      call('search', { q: 'y' }),
      call('search', { q: 'z', filters: { tags: ['a', 'b'] } }),
      call('search', { q: 'z', filters: { tags: ['b', 'a'] } }),
      'Done.',
    ]);
    const events = await run();
    expect(executed).toEqual(['search:x', 'search:x', 'search:y', 'search:y', 'search:z', 'search:z']);
    expect(runEnd(events).reason).toBe('completed');
  });

  test('counts are per tool: another tool in between does not reset it', async () => {
    const { run, executed } = setup([searchX, call('lookup', { id: 1 }), searchX, 'never'], [circuitBreaker({ maxConsecutiveCalls: 2 })]);
    const events = await run();
    expect(executed).toEqual(['search:x', 'lookup:1']);
    expect(ofType(events, 'circuit-breaker-triggered')).toEqual([
      { type: 'circuit-breaker-triggered', runId: 'r', toolName: 'search', count: 2, iteration: 2 },
    ]);
  });

  test('calls inside one batch count one after another; no tool of the batch runs', async () => {
    const { run, executed } = setup(
      [
        {
          toolCalls: [
            { name: 'lookup', args: { id: 7 } },
            { name: 'search', args: { q: 'x' } },
            { name: 'search', args: { q: 'x' } },
          ],
        },
      ],
      [circuitBreaker({ maxConsecutiveCalls: 2 })],
    );
    const events = await run();
    expect(executed).toEqual([]);
    // Every call of the stopped batch is answered with the skipped result, none ran.
    expect(ofType(events, 'tool-result').map((e) => [e.name, e.result, e.isError])).toEqual([
      ['lookup', 'Tool execution was skipped.', true],
      ['search', 'Tool execution was skipped.', true],
      ['search', 'Tool execution was skipped.', true],
    ]);
    expect(ofType(events, 'circuit-breaker-triggered')).toEqual([
      { type: 'circuit-breaker-triggered', runId: 'r', toolName: 'search', count: 2, iteration: 0 },
    ]);
  });

  test('counts carry across batches: a batch of two identical calls then one more reaches 3', async () => {
    const { run, executed } = setup([
      {
        toolCalls: [
          { name: 'search', args: { q: 'x' } },
          { name: 'search', args: { q: 'x' } },
        ],
      },
      searchX,
    ]);
    const events = await run();
    expect(executed).toEqual(['search:x', 'search:x']);
    expect(ofType(events, 'circuit-breaker-triggered')[0]).toMatchObject({ count: 3, iteration: 1 });
  });

  test('the first offending call in the model order is reported', async () => {
    const { run } = setup(
      [
        {
          toolCalls: [
            { name: 'lookup', args: { id: 1 } },
            { name: 'search', args: { q: 'x' } },
          ],
        },
        {
          toolCalls: [
            { name: 'search', args: { q: 'x' } },
            { name: 'lookup', args: { id: 1 } },
          ],
        },
      ],
      [circuitBreaker({ maxConsecutiveCalls: 2 })],
    );
    const events = await run();
    expect(ofType(events, 'circuit-breaker-triggered')).toEqual([
      { type: 'circuit-breaker-triggered', runId: 'r', toolName: 'search', count: 2, iteration: 1 },
    ]);
  });

  test('invalid JSON arguments are compared by their raw text', async () => {
    const { run } = setup([call('search', '{"q": oops'), call('search', '{"q": oops')], [circuitBreaker({ maxConsecutiveCalls: 2 })]);
    const events = await run();
    expect(ofType(events, 'circuit-breaker-triggered')).toHaveLength(1);
  });

  test('state is run-scoped: the next turn of a session starts from zero', async () => {
    const { agent } = setup([searchX, searchX, 'one', searchX, searchX, 'two']);
    const session = createSession();
    const first = await lastValueFrom(agent.run('a', { session }).pipe(toArray()));
    const second = await lastValueFrom(agent.run('b', { session }).pipe(toArray()));
    expect(runEnd(first).reason).toBe('completed');
    expect(runEnd(second)).toMatchObject({ reason: 'completed', text: 'two' });
  });

  test('two concurrent runs on one agent instance keep separate counts', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const search = defineTool({ name: 'search', description: 's', parameters: z.object({ q: z.string() }), execute: ({ q }) => `r:${q}` });
      // Both runs call search({ q: 'same' }); A every 6 ms (3 updates x 2 ms), B every 9 ms and answers after 2 results.
      const model = interleavedRunsModel(testScheduler, { name: 'search', args: { q: 'same' } });
      const agent = createAgent({ model, tools: [search], middleware: [circuitBreaker()], scheduler: testScheduler });
      const keep = new Set(['tool-result:search', 'circuit-breaker-triggered', 'run-end:terminated', 'run-end:completed']);
      const labels = (input: string) =>
        agent.run(input, { runId: input }).pipe(
          withoutToolInput(),
          eventLabels(),
          filter((l) => keep.has(l)),
        );

      // Interleaved, the runs make 5 identical calls together; each alone stays under or at its own limit.
      expectObservable(labels('A')).toBe('------r-----r-----(crt|)', { r: 'tool-result:search', c: 'circuit-breaker-triggered', t: 'run-end:terminated' });
      expectObservable(labels('B')).toBe('---------r--------r-----(d|)', { r: 'tool-result:search', d: 'run-end:completed' });
    });
  });

  test('options are validated with TypeErrors naming the option', () => {
    expect(() => circuitBreaker({ maxConsecutiveCalls: 0 })).toThrow(new TypeError("circuitBreaker: 'maxConsecutiveCalls' must be a positive integer, got 0"));
    expect(() => circuitBreaker({ maxConsecutiveCalls: 2.5 })).toThrow(/'maxConsecutiveCalls'/);
    expect(() => circuitBreaker({ maxConsecutiveCalls: '3' as unknown as number })).toThrow(TypeError);
    expect(() => circuitBreaker({ message: 42 as unknown as string })).toThrow(new TypeError("circuitBreaker: 'message' must be a string, got number"));
    expect(() => circuitBreaker(null as never)).toThrow(TypeError);
    expect(circuitBreaker().name).toBe('circuitBreaker');
  });
});

describe('circuitBreaker after another middleware', () => {
  it('leaves a batch that an earlier middleware terminated as it is', async () => {
    const search = defineTool({ name: 'search', description: 'Search', parameters: z.object({ q: z.string() }), execute: ({ q }) => q });
    const call = { toolCalls: [{ name: 'search', args: { q: 'x' } }] };
    const stopper: AgentMiddleware = { name: 'stopper', beforeToolExecution: map((ctx) => (ctx.iteration === 2 ? ctx.terminate('Stopped first.') : ctx)) };
    const agent = createAgent({
      model: scriptedModel([call, call, call, 'Done']),
      tools: [search],
      middleware: [stopper, circuitBreaker({ maxConsecutiveCalls: 3 })],
    });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', terminationReason: 'Stopped first.' });
    expect(eventsOfType(events, 'circuit-breaker-triggered')).toEqual([]);
  });
});
