import { of, type Observable } from 'rxjs';
import { createAgent, type AgentMiddleware, type ModelRequest, type ModelUpdate } from '../../src/index';
import { collectEvents } from '../../src/testing/index';
import { modelTimeout } from '../../operators/modelTimeout';

/** A model that answers with how many messages it was sent (it reads `request.messages`). */
const countingModel = (request: ModelRequest): Observable<ModelUpdate> =>
  of<ModelUpdate[]>({ type: 'text-delta', text: `messages: ${request.messages.length}` }, { type: 'finish', reason: 'stop' });

async function runWith(middleware: AgentMiddleware) {
  const events = await collectEvents(createAgent({ model: countingModel, middleware: [middleware] }).run('hi'));
  return {
    errors: events.filter((e) => e.type === 'error'),
    text: events.filter((e) => e.type === 'text-delta').map((e) => e.text).join(''),
    emitted: events.filter((e) => e.type === 'pii-detected').length,
  };
}

describe('the context of a wrapModel hook, and the request it carries', () => {
  it('may be destructured: call and request', async () => {
    const middleware: AgentMiddleware = { name: 'rewrite', wrapModel: ({ call, request }) => () => call({ ...request, instructions: 'Be brief.' }) };
    expect(await runWith(middleware)).toEqual({ errors: [], text: 'messages: 1', emitted: 0 });
  });

  it('may be destructured: emit and state', async () => {
    const middleware: AgentMiddleware = {
      name: 'announce',
      wrapModel: ({ emit, state }) => {
        expect(typeof state).toBe('function');
        emit({ type: 'pii-detected', piiType: 'email', strategy: 'redact', count: 1 });
        return (source) => source;
      },
    };
    expect(await runWith(middleware)).toEqual({ errors: [], text: 'messages: 1', emitted: 1 });
  });

  it('may be spread into another middleware (a decorator)', async () => {
    const inner = modelTimeout({ firstTokenMs: 1000 });
    const decorator: AgentMiddleware = { name: 'decorator', wrapModel: (ctx) => inner.wrapModel!({ ...ctx }) };
    expect(await runWith(decorator)).toEqual({ errors: [], text: 'messages: 1', emitted: 0 });
  });

  it('request.messages is read through a Proxy over the request, or from an object derived from it', async () => {
    const proxied: AgentMiddleware = { name: 'proxied', wrapModel: (ctx) => () => ctx.call(new Proxy(ctx.request, {})) };
    const derived: AgentMiddleware = { name: 'derived', wrapModel: (ctx) => () => ctx.call(Object.create(ctx.request) as ModelRequest) };
    expect(await runWith(proxied)).toEqual({ errors: [], text: 'messages: 1', emitted: 0 });
    expect(await runWith(derived)).toEqual({ errors: [], text: 'messages: 1', emitted: 0 });
  });

  it('request.messages is an own, enumerable, configurable property, materialised on read', async () => {
    let request: ModelRequest | undefined;
    await runWith({ name: 'peek', wrapModel: (ctx) => ((request = ctx.request), (source) => source) });
    const descriptor = Object.getOwnPropertyDescriptor(request, 'messages');
    expect(descriptor).toMatchObject({ enumerable: true, configurable: true });
    expect(typeof descriptor?.get).toBe('function');
    expect(Object.keys(request as object)).toContain('messages');
    expect({ ...request }.messages).toHaveLength(1);
    expect(request).toEqual({ messages: [expect.objectContaining({ role: 'user' })], tools: [], settings: {} });
  });
});
