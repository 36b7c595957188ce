import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineState, InMemorySessionStore, mapContext, type AgentMiddleware } from '../../src/index';
import { collectEvents, eventsOfType, scriptedModel } from '../../src/testing/index';

// A run's `state` option: starting values of the shared state its middleware list.

const Cart = defineState({
  key: 'shop.cart',
  schema: z.object({ items: z.number(), note: z.string().default('none'), owner: z.string().transform((name) => name.toUpperCase()) }),
  initial: () => ({ items: 0, note: 'none', owner: 'NOBODY' }),
  shared: true,
});
const Prefs = defineState({ key: 'ui.prefs', schema: z.object({ theme: z.string() }), initial: () => ({ theme: 'light' }), scope: 'session', shared: true });
const Calls = defineState({ key: 'shop.calls', schema: z.number(), initial: () => 0 });

/** Tells the model the state it reads (as its instructions), and counts its calls in a state of its own. */
const shop: AgentMiddleware = {
  name: 'shop',
  state: [Cart, Prefs, Calls],
  beforeIteration: mapContext((ctx) =>
    ctx.updateState(Calls, (n) => n + 1).with({ instructions: `cart ${JSON.stringify(ctx.state(Cart))}, prefs ${JSON.stringify(ctx.state(Prefs))}` }),
  ),
};

/** An agent whose model answers with what it was told. */
function shopAgent() {
  const model = scriptedModel([(request) => `I see ${request.instructions}`], { loop: true });
  return createAgent({ model, middleware: [shop] });
}

const finalText = (events: ReturnType<typeof collectEvents>) => eventsOfType(events, 'run-end')[0].text;

