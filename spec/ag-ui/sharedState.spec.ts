import { EventType, HttpAgent, type AbstractAgent, type BaseEvent } from '@ag-ui/client';
import { z } from 'zod';
import { createAgent, defineState, defineTool, mapContext, type Agent, type AgentMiddleware, type ModelRequest } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';
import { agUiHandler, AgUiAgent, type AgUiAgentConfig } from '../../src/ag-ui/index';
import { serveFetch } from '../support/fetchServer';
import { schemaFailures } from './agUiKit';

// Shared state both ways: the client's `state` (RunAgentInput.state) is where a run starts from,
// for the keys the agent shares; the run's changes come back as STATE_DELTA.

const Cart = defineState({
  key: 'shop.cart',
  schema: z.object({ items: z.number(), owner: z.string().transform((name) => name.toUpperCase()) }),
  initial: () => ({ items: 0, owner: 'NOBODY' }),
  shared: true,
});
const Calls = defineState({ key: 'shop.calls', schema: z.number(), initial: () => 0 });

/** A cart agent: the model is told the cart, adds an item (the middleware counts it in the cart), then says what it was told. */
function cartAgent() {
  const addItem = defineTool({ name: 'add_item', description: 'Adds an item', parameters: z.object({}), execute: () => 'added' });
  const cart: AgentMiddleware = {
    name: 'cart',
    state: [Cart, Calls],
    beforeIteration: mapContext((ctx) => ctx.with({ instructions: `cart ${JSON.stringify(ctx.state(Cart))}` })),
    afterFunction: mapContext((ctx) => ctx.updateState(Cart, (c) => ({ ...c, items: c.items + 1 })).updateState(Calls, (n) => n + 1)),
  };
  const model = scriptedModel(
    [{ toolCalls: [{ name: 'add_item', args: {}, callId: 'c1' }] }, (request: ModelRequest) => `I was told ${request.instructions}`],
    {
      loop: true,
    },
  );
  return { agent: createAgent({ model, tools: [addItem], middleware: [cart] }), model };
}

/** The client's starting state: a shared key, the middleware's own key (not shared) and a key of the client's own. */
const clientState = { 'shop.cart': { items: 2, owner: 'ada' }, 'shop.calls': 99, theme: 'dark' };

/** Runs `ui` once, with its events. */
async function runOnce(ui: AbstractAgent, runId: string): Promise<{ seen: BaseEvent[]; text: unknown }> {
  const seen: BaseEvent[] = [];
  ui.messages.push({ id: `${runId}-u`, role: 'user', content: 'Add one' });
  const { result } = await ui.runAgent({ runId }, { onEvent: ({ event }) => void seen.push(event) });
  return { seen, text: (result as { text?: unknown } | undefined)?.text };
}

