import { map } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentMiddleware } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';

describe('createAgent checks every hook of every middleware', () => {
  const PHASES = [
    'beforeMessageTurn',
    'beforeIteration',
    'beforeToolExecution',
    'beforeFunction',
    'afterFunction',
    'afterIteration',
    'afterMessageTurn',
    'onError',
  ] as const;

  it.each(PHASES.map((hook) => [hook]))("a '%s' that is not a function is a TypeError at createAgent, naming the middleware and the hook", (hook) => {
    const model = scriptedModel(['never asked']);
    const middleware = [
      { name: 'fine', beforeIteration: map((ctx) => ctx) },
      { name: 'broken', [hook]: 'map(ctx => ctx)' },
    ] as AgentMiddleware[];
    expect(() => createAgent({ model, middleware })).toThrow(
      new TypeError(`createAgent: middleware 'broken': '${hook}' must be an operator (a function, e.g. map(...)), got "map(ctx => ctx)"`),
    );
    expect(model.calls).toBe(0);
  });

  it.each([['wrapModel'], ['wrapFunction']])("a '%s' that is not a function is a TypeError naming the middleware and the hook", (hook) => {
    const middleware = [{ name: 'wrapper', [hook]: { pipe: () => undefined } }] as unknown as AgentMiddleware[];
    expect(() => createAgent({ model: scriptedModel([]), middleware })).toThrow(
      new TypeError(`createAgent: middleware 'wrapper': '${hook}' must be a function (ctx) => operator, got {}`),
    );
  });

  it.each([
    ['a number', 42, '42'],
    ['true', true, 'true'],
    ['false (a `cond && op` that was false)', false, 'false'],
    ['an array of operators', [map((x) => x)], '[null]'],
  ])('%s is refused too', (_, value, shown) => {
    expect(() => createAgent({ model: scriptedModel([]), middleware: [{ name: 'm', afterIteration: value } as never] })).toThrow(
      `createAgent: middleware 'm': 'afterIteration' must be an operator (a function, e.g. map(...)), got ${shown}`,
    );
  });

  it('an absent hook (undefined or null) is no hook, and a run goes through', async () => {
    const middleware = [
      { name: 'sparse', beforeIteration: undefined, afterIteration: null, wrapModel: undefined, onError: map((ctx) => ctx) },
    ] as unknown as AgentMiddleware[];
    const agent = createAgent({ model: scriptedModel(['ok']), middleware });
    await expect(agent.invoke('go')).resolves.toMatchObject({ reason: 'completed', text: 'ok' });
  });
});

describe("createAgent checks a middleware's tools", () => {
  const echo = defineTool({ name: 'echo', description: 'echo', parameters: z.object({}), execute: () => 'echo' });

  it('names the middleware of a tool that is not one, with its position in that middleware', () => {
    const other = defineTool({ name: 'other', description: 'other', parameters: z.object({}), execute: () => 'other' });
    const middleware = [{ name: 'helper', tools: [other, { name: 'x' }] }] as unknown as AgentMiddleware[];
    // Position 1 of the helper's tools (the second tool of the agent as a whole would be position 2).
    expect(() => createAgent({ model: scriptedModel([]), tools: [echo], middleware })).toThrow(
      new TypeError("createAgent: middleware 'helper': tool at position 1 is not a tool; make tools with defineTool()"),
    );
  });

  it("names the middleware whose 'tools' is not an array", () => {
    const middleware = [{ name: 'helper', tools: echo }] as unknown as AgentMiddleware[];
    expect(() => createAgent({ model: scriptedModel([]), middleware })).toThrow(
      new TypeError("createAgent: middleware 'helper': 'tools' must be an array of tools made with defineTool (tools: [myTool])"),
    );
  });

  it("a tool of the agent's own is named by its position in 'tools', and a name used twice across both is refused", () => {
    expect(() => createAgent({ model: scriptedModel([]), tools: [echo, { name: 'x' } as never] })).toThrow(
      new TypeError('createAgent: tool at position 1 is not a tool; make tools with defineTool()'),
    );
    expect(() => createAgent({ model: scriptedModel([]), tools: [echo], middleware: [{ name: 'helper', tools: [echo] }] })).toThrow(
      "createAgent: two tools are named 'echo'",
    );
  });
});
