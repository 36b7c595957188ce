import { Observable, filter, lastValueFrom, map, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, textMessage, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { eventLabel, scriptedModel, type ScriptedTurn, eventsOfType } from '../../src/testing/index';
import { dropToolInput } from '../support/withoutToolInput';
import { budgetExhaustedMessage, costBudget } from '../../operators/costBudget';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));

const echo = defineTool({ name: 'echo', description: 'Echoes', parameters: z.object({}), execute: () => 'ok' });
/** A tool-calling turn that reports `usage`. */
const step = (inputTokens: number, outputTokens: number, delay?: number): ScriptedTurn => ({
  toolCalls: [{ name: 'echo', args: {} }],
  usage: { inputTokens, outputTokens },
  delay,
});
// Binary-exact prices, so totals compare exactly.
const pricing = { inputPerToken: 0.25, outputPerToken: 0.5 };

describe('costBudget', () => {
  it('after each model call emits cost-recorded with the call tokens, its cost and the running total', async () => {
    const model = scriptedModel([step(2, 1), { text: 'done', usage: { inputTokens: 4, outputTokens: 2 } }]);
    const events = await collect(createAgent({ model, tools: [echo], middleware: [costBudget({ maxCost: 100, pricing })] }).run('go', { runId: 'r' }));
    expect(eventsOfType(events, 'cost-recorded')).toEqual([
      { type: 'cost-recorded', runId: 'r', inputTokens: 2, outputTokens: 1, cost: 1, totalCost: 1 },
      { type: 'cost-recorded', runId: 'r', inputTokens: 4, outputTokens: 2, cost: 2, totalCost: 3 },
    ]);
    expect(dropToolInput(events).map(eventLabel)).toEqual([
      'run-start',
      'iteration-start',
      'tool-call:echo',
      'tool-result:echo',
      'cost-recorded',
      'iteration-end',
      'iteration-start',
      'text-delta:done',
      'cost-recorded',
      'iteration-end',
      'run-end:completed',
    ]);
  });

  it('prices realistic per-token rates', async () => {
    const model = scriptedModel([{ text: 'x', usage: { inputTokens: 1000, outputTokens: 200 } }]);
    const perToken = { inputPerToken: 0.15e-6, outputPerToken: 0.6e-6 };
    const events = await collect(createAgent({ model, middleware: [costBudget({ maxCost: 1, pricing: perToken })] }).run('go'));
    const [recorded] = eventsOfType(events, 'cost-recorded');
    expect(recorded.cost).toBe(1000 * 0.15e-6 + 200 * 0.6e-6);
    expect(recorded.totalCost).toBeCloseTo(0.00027, 12);
  });

  it('a call with no usage costs 0', async () => {
    const events = await collect(
      createAgent({ model: scriptedModel(['no usage']), middleware: [costBudget({ maxCost: 1, pricing })] }).run('go', { runId: 'r' }),
    );
    expect(eventsOfType(events, 'cost-recorded')).toEqual([{ type: 'cost-recorded', runId: 'r', inputTokens: 0, outputTokens: 0, cost: 0, totalCost: 0 }]);
  });

  it('exactly at the budget: no further model call, the run terminates with the exact message', async () => {
    const model = scriptedModel([step(2, 1), step(2, 1), 'never']); // each call costs 1
    const events = await collect(createAgent({ model, tools: [echo], middleware: [costBudget({ maxCost: 2, pricing })] }).run('go', { runId: 'r' }));
    expect(model.calls).toBe(2);
    expect(dropToolInput(events).map(eventLabel).slice(-4)).toEqual(['iteration-end', 'iteration-start', 'iteration-end', 'run-end:terminated']);
    expect(events.at(-1)).toEqual({
      type: 'run-end',
      runId: 'r',
      reason: 'terminated',
      text: 'Budget exhausted: $2.0000 / $2.0000',
      usage: { inputTokens: 4, outputTokens: 2 },
      terminationReason: 'Budget exhausted: $2.0000 / $2.0000',
    });
  });

  it('just under the budget the next call goes ahead (and may end above it)', async () => {
    const model = scriptedModel([step(2, 1), step(2, 1), 'never']);
    const events = await collect(createAgent({ model, tools: [echo], middleware: [costBudget({ maxCost: 1.25, pricing })] }).run('go'));
    expect(model.calls).toBe(2);
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', terminationReason: 'Budget exhausted: $2.0000 / $1.2500' });
    const three = await collect(
      createAgent({ model: scriptedModel([step(2, 1), step(2, 1), 'done']), tools: [echo], middleware: [costBudget({ maxCost: 2.25, pricing })] }).run('go'),
    );
    expect(three.at(-1)).toMatchObject({ reason: 'completed', text: 'done' });
  });

  it('maxCost 0 terminates before the first call', async () => {
    const model = scriptedModel(['never']);
    const events = await collect(createAgent({ model, middleware: [costBudget({ maxCost: 0, pricing })] }).run('go'));
    expect(model.calls).toBe(0);
    expect(dropToolInput(events).map(eventLabel)).toEqual(['run-start', 'iteration-start', 'iteration-end', 'run-end:terminated']);
    expect(events.at(-1)).toMatchObject({ text: 'Budget exhausted: $0.0000 / $0.0000' });
  });

  it('formats both amounts with 4 decimals', () => {
    expect(budgetExhaustedMessage(0.015, 0.01)).toBe('Budget exhausted: $0.0150 / $0.0100');
    expect(budgetExhaustedMessage(12.34567, 10)).toBe('Budget exhausted: $12.3457 / $10.0000');
  });

  it('records nothing for an iteration whose model call was skipped', async () => {
    const skip: AgentMiddleware = { name: 'skip', beforeIteration: map((ctx) => ctx.skipModelCall(textMessage('assistant', 'canned'))) };
    const events = await collect(createAgent({ model: scriptedModel([]), middleware: [costBudget({ maxCost: 1, pricing }), skip] }).run('go'));
    expect(eventsOfType(events, 'cost-recorded')).toEqual([]);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'canned' });
  });

  it('the total is run state: concurrent runs on one instance keep their own totals (virtual time)', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const budget = costBudget({ maxCost: 2, pricing });
      // Run a: 1 per call, 2 calls then the budget stops it. Run b: 0.5 per call, interleaved, 4 calls.
      const agentA = createAgent({
        model: scriptedModel([step(2, 1, 10)], { loop: true, scheduler: testScheduler }),
        tools: [echo],
        middleware: [budget],
        scheduler: testScheduler,
      });
      const agentB = createAgent({
        model: scriptedModel([step(2, 0, 7)], { loop: true, scheduler: testScheduler }),
        tools: [echo],
        middleware: [budget],
        scheduler: testScheduler,
      });
      const totals = (events$: Observable<AgentEvent>) =>
        events$.pipe(
          filter((e) => e.type === 'cost-recorded' || e.type === 'run-end'),
          map((e) => (e.type === 'cost-recorded' ? `${e.runId}:${e.totalCost}` : eventLabel(e))),
        );
      // Each scripted call emits 4 updates (the tool call in 2 deltas, usage, finish), each after `delay` ms.
      expectObservable(totals(agentA.run('go', { runId: 'a' }))).toBe('40ms a 39ms (bc|)', { a: 'a:1', b: 'a:2', c: 'run-end:terminated' });
      expectObservable(totals(agentB.run('go', { runId: 'b' }))).toBe('28ms a 27ms b 27ms c 27ms (de|)', {
        a: 'b:0.5',
        b: 'b:1',
        c: 'b:1.5',
        d: 'b:2',
        e: 'run-end:terminated',
      });
    });
  });

  it('a new run starts from 0', async () => {
    const budget = costBudget({ maxCost: 1, pricing });
    const agent = createAgent({ model: scriptedModel([{ text: 'x', usage: { inputTokens: 4, outputTokens: 0 } }], { loop: true }), middleware: [budget] });
    const first = await collect(agent.run('go'));
    const second = await collect(agent.run('go'));
    expect(eventsOfType(first, 'cost-recorded')[0].totalCost).toBe(1);
    expect(eventsOfType(second, 'cost-recorded')[0].totalCost).toBe(1);
    expect(second.at(-1)).toMatchObject({ reason: 'completed' });
  });

  it.each([
    [undefined, "options must be an object with 'maxCost' and 'pricing', got undefined"],
    [null, "options must be an object with 'maxCost' and 'pricing', got null"],
    [{ pricing }, "'maxCost' must be a number >= 0, got undefined"],
    [{ maxCost: -1, pricing }, "'maxCost' must be a number >= 0, got -1"],
    [{ maxCost: 1 }, "'pricing' must be an object { inputPerToken, outputPerToken }"],
    [{ maxCost: 1, pricing: { inputPerToken: 1 } }, "'pricing.outputPerToken' must be a finite number >= 0, got undefined"],
    [{ maxCost: 1, pricing: { inputPerToken: -1, outputPerToken: 1 } }, "'pricing.inputPerToken' must be a finite number >= 0, got -1"],
    [
      { maxCost: 1, pricing: { ...pricing, cachedPerToken: 0 } },
      "unknown option(s) 'pricing.cachedPerToken' (known: pricing.inputPerToken, pricing.outputPerToken)",
    ],
    // The names come first: a misspelt price is named as such, not as a missing one.
    [
      { maxCost: 1, pricing: { inputPerTokens: 1, outputPerToken: 1 } },
      "unknown option(s) 'pricing.inputPerTokens' (known: pricing.inputPerToken, pricing.outputPerToken)",
    ],
  ])('rejects bad options %#', (options, message) => {
    expect(() => costBudget(options as never)).toThrow(`costBudget: ${message}`);
    expect(() => costBudget(options as never)).toThrow(TypeError);
  });
});

