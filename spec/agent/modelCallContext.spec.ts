import { EMPTY, catchError, concat, defer, ignoreElements, of, retry, type Observable } from 'rxjs';
import { z } from 'zod';
import {
  createAgent,
  defineState,
  defineTool,
  ModelError,
  type AgentMiddleware,
  type ModelCallContext,
  type ModelRequest,
  type ModelUpdate,
} from '../../src/index';
import { collectEvents, eventsOfType, scriptedModel } from '../../src/testing/index';
import { modelTimeout } from '../../operators/modelTimeout';

/**
 * A model that answers with how many messages it was sent (it reads `request.messages`) and, when
 * the request has them, its instructions.
 */
const countingModel = (request: ModelRequest): Observable<ModelUpdate> =>
  of<ModelUpdate[]>(
    { type: 'text-delta', text: `messages: ${request.messages.length}${request.instructions ? `, ${request.instructions}` : ''}` },
    { type: 'finish', reason: 'stop' },
  );

function runWith(middleware: AgentMiddleware) {
  const events = collectEvents(createAgent({ model: countingModel, middleware: [middleware] }).run('hi'));
  return {
    errors: eventsOfType(events, 'error'),
    text: eventsOfType(events, 'text-delta')
      .map((e) => e.text)
      .join(''),
    emitted: eventsOfType(events, 'pii-detected').length,
  };
}

const Seen = defineState({ key: 'spec.seen', schema: z.number(), initial: () => 7, scope: 'run' });

describe('the context of a wrapModel hook, and the request it carries', () => {
  it('may be destructured: call and request', () => {
    const middleware: AgentMiddleware = {
      name: 'rewrite',
      wrapModel:
        ({ call, request }) =>
        () =>
          call({ ...request, instructions: 'Be brief.' }),
    };
    expect(runWith(middleware)).toEqual({ errors: [], text: 'messages: 1, Be brief.', emitted: 0 });
  });

  it('may be destructured: emit and state', () => {
    let read: number | undefined;
    const middleware: AgentMiddleware = {
      name: 'announce',
      wrapModel: ({ emit, state }) => {
        read = state(Seen);
        emit({ type: 'pii-detected', piiType: 'email', strategy: 'redact', count: 1 });
        return (source) => source;
      },
    };
    expect(runWith(middleware)).toEqual({ errors: [], text: 'messages: 1', emitted: 1 });
    expect(read).toBe(7);
  });

  it('may be spread into another middleware (a decorator)', () => {
    const inner = modelTimeout({ firstTokenMs: 1000 });
    const decorator: AgentMiddleware = { name: 'decorator', wrapModel: (ctx) => inner.wrapModel!({ ...ctx }) };
    expect(runWith(decorator)).toEqual({ errors: [], text: 'messages: 1', emitted: 0 });
  });

  it('request.messages is read through a Proxy over the request, or from an object derived from it', () => {
    const proxied: AgentMiddleware = { name: 'proxied', wrapModel: (ctx) => () => ctx.call(new Proxy(ctx.request, {})) };
    const derived: AgentMiddleware = { name: 'derived', wrapModel: (ctx) => () => ctx.call(Object.create(ctx.request) as ModelRequest) };
    expect(runWith(proxied)).toEqual({ errors: [], text: 'messages: 1', emitted: 0 });
    expect(runWith(derived)).toEqual({ errors: [], text: 'messages: 1', emitted: 0 });
  });

  it('request.messages is an own, enumerable, configurable property, materialised on read', () => {
    let request: ModelRequest | undefined;
    runWith({ name: 'peek', wrapModel: (ctx) => ((request = ctx.request), (source) => source) });
    const descriptor = Object.getOwnPropertyDescriptor(request, 'messages');
    expect(descriptor).toMatchObject({ enumerable: true, configurable: true });
    expect(typeof descriptor?.get).toBe('function');
    expect(Object.keys(request as object)).toContain('messages');
    expect({ ...request }.messages).toHaveLength(1);
    expect(request).toEqual({ messages: [expect.objectContaining({ role: 'user' })], tools: [], settings: {} });
  });
});

