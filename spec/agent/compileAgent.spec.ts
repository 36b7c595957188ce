import { map } from 'rxjs';
import { createAgent, type AgentMiddleware } from '../../src/index';
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