describe('costBudget totals', () => {
  const paidTurn = step(1, 0);

  it('ten calls at $0.10 reach a $1.00 budget (no floating-point shortfall)', async () => {
    const model = scriptedModel([paidTurn], { loop: true });
    const agent = createAgent({
      model,
      tools: [echo],
      maxIterations: 50,
      middleware: [costBudget({ maxCost: 1, pricing: { inputPerToken: 0.1, outputPerToken: 0 } })],
    });
    const events = await collect(agent.run('go'));
    expect(model.calls).toBe(10);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'terminated', terminationReason: 'Budget exhausted: $1.0000 / $1.0000' });
  });

  it('three calls at $0.30 reach a $0.90 budget, though 3 × 0.3 is 0.8999999999999999 in floating point', async () => {
    const model = scriptedModel([paidTurn], { loop: true });
    const agent = createAgent({
      model,
      tools: [echo],
      maxIterations: 50,
      middleware: [costBudget({ maxCost: 0.9, pricing: { inputPerToken: 0.3, outputPerToken: 0 } })],
    });
    const events = await collect(agent.run('go'));
    expect(model.calls).toBe(3);
    expect(events.at(-1)).toMatchObject({ reason: 'terminated', terminationReason: 'Budget exhausted: $0.9000 / $0.9000' });
  });

  it('two instances each price every call against their own budget', async () => {
    const model = scriptedModel([paidTurn], { loop: true });
    const agent = createAgent({
      model,
      tools: [echo],
      maxIterations: 50,
      middleware: [
        costBudget({ maxCost: 10, pricing: { inputPerToken: 1, outputPerToken: 0 } }),
        costBudget({ maxCost: 3, pricing: { inputPerToken: 1, outputPerToken: 0 } }),
      ],
    });
    const events = await collect(agent.run('go'));
    expect(model.calls).toBe(3);
    expect(eventsOfType(events, 'cost-recorded').map((e) => e.totalCost)).toEqual([1, 1, 2, 2, 3, 3]);
  });
});

describe('costBudget registered twice, or from both builds', () => {
  const paid = () => scriptedModel([{ text: 'ok', usage: { inputTokens: 0, outputTokens: 10 } }]);
  const pricing = { inputPerToken: 0, outputPerToken: 0.01 };
  const totals = (events: AgentEvent[]) => eventsOfType(events, 'cost-recorded').map((e) => e.totalCost);

  it('one instance registered twice prices each call once', async () => {
    const budget = costBudget({ maxCost: 100, pricing });
    expect(totals(await collect(createAgent({ model: paid(), middleware: [budget, budget] }).run('go')))).toEqual([0.1]);
  });

  it("an instance from the package's other build keeps its own total", async () => {
    let other: typeof import('../../operators/index') | undefined;
    jest.isolateModules(() => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- jest.isolateModules loads the second copy only through require()
      other = require('../../operators/index');
    });
    const events = await collect(
      createAgent({ model: paid(), middleware: [costBudget({ maxCost: 100, pricing }), other!.costBudget({ maxCost: 100, pricing })] }).run('go'),
    );
    expect(totals(events)).toEqual([0.1, 0.1]);
  });
});
