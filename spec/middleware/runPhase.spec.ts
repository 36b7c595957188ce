import { NEVER, Observable, concat, lastValueFrom, mergeMap, of, toArray, type MonoTypeOperatorFunction } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { createAgent, type AgentMiddleware, type IterationContext } from '../../src/index';
import { collectEvents, eventLabels, eventsOfType, scriptedModel } from '../../src/testing/index';

/** The error event of a run whose only middleware has `hook` as beforeIteration. */
function errorOf(hook: MonoTypeOperatorFunction<IterationContext>) {
  const events = collectEvents(createAgent({ model: scriptedModel(['x']), middleware: [{ name: 'odd', beforeIteration: hook }] }).run('go'));
  expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  return eventsOfType(events, 'error')[0];
}

describe('phase hooks that are not well-formed operators', () => {
  it('a hook that returns something other than an Observable fails the run, naming what it returned', () => {
    const notAnOperator = (() => 42) as unknown as MonoTypeOperatorFunction<IterationContext>;
    expect(errorOf(notAnOperator)).toMatchObject({
      source: 'middleware',
      middleware: 'odd',
      error: { message: "Middleware 'odd' beforeIteration is not an operator: it returned 42" },
    });
  });

  it('a hook that throws when it is applied (not inside its stream) fails the run naming the middleware', () => {
    const throwsAtOnce: MonoTypeOperatorFunction<IterationContext> = () => {
      throw new Error('applied too soon');
    };
    expect(errorOf(throwsAtOnce)).toMatchObject({ source: 'middleware', middleware: 'odd', error: { message: 'applied too soon' } });
  });

  it('a hook whose teardown throws when it completes fails the run naming the middleware (the run still ends)', async () => {
    const throwingTeardown: MonoTypeOperatorFunction<IterationContext> = (source) =>
      new Observable<IterationContext>((subscriber) => {
        const timer = setTimeout(() => source.subscribe(subscriber), 1);
        return () => {
          clearTimeout(timer);
          throw new Error('hook teardown failed');
        };
      });
    const run = createAgent({ model: scriptedModel(['x']), middleware: [{ name: 'odd', beforeIteration: throwingTeardown }] }).run('go');
    const events = await lastValueFrom(run.pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'middleware',
      middleware: 'odd',
      error: { message: expect.stringContaining('hook teardown failed') },
    });
  });

  it('a hook that emits a second context and never completes fails the run at once (marbles), naming the middleware', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const twice: AgentMiddleware = { name: 'twice', beforeIteration: mergeMap((ctx) => concat(of(ctx, ctx), NEVER)) };
      const agent = createAgent({ model: scriptedModel(['hi'], { scheduler: testScheduler }), scheduler: testScheduler, middleware: [twice] });
      expectObservable(agent.run('go').pipe(eventLabels()), '^ 1000ms !').toBe('(abcd|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'error:middleware',
        d: 'run-end:error',
      });
    });
  });
});
