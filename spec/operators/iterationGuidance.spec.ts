import { lastValueFrom, map, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineTool, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { DEFAULT_FIRST_ITERATION_GUIDANCE, defaultAfterToolsGuidance, defaultIterationWarning, iterationGuidance } from '../../operators/iterationGuidance';

const ping = defineTool({ name: 'ping', description: 'Pings', parameters: z.object({}), execute: () => 'pong' });
const pings = (n: number): ScriptedTurn => ({ toolCalls: Array.from({ length: n }, () => ({ name: 'ping', args: {} })) });

function setup(turns: ScriptedTurn[], middleware: AgentMiddleware[], extra: { instructions?: string; maxIterations?: number } = {}) {
  const model = scriptedModel(turns);
  const agent = createAgent({ model, tools: [ping], middleware, ...extra });
  const run = async (options = {}) => lastValueFrom(agent.run('go', { runId: 'r', ...options }).pipe(toArray()));
  const instructions = () => model.requests.map((r) => r.instructions);
  return { agent, model, run, instructions };
}

const FIRST = 'ITERATION GUIDANCE: This is your first turn. Identify what tools you need and call them to gather information.';
const after = (n: number) => `ITERATION GUIDANCE: You have ${n} tool result(s). Analyze the data and synthesize your response.`;
const warn = (n: number) => `WARNING: Only ${n} iteration(s) remaining. Wrap up your analysis and provide a conclusion.`;

describe('iterationGuidance', () => {
  test('default texts', () => {
    expect(DEFAULT_FIRST_ITERATION_GUIDANCE).toBe(FIRST);
    expect(defaultAfterToolsGuidance(2)).toBe(after(2));
    expect(defaultIterationWarning(1)).toBe(warn(1));
  });

  test('defaults: first-iteration text, then the tool results of the turn so far, each call on its own', async () => {
    const { run, instructions } = setup([pings(1), pings(2), 'Done.'], [iterationGuidance()], { instructions: 'Be terse.' });
    const events = await run();
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
    expect(instructions()).toEqual([`Be terse.\n\n${FIRST}`, `Be terse.\n\n${after(1)}`, `Be terse.\n\n${after(3)}`]);
  });

  test('without agent instructions the guidance alone becomes the instructions', async () => {
    const { run, instructions } = setup([pings(1), 'Done.'], [iterationGuidance()]);
    await run();
    expect(instructions()).toEqual([FIRST, after(1)]);
  });

  test('the tool-result count covers this turn only, not the history', async () => {
    const { agent, model } = setup([pings(2), 'one', pings(1), 'two'], [iterationGuidance()]);
    const session = createSession();
    await lastValueFrom(agent.run('a', { session }).pipe(toArray()));
    await lastValueFrom(agent.run('b', { session }).pipe(toArray()));
    expect(model.requests.map((r) => r.instructions)).toEqual([FIRST, after(2), FIRST, after(1)]);
  });

  test('skipped calls count as tool results too (the model reads them)', async () => {
    const skipAll: AgentMiddleware = { name: 'skip', beforeToolExecution: map((ctx) => ctx.skipTools()) };
    const seen: number[] = [];
    const { run, instructions } = setup([pings(2), 'Done.'], [iterationGuidance({ afterTools: (n) => (seen.push(n), `n=${n}`) }), skipAll]);
    await run();
    expect(seen).toEqual([2]);
    expect(instructions()[1]).toBe('n=2');
  });

  test('warning when remaining = maxIterations - iteration <= warnWithin (default 3): exactly at it and one past', async () => {
    const { run, instructions } = setup([pings(1), pings(1), pings(1), pings(1), 'Done.'], [iterationGuidance({ maxIterations: 5 })]);
    await run();
    expect(instructions()).toEqual([
      FIRST, // remaining 5
      after(1), // remaining 4: one past warnWithin
      `${after(2)}\n\n${warn(3)}`, // remaining 3: exactly at warnWithin
      `${after(3)}\n\n${warn(2)}`,
      `${after(4)}\n\n${warn(1)}`,
    ]);
  });

  test('custom texts, warnWithin, and the warning on the first iteration too', async () => {
    const { run, instructions } = setup(
      [pings(1), pings(1), 'Done.'],
      [
        iterationGuidance({
          maxIterations: 3,
          warnWithin: 1,
          firstIteration: 'Plan first.',
          afterTools: (n) => `${n} results in.`,
          warning: (left) => `${left} left!`,
        }),
      ],
      { instructions: 'Base.' },
    );
    await run();
    expect(instructions()).toEqual(['Base.\n\nPlan first.', 'Base.\n\n1 results in.', 'Base.\n\n2 results in.\n\n1 left!']);

    const early = setup(['Hi.'], [iterationGuidance({ maxIterations: 2, warnWithin: 2 })]);
    await early.run();
    expect(early.instructions()).toEqual([`${FIRST}\n\n${warn(2)}`]);
  });

  test('warnWithin: 0 warns only once the budget is used up; remaining is passed as computed', async () => {
    const { run, instructions } = setup([pings(1), pings(1), 'Done.'], [iterationGuidance({ maxIterations: 2, warnWithin: 0 })]);
    await run();
    expect(instructions()).toEqual([FIRST, after(1), `${after(2)}\n\n${warn(0)}`]);
  });

  test('an empty text appends nothing (how a part is turned off)', async () => {
    const { run, instructions } = setup([pings(1), 'Done.'], [iterationGuidance({ firstIteration: '', afterTools: () => '' })], { instructions: 'Keep.' });
    await run();
    expect(instructions()).toEqual(['Keep.', 'Keep.']);
  });

  test('a text function that does not return a string fails the run, naming the middleware', async () => {
    const { run } = setup([pings(1), 'Done.'], [iterationGuidance({ afterTools: (() => 42) as unknown as () => string })]);
    const events = await run();
    const error = events.find((e): e is Extract<AgentEvent, { type: 'error' }> => e.type === 'error');
    expect(error).toMatchObject({
      source: 'middleware',
      middleware: 'iterationGuidance',
      error: { name: 'TypeError', message: "iterationGuidance: 'afterTools' must return a string, got number" },
    });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  test('options are validated with TypeErrors naming the option', () => {
    expect(() => iterationGuidance({ maxIterations: 0 })).toThrow(new TypeError("iterationGuidance: 'maxIterations' must be a positive integer, got 0"));
    expect(() => iterationGuidance({ firstIteration: 1 as unknown as string })).toThrow(/'firstIteration' must be a string/);
    expect(() => iterationGuidance({ afterTools: 'x' as unknown as () => string })).toThrow(/'afterTools' must be a function/);
    expect(() => iterationGuidance({ warning: 'x' as unknown as () => string })).toThrow(/'warning' must be a function/);
    expect(() => iterationGuidance({ warnWithin: -1 })).toThrow(new TypeError("iterationGuidance: 'warnWithin' must be an integer >= 0, got -1"));
    expect(iterationGuidance().name).toBe('iterationGuidance');
  });
});
