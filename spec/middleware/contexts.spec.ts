import { map } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineState, mapContext, type AgentMiddleware, type IterationContext, type Usage } from '../../src/index';
import { collectEvents, eventsOfType, scriptedModel } from '../../src/testing/index';

const usage = (inputTokens: number, outputTokens: number): Usage => ({ inputTokens, outputTokens });

describe('AgentContext.reportUsage', () => {
  it("adds a middleware's own model tokens to the iteration's usage, totalUsage and run-end.usage", () => {
    const seen: Array<Usage | undefined> = [];
    const totals: Usage[] = [];
    const reporter: AgentMiddleware = {
      name: 'reporter',
      beforeMessageTurn: mapContext((ctx) => (ctx.reportUsage(usage(100, 1), { model: 'picker' }), ctx)),
      beforeIteration: mapContext((ctx) => (ctx.reportUsage(usage(10, 2)), totals.push(ctx.totalUsage), ctx)),
      afterIteration: mapContext((ctx) => (seen.push(ctx.usage), ctx)),
      afterMessageTurn: mapContext((ctx) => (ctx.reportUsage(usage(1000, 0)), ctx)),
    };
    const model = scriptedModel([
      { toolCalls: [{ name: 'missing', args: {} }], usage: usage(5, 5) },
      { text: 'ok', usage: usage(7, 7) },
    ]);
    const events = collectEvents(createAgent({ model, middleware: [reporter] }).run('hi'));
    // The first iteration holds what the turn's start reported too.
    expect(seen).toEqual([usage(115, 8), usage(17, 9)]);
    expect(eventsOfType(events, 'iteration-end').map((e) => e.usage)).toEqual([usage(115, 8), usage(17, 9)]);
    expect(totals).toEqual([usage(0, 0), usage(115, 8)]);
    // afterMessageTurn's report comes after the last iteration: run-end counts it.
    expect(eventsOfType(events, 'run-end')[0].usage).toEqual(usage(1132, 17));
  });

  it('counts a report from a wrapModel hook, and one of an iteration that then failed', () => {
    const reporter: AgentMiddleware = {
      name: 'reporter',
      wrapModel: (ctx) => (source) => (ctx.reportUsage(usage(3, 4), { model: 'side' }), source),
    };
    const model = scriptedModel([{ error: new Error('down') }]);
    const events = collectEvents(createAgent({ model, middleware: [reporter] }).run('hi'));
    expect(eventsOfType(events, 'run-end')[0]).toMatchObject({ reason: 'error', usage: usage(3, 4) });
  });

  it('refuses what is not a usage, naming it', () => {
    const bad = (value: unknown, options?: unknown): AgentMiddleware => ({
      name: 'bad',
      beforeIteration: map((ctx) => (ctx.reportUsage(value as Usage, options as { model?: string }), ctx)),
    });
    const errorOf = (m: AgentMiddleware) =>
      eventsOfType(collectEvents(createAgent({ model: scriptedModel(['x']), middleware: [m] }).run('hi')), 'error')[0]?.error.message;
    expect(errorOf(bad({ inputTokens: -1, outputTokens: 0 }))).toBe(
      'reportUsage: usage must be { inputTokens, outputTokens }, each a non-negative integer, got {"inputTokens":-1,"outputTokens":0}',
    );
    expect(errorOf(bad(undefined))).toMatch(/^reportUsage: usage must be .* got undefined$/);
    expect(errorOf(bad(usage(1, 1), { model: 5 }))).toBe("reportUsage: 'model' must be a string, got 5");
  });
});

describe('IterationContext.updateState', () => {
  it('returns a copy with the new state and every other field as it was', () => {
    const Count = defineState({ key: 'spec.count', schema: z.number(), initial: () => 0, scope: 'run' });
    const pairs: Array<[IterationContext, IterationContext]> = [];
    const counter: AgentMiddleware = {
      name: 'counter',
      afterIteration: mapContext((ctx) => {
        const next = ctx.updateState(Count, (n) => n + 1);
        pairs.push([ctx, next]);
        return next;
      }),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'missing', args: {} }], usage: usage(5, 5) }, 'done']);
    collectEvents(createAgent({ model, middleware: [counter] }).run('hi'));
    expect(pairs).toHaveLength(2);
    const fields = (c: IterationContext) => {
      const { iteration, instructions, tools, toolChoice, settings, response, toolResults, usage, modelCallSkipped, termination, final, messages } = c;
      return { iteration, instructions, tools, toolChoice, settings, response, toolResults, usage, modelCallSkipped, termination, final, messages };
    };
    pairs.forEach(([before, after], i) => {
      expect(after).not.toBe(before);
      expect(fields(after)).toEqual(fields(before));
      expect(before.state(Count)).toBe(i);
      expect(after.state(Count)).toBe(i + 1);
    });
    expect(fields(pairs[0][1])).toMatchObject({ iteration: 0, final: false, usage: usage(5, 5), toolResults: [expect.objectContaining({ isError: true })] });
  });
});