describe.each([
  ['agUiHandler through the real HttpAgent', 'http'],
  ['AgUiAgent in process', 'local'],
] as const)('shared state, %s', (_name, transport) => {
  let server: Awaited<ReturnType<typeof serveFetch>> | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  /** The client of `agent` over this transport, starting from `initialState`. */
  async function clientOf(
    agent: ReturnType<typeof cartAgent>['agent'],
    initialState: object,
    options: Pick<AgUiAgentConfig, 'runOptions' | 'onError'> = {},
  ): Promise<AbstractAgent> {
    if (transport === 'local') return new AgUiAgent(agent, { threadId: 't', initialState, ...options });
    server = await serveFetch(agUiHandler(agent, options));
    return new HttpAgent({ url: server.url, threadId: 't', initialState });
  }

  it("the run starts from the client's state; the client keeps its own keys and gets the run's changes", async () => {
    const { agent, model } = cartAgent();
    const ui = await clientOf(agent, clientState);
    const { seen, text } = await runOnce(ui, 'r1');
    expect(schemaFailures(seen)).toEqual([]);
    // The model read the client's cart (parsed by its schema) from the first iteration on.
    expect(model.requests[0].instructions).toBe('cart {"items":2,"owner":"ADA"}');
    expect(text).toBe('I was told cart {"items":3,"owner":"ADA"}');
    // No snapshot (it would drop the client's own keys): the change is a patch of its key.
    expect(seen.filter((e) => e.type === EventType.STATE_SNAPSHOT)).toEqual([]);
    expect(seen.filter((e) => e.type === EventType.STATE_DELTA)).toEqual([
      { type: EventType.STATE_DELTA, delta: [{ op: 'add', path: '/shop.cart', value: { items: 3, owner: 'ADA' } }] },
    ]);
    // The middleware's own state ('shop.calls') is not the client's to set, nor sent to it: the client's 99 stays as it was.
    expect(ui.state).toEqual({ 'shop.cart': { items: 3, owner: 'ADA' }, 'shop.calls': 99, theme: 'dark' });

    // The next turn starts from the state the client has now.
    await runOnce(ui, 'r2');
    expect(model.requests[2].instructions).toBe('cart {"items":3,"owner":"ADA"}');
    expect(ui.state).toMatchObject({ 'shop.cart': { items: 4, owner: 'ADA' }, theme: 'dark' });
  });

  it('a value the schema refuses fails the run: RUN_ERROR, saying why when onError tells it', async () => {
    const { agent, model } = cartAgent();
    const ui = await clientOf(agent, { 'shop.cart': { items: 'two', owner: 'ada' }, theme: 'dark' }, { onError: (error) => error.message });
    const { seen } = await runOnce(ui, 'bad');
    expect(schemaFailures(seen)).toEqual([]);
    expect(seen.at(-1)).toMatchObject({
      type: EventType.RUN_ERROR,
      code: 'TypeError',
      message: expect.stringMatching(/^run: state 'shop\.cart' does not fit its schema: .*expected number, received string/),
    });
    expect(model.calls).toBe(0);
    expect(ui.state).toEqual({ 'shop.cart': { items: 'two', owner: 'ada' }, theme: 'dark' });
  });

  it("a runOptions that gives a state of its own wins over the client's", async () => {
    const { agent, model } = cartAgent();
    const ui = await clientOf(agent, clientState, { runOptions: () => ({ state: { 'shop.cart': { items: 7, owner: 'server' } } }) });
    await runOnce(ui, 'own');
    expect(model.requests[0].instructions).toBe('cart {"items":7,"owner":"SERVER"}');
    expect(ui.state).toEqual({ 'shop.cart': { items: 8, owner: 'SERVER' }, 'shop.calls': 99, theme: 'dark' });
  });

  it('a client without the shared keys: the run starts from their initial values', async () => {
    const { agent, model } = cartAgent();
    const ui = await clientOf(agent, { theme: 'light' });
    await runOnce(ui, 'none');
    expect(model.requests[0].instructions).toBe('cart {"items":0,"owner":"NOBODY"}');
    expect(ui.state).toEqual({ 'shop.cart': { items: 1, owner: 'NOBODY' }, theme: 'light' });
  });
});

describe("the client's state a run takes, from a JSON body (whose '__proto__' key is an own key)", () => {
  /** Posts `state` (JSON text) to `agent`'s handler; the model's first instructions. */
  async function instructionsFor(agent: Agent, model: { readonly requests: readonly ModelRequest[] }, state: string) {
    const body = `{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"Add one"}],"state":${state}}`;
    const response = await agUiHandler(agent)(new Request('http://x/', { method: 'POST', headers: { 'content-type': 'application/json' }, body }));
    const frames = await response.text();
    expect(frames).toContain('"type":"RUN_FINISHED"');
    return model.requests[0].instructions;
  }

  it("only the keys the agent shares pass: a '__proto__' key neither passes nor pollutes", async () => {
    const { agent, model } = cartAgent();
    const state = '{"__proto__":{"shop.cart":{"items":9,"owner":"eve"},"polluted":"yes"},"shop.cart":{"items":2,"owner":"ada"},"theme":"dark"}';
    expect(await instructionsFor(agent, model, state)).toBe('cart {"items":2,"owner":"ADA"}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    // Without the shared key, the run starts from its initial value, not from what '__proto__' holds.
    const other = cartAgent();
    expect(await instructionsFor(other.agent, other.model, '{"__proto__":{"shop.cart":{"items":9,"owner":"eve"}}}')).toBe('cart {"items":0,"owner":"NOBODY"}');
  });

  it("a key named '__proto__' the agent shares passes as data, not as the prototype", async () => {
    const Odd = defineState({ key: '__proto__', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), shared: true });
    const odd: AgentMiddleware = {
      name: 'odd',
      state: [Odd],
      beforeIteration: mapContext((ctx) => ctx.with({ instructions: `odd ${JSON.stringify(ctx.state(Odd))}` })),
    };
    const model = scriptedModel(['Done.']);
    const agent = createAgent({ model, middleware: [odd] });
    expect(await instructionsFor(agent, model, '{"__proto__":{"n":5},"theme":"dark"}')).toBe('odd {"n":5}');
    expect(({} as Record<string, unknown>).n).toBeUndefined();
  });
});
