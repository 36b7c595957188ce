import { map } from 'rxjs';
import { z } from 'zod';
import {
  createAgent,
  defineState,
  defineTool,
  mapContext,
  textMessage,
  type AgentContext,
  type AgentMiddleware,
  type IterationContext,
  type Usage,
} from '../../src/index';
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

describe('a control method called without its context', () => {
  it('fails the run with a TypeError that says to call it on the context', () => {
    const destructuring: AgentMiddleware = {
      name: 'destructuring',
      beforeIteration: mapContext((ctx) => {
        // eslint-disable-next-line @typescript-eslint/unbound-method -- the misuse under test
        const { terminate } = ctx;
        return terminate('done');
      }),
    };
    const events = collectEvents(createAgent({ model: scriptedModel(['x']), middleware: [destructuring] }).run('hi'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      middleware: 'destructuring',
      error: { name: 'TypeError', message: 'terminate() was called without its context: call it on the context, as ctx.terminate(…)' },
    });
  });

  it('throws the same TypeError from every method of every context', () => {
    const Count = defineState({ key: 'spec.unbound', schema: z.number(), initial: () => 0, scope: 'run' });
    const broken = defineTool({
      name: 'broken',
      description: 'throws',
      parameters: z.object({}),
      execute: () => {
        throw new Error('tool broke');
      },
    });
    const seen = new Map<string, AgentContext>();
    const keep =
      <C extends AgentContext>(name: string) =>
      (ctx: C): C => (seen.set(name, ctx), ctx);
    const collector: AgentMiddleware = {
      name: 'collector',
      beforeMessageTurn: mapContext(keep('turn')),
      beforeIteration: mapContext(keep('iteration')),
      beforeToolExecution: mapContext(keep('batch')),
      beforeFunction: mapContext(keep('function')),
      afterFunction: mapContext(keep('result')),
      onError: mapContext(keep('error')),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'broken', args: {} }] }, 'done']);
    collectEvents(createAgent({ model, tools: [broken], middleware: [collector] }).run('hi'));
    const calls: Array<[string, string, unknown[]]> = [
      ['turn', 'with', [{}]],
      ['turn', 'terminate', ['done']],
      ['turn', 'updateState', [Count, (n: number) => n + 1]],
      ['iteration', 'with', [{}]],
      ['iteration', 'skipModelCall', [textMessage('assistant', 'cached')]],
      ['iteration', 'terminate', ['done']],
      ['iteration', 'updateState', [Count, (n: number) => n + 1]],
      ['batch', 'with', [{}]],
      ['batch', 'skipTools', ['no']],
      ['batch', 'terminate', ['done']],
      ['function', 'with', [{ args: {} }]],
      ['function', 'block', ['blocked']],
      ['result', 'with', [{ result: 'ok' }]],
      ['error', 'with', [{ error: new Error('clearer') }]],
    ];
    for (const [context, method, args] of calls) {
      const ctx = seen.get(context) as unknown as Record<string, (...a: unknown[]) => unknown>;
      expect(ctx).toBeDefined();
      const detached = ctx[method];
      expect(() => detached(...args)).toThrow(new TypeError(`${method}() was called without its context: call it on the context, as ctx.${method}(…)`));
      expect(() => detached.apply({}, args)).toThrow(TypeError);
      expect(ctx[method](...args)).not.toBe(ctx); // on its context, the method works
    }
    // The other methods of every context say the same (called on their context they are tested elsewhere).
    const others: Array<[string, unknown[]]> = [
      ['state', [Count]],
      ['emit', [{ type: 'custom', name: 'x', data: {} }]],
      ['reportUsage', [{ inputTokens: 1, outputTokens: 1 }]],
      ['request', [{ type: 'approval-request', toolName: 'broken', args: {} }]],
    ];
    for (const [method, args] of others) {
      const detached = (seen.get('iteration') as unknown as Record<string, (...a: unknown[]) => unknown>)[method];
      expect(() => detached(...args)).toThrow(new TypeError(`${method}() was called without its context: call it on the context, as ctx.${method}(…)`));
    }
  });
});
