import { z } from 'zod';
import { map } from 'rxjs';
import { StateError, createAgent, defineState, defineTool, type AgentMiddleware } from '../../src/index';
import { collectEvents, eventsOfType, scriptedModel } from '../../src/testing/index';
import { StateBag } from '../../src/state/stateBag';

const Counter = defineState({ key: 'test.counter', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session' });

describe('defineState', () => {
  it('checks its definition', () => {
    expect(() => defineState(undefined as never)).toThrow(new TypeError('defineState: expected a definition object, got undefined'));
    expect(() => defineState(null as never)).toThrow(new TypeError('defineState: expected a definition object, got null'));
    expect(() => defineState('counter' as never)).toThrow(new TypeError('defineState: expected a definition object, got "counter"'));
    expect(() => defineState({ key: '', schema: z.number(), initial: () => 0 })).toThrow(/non-empty string key/);
    expect(() => defineState({ key: 'k', schema: {} as z.ZodNumber, initial: () => 0 })).toThrow(/'schema' must be a zod schema/);
    expect(() => defineState({ key: 'k', schema: z.number(), initial: () => 0, scope: 'global' as never })).toThrow(/scope must be 'run' or 'session'/);
    expect(() => defineState({ key: 'k', schema: z.number(), initial: () => 0, version: 0 })).toThrow(/version must be a positive integer/);
  });

  it('defaults to run scope and version 1', () => {
    const d = defineState({ key: 'k', schema: z.number(), initial: () => 0 });
    expect(d).toMatchObject({ scope: 'run', version: 1 });
  });
});

describe('StateBag', () => {
  it('reads the initial value, updates immutably and keeps scopes apart', () => {
    const Run = defineState({ key: 'test.run', schema: z.number(), initial: () => 5 });
    const a = StateBag.empty;
    const b = a.update(Counter, (s) => ({ n: s.n + 1 })).set(Run, 6);
    expect(a.get(Counter)).toEqual({ n: 0 });
    expect(b.get(Counter)).toEqual({ n: 1 });
    expect(b.toStored('session')).toEqual({ 'test.counter': { version: 1, value: { n: 1 } } });
    expect(b.ofScope('session').has('test.run')).toBe(false);
  });

  it('parses a stored value with the schema on first read, and names the key when it does not fit', () => {
    expect(StateBag.fromStored({ 'test.counter': { version: 1, value: { n: 3 } } }).get(Counter)).toEqual({ n: 3 });
    const bad = StateBag.fromStored({ 'test.counter': { version: 1, value: { n: 'three' } } });
    expect(() => bad.get(Counter)).toThrow(StateError);
    expect(() => bad.get(Counter)).toThrow(/State 'test.counter': stored value does not fit the schema/);
  });

  it('needs migrate() for an older stored version', () => {
    const V2 = defineState({
      key: 'test.counter',
      schema: z.object({ n: z.number() }),
      initial: () => ({ n: 0 }),
      scope: 'session',
      version: 2,
      migrate: (old, from) => (from === 1 ? { n: (old as { count: number }).count } : old),
    });
    const stored = { 'test.counter': { version: 1, value: { count: 7 } } };
    expect(StateBag.fromStored(stored).get(V2)).toEqual({ n: 7 });
    const NoMigrate = defineState({ key: 'test.counter', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session', version: 2 });
    expect(() => StateBag.fromStored(stored).get(NoMigrate)).toThrow(/stored version 1 does not match version 2/);
  });
  it('a migrate that is not a function is a TypeError naming it', () => {
    expect(() => defineState({ key: 'k', schema: z.number(), initial: () => 0, version: 2, migrate: 'v1->v2' as never })).toThrow(
      new TypeError("defineState('k'): 'migrate' must be a function"),
    );
  });
});

describe('defineState({ shared: true })', () => {
  const Cart = defineState({ key: 'shop.cart', schema: z.object({ items: z.number() }), initial: () => ({ items: 0 }), shared: true });
  const Private = defineState({ key: 'shop.private', schema: z.number(), initial: () => 0 });
  /** Adds an item to the cart before each model call; touches the private state and leaves the cart as it is once. */
  const shop: AgentMiddleware = {
    name: 'shop',
    beforeIteration: map((ctx) =>
      ctx
        .updateState(Cart, (c) => ({ items: c.items + 1 }))
        .updateState(Cart, (c) => c)
        .updateState(Private, (n) => n + 1),
    ),
  };

  it('emits state-changed { key, value } for each change of a shared state, none for the others', () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'noop', args: {} }] }, 'done']);
    const noop = defineTool({ name: 'noop', description: 'nothing', parameters: z.object({}), execute: () => 'ok' });
    const events = collectEvents(createAgent({ model, tools: [noop], middleware: [shop] }).run('go', { runId: 'r' }));
    expect(eventsOfType(events, 'state-changed')).toEqual([
      { type: 'state-changed', runId: 'r', key: 'shop.cart', value: { items: 1 } },
      { type: 'state-changed', runId: 'r', key: 'shop.cart', value: { items: 2 } },
    ]);
    expect(Cart.shared).toBe(true);
    expect('shared' in Private).toBe(false);
  });

  it("refuses a 'shared' that is not a boolean", () => {
    expect(() => defineState({ key: 'k', schema: z.number(), initial: () => 0, shared: 'yes' as never })).toThrow(
      "defineState('k'): 'shared' must be a boolean",
    );
  });
});