describe("run(input, { state }): a run's starting values of shared state", () => {
  it("replace the definition's initial(): the model reads them from the run's first hook on", () => {
    const events = collectEvents(shopAgent().run('hi', { state: { 'shop.cart': { items: 2, note: 'gift', owner: 'ada' } } }));
    expect(finalText(events)).toBe('I see cart {"items":2,"note":"gift","owner":"ADA"}, prefs {"theme":"light"}');
    // Starting values are not changes: no state-changed event for them.
    expect(eventsOfType(events, 'state-changed')).toEqual([]);
  });

  it("are parsed by the key's schema: its defaults and transforms apply", () => {
    const events = collectEvents(shopAgent().run('hi', { state: { 'shop.cart': { items: 1, owner: 'grace' } } }));
    expect(finalText(events)).toBe('I see cart {"items":1,"note":"none","owner":"GRACE"}, prefs {"theme":"light"}');
  });

  it("replace a session-scoped key's session value for the run, and are saved with its turn", async () => {
    const store = new InMemorySessionStore();
    const agent = shopAgent();
    const run = async (state?: Record<string, unknown>) =>
      (await agent.invoke('hi', { session: createSession({ id: 's1', store }), ...(state === undefined ? {} : { state }) })).text;

    expect(await run({ 'ui.prefs': { theme: 'dark' } })).toContain('prefs {"theme":"dark"}');
    expect(store.load('s1')?.state['ui.prefs']).toEqual({ version: 1, value: { theme: 'dark' } });
    expect(await run()).toContain('prefs {"theme":"dark"}'); // the session's value now
    expect(await run({ 'ui.prefs': { theme: 'blue' } })).toContain('prefs {"theme":"blue"}'); // over the session's
    expect(store.load('s1')?.state['ui.prefs']).toEqual({ version: 1, value: { theme: 'blue' } });
  });

  it('leave the keys not given as they were', () => {
    const session = createSession({ snapshot: { version: 1, id: 's2', messages: [], state: { 'ui.prefs': { version: 1, value: { theme: 'dark' } } } } });
    const events = collectEvents(shopAgent().run('hi', { session, state: { 'shop.cart': { items: 3, owner: 'x' } } }));
    expect(finalText(events)).toBe('I see cart {"items":3,"note":"none","owner":"X"}, prefs {"theme":"dark"}');
  });

  describe('a state the run cannot start from ends it with an error event naming the key and why, and run-end reason error', () => {
    const refused = (state: unknown) => {
      const events = collectEvents(shopAgent().run('hi', { state: state as Record<string, unknown> }));
      expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
      expect(events[2]).toMatchObject({ reason: 'error' });
      expect(events[1]).toMatchObject({ source: 'run', error: { name: 'TypeError' } });
      return eventsOfType(events, 'error')[0].error.message;
    };

    it('a key no middleware of the agent shares', () => {
      expect(refused({ 'shop.cart': { items: 1, owner: 'a' }, 'no.such.key': 1 })).toBe(
        "run: state 'no.such.key' cannot be given: no middleware of this agent shares state with that key (only state defined with shared: true, in a middleware's 'state', can be)",
      );
    });

    it("a key that is not shared: it is its middleware's own", () => {
      expect(refused({ 'shop.calls': 5 })).toBe(
        "run: state 'shop.calls' cannot be given: it is not shared (defined without shared: true), so it is its middleware's own",
      );
    });

    it("a value the key's schema refuses, with zod's reason", () => {
      const message = refused({ 'shop.cart': { items: 'two', owner: 'a' } });
      expect(message).toMatch(/^run: state 'shop\.cart' does not fit its schema: /);
      expect(message).toContain('expected number, received string');
      expect(message).toContain('items');
    });

    it('a schema that throws while it parses', () => {
      const Strict = defineState({
        key: 'strict',
        schema: z.string().transform(() => {
          throw new Error('no thanks');
        }),
        initial: () => undefined as never,
        shared: true,
      });
      const agent = createAgent({ model: scriptedModel(['ok']), middleware: [{ name: 'strict', state: [Strict] }] });
      const events = collectEvents(agent.run('hi', { state: { strict: 'x' } }));
      expect(eventsOfType(events, 'error')[0].error.message).toBe("run: state 'strict' could not be parsed: no thanks");
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
    });

    it.each([[42], ['cart'], [null], [[{ items: 1 }]]])('a state that is not an object: %j', (state) => {
      expect(refused(state)).toBe(`run: 'state' must be an object of starting values by state key, got ${JSON.stringify(state)}`);
    });

    it('never as an Observable error or a throw from run(); invoke() rejects with it', async () => {
      const agent = shopAgent();
      const run$ = agent.run('hi', { state: { nope: 1 } });
      await expect(lastValueFrom(run$.pipe(toArray()))).resolves.toHaveLength(3);
      await expect(agent.invoke('hi', { state: { nope: 1 } })).rejects.toThrow("run: state 'nope' cannot be given");
    });
  });
});

describe("createAgent checks a middleware's 'state'", () => {
  const model = scriptedModel([]);

  it('an array of definitions made with defineState', () => {
    expect(() => createAgent({ model, middleware: [{ name: 'm', state: Cart } as never] })).toThrow(
      new TypeError("createAgent: middleware 'm': 'state' must be an array of definitions made with defineState"),
    );
    expect(() => createAgent({ model, middleware: [{ name: 'm', state: [Cart, { key: 'x' }] } as never] })).toThrow(
      new TypeError("createAgent: middleware 'm': state at position 1 is not a state definition; make them with defineState()"),
    );
  });

  it('two definitions of one key agree on its scope and on whether it is shared', () => {
    const Private = defineState({ key: 'shop.cart', schema: z.object({ items: z.number() }), initial: () => ({ items: 0 }) });
    expect(() => createAgent({ model, middleware: [shop, { name: 'other', state: [Private] }] })).toThrow(
      new TypeError(
        "createAgent: middleware 'other': state 'shop.cart' is defined twice, differently: shared with scope 'run', then not shared with scope 'run'",
      ),
    );
    expect(() => createAgent({ model, middleware: [shop, { name: 'copy', state: [Cart] }] })).not.toThrow();
  });
});