describe('a wrapModel that breaks the contract is named', () => {
  const judge = () => of<ModelUpdate[]>({ type: 'text-delta', text: 'fine' }, { type: 'finish', reason: 'stop' });
  /** Builds a side request through ctx.call() in wrap() itself, so the inner chain is built there. */
  const eager: AgentMiddleware = {
    name: 'eager',
    wrapModel: (ctx) => {
      const side: Observable<ModelUpdate> = ctx.call(ctx.request, judge);
      return (source) => concat(source, side.pipe(ignoreElements()));
    },
  };
  const errorOf = (middleware: AgentMiddleware[]) =>
    eventsOfType(collectEvents(createAgent({ model: scriptedModel(['hi']), middleware }).run('q')), 'error')[0];

  it.each([
    ['returns no operator', (() => 42) as never, "Middleware 'inner' wrapModel is not an operator: it returned 42"],
    [
      'has an operator that throws',
      () => () => {
        throw new Error('boom');
      },
      'boom',
    ],
    ['has an operator that returns no Observable', () => () => 'nope' as never, `Middleware 'inner' wrapModel's operator returned "nope", not an Observable`],
  ] as const)('one that %s, alone or inside a wrapper that builds it through ctx.call()', (_label, wrapModel, message) => {
    const inner: AgentMiddleware = { name: 'inner', wrapModel: wrapModel };
    for (const middleware of [[inner], [eager, inner]]) {
      expect(errorOf(middleware)).toMatchObject({ source: 'middleware', middleware: 'inner', error: { message } });
    }
  });

  it('an inner wrapper that fails while an outer operator builds it again through ctx.call() is the one named', () => {
    let built = 0;
    const inner: AgentMiddleware = {
      name: 'inner',
      wrapModel: () => {
        if (++built > 1) throw new Error('inner broke on its second build');
        return (source) => source;
      },
    };
    const late: AgentMiddleware = { name: 'late', wrapModel: (ctx) => () => ctx.call(ctx.request) };
    expect(errorOf([late, inner])).toMatchObject({ source: 'middleware', middleware: 'inner', error: { message: 'inner broke on its second build' } });
  });

  it("is never seen by the operators of the wrapper whose ctx.call() built it: a plain retry() retries the model's errors, not the breach", () => {
    let built = 0;
    const inner: AgentMiddleware = { name: 'inner', wrapModel: () => (++built > 1 ? (42 as never) : (source) => source) };
    let caught = 0;
    const user: AgentMiddleware = {
      name: 'user',
      wrapModel: (ctx) => () =>
        defer(() => ctx.call()).pipe(
          retry(3),
          catchError(() => (caught++, EMPTY)),
        ),
    };
    const events = collectEvents(createAgent({ model: scriptedModel(['hi']), middleware: [user, inner] }).run('q'));
    expect(eventsOfType(events, 'error')).toEqual([
      expect.objectContaining({
        source: 'middleware',
        middleware: 'inner',
        error: expect.objectContaining({ message: "Middleware 'inner' wrapModel is not an operator: it returned 42" }),
      }),
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
    expect([built, caught]).toEqual([2, 0]);

    // The same wrapper over a model that fails once: retry() sends the request again.
    const flaky = scriptedModel([{ error: new ModelError('overloaded', { status: 503 }) }, 'second try']);
    const retried = collectEvents(createAgent({ model: flaky, middleware: [user] }).run('q'));
    expect(retried.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'second try' });
    expect([flaky.calls, caught]).toEqual([2, 0]);
  });

  it('a ctx.call() made after its model call is over errors with the breach (no run step is left to fail)', () => {
    const lookup = defineTool({ name: 'lookup', description: 'Looks up.', parameters: z.object({}), execute: () => 'found' });
    let built = 0;
    const inner: AgentMiddleware = { name: 'inner', wrapModel: () => (++built > 2 ? (42 as never) : (source) => source) };
    let first: ModelCallContext | undefined;
    const keeper: AgentMiddleware = { name: 'keeper', wrapModel: (ctx) => ((first ??= ctx), ctx.iteration === 0 ? (source) => source : () => first!.call()) };
    const model = scriptedModel([{ toolCalls: [{ name: 'lookup', args: {} }] }, 'done']);
    const events = collectEvents(createAgent({ model, tools: [lookup], middleware: [keeper, inner] }).run('q'));
    expect(eventsOfType(events, 'error')).toEqual([
      expect.objectContaining({ error: expect.objectContaining({ message: "Middleware 'inner' wrapModel is not an operator: it returned 42" }) }),
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });
});
