import { delay, map, of, tap, toArray, type MonoTypeOperatorFunction } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { createAgent, mapContext, type AgentMiddleware, type IterationContext } from '../../src/index';
import { hooksOf } from '../../src/middleware/runPhase';
import { collectEvents, eventLabels, eventsOfType, scriptedModel } from '../../src/testing/index';

describe('mapContext', () => {
  it('is rxjs map in any pipe', () => {
    const out: number[] = [];
    of(1, 2, 3)
      .pipe(
        mapContext((n: number) => n * 10),
        toArray(),
      )
      .subscribe((all) => out.push(...all));
    expect(out).toEqual([10, 20, 30]);
  });

  it('is recognised by hooksOf, which records its projection for the runner to call', () => {
    const project = (ctx: IterationContext) => ctx;
    const hooks = hooksOf<IterationContext>(
      [
        { name: 'direct', beforeIteration: mapContext(project) },
        { name: 'operator', beforeIteration: map(project) },
      ],
      'beforeIteration',
    );
    expect(hooks.map((h) => [h.middleware, h.project])).toEqual([
      ['direct', project],
      ['operator', undefined],
    ]);
  });

  it('runs in registration order among operator hooks, synchronous and not (marbles)', () => {
    const log: string[] = [];
    const step = (name: string): AgentMiddleware => ({
      name,
      beforeIteration: mapContext((ctx) => (log.push(`${name}:${ctx.iteration}`), ctx)),
    });
    const later: AgentMiddleware = {
      name: 'later',
      beforeIteration: (source) =>
        source.pipe(
          delay(5),
          tap(() => log.push('later')),
        ),
    };
    new TestScheduler((actual, expected) => expect(actual).toEqual(expected)).run(({ expectObservable }) => {
      const agent = createAgent({ model: scriptedModel(['done']), middleware: [step('a'), later, step('b'), step('c')] });
      expectObservable(agent.run('go').pipe(eventLabels())).toBe('(ab) 1ms (cde|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:done',
        d: 'iteration-end',
        e: 'run-end:completed',
      });
    });
    expect(log).toEqual(['a:0', 'later', 'b:0', 'c:0']);
  });

  it("threads each projection's context into the next hook and the model call", () => {
    let seen: unknown;
    const agent = createAgent({
      model: (request) => {
        seen = request.instructions;
        return scriptedModel(['ok'])(request);
      },
      middleware: [
        { name: 'one', beforeIteration: mapContext((ctx) => ctx.with({ instructions: 'one' })) },
        { name: 'two', beforeIteration: mapContext((ctx) => ctx.with({ instructions: `${ctx.instructions}+two` })) },
      ],
    });
    const events = collectEvents(agent.run('go'));
    expect(seen).toBe('one+two');
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'ok' });
  });

  it('a projection that throws fails the run naming the middleware and the phase, as map would', () => {
    const boom = (ctx: IterationContext): IterationContext => {
      throw new Error(`boom at ${ctx.iteration}`);
    };
    const run = (hook: MonoTypeOperatorFunction<IterationContext>) =>
      collectEvents(createAgent({ model: scriptedModel(['x']), middleware: [{ name: 'thrower', afterIteration: hook }] }).run('go'));
    const direct = run(mapContext(boom));
    const viaMap = run(map(boom));
    expect(eventsOfType(direct, 'error')[0]).toMatchObject({ source: 'middleware', middleware: 'thrower', error: { message: 'boom at 0' } });
    expect(direct.map((e) => e.type)).toEqual(viaMap.map((e) => e.type));
    expect(eventsOfType(direct, 'error')[0].error).toEqual(eventsOfType(viaMap, 'error')[0].error);
    expect(direct.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  type HookOf = (project: (ctx: IterationContext) => IterationContext) => MonoTypeOperatorFunction<IterationContext>;
  it.each<[string, HookOf]>([
    ['mapContext', mapContext],
    ['map', map],
  ])('a run cancelled inside a %s hook runs no further hook and never calls the model', (_name, hookOf) => {
    const log: string[] = [];
    let calls = 0;
    const controller = new AbortController();
    const agent = createAgent({
      model: (request) => (calls++, scriptedModel(['x'])(request)),
      middleware: [
        { name: 'canceller', beforeIteration: hookOf((ctx: IterationContext) => (log.push('canceller'), controller.abort(), ctx)) },
        { name: 'next', beforeIteration: hookOf((ctx: IterationContext) => (log.push('next'), ctx)) },
      ],
    });
    const events = collectEvents(agent.run('go', { signal: controller.signal }));
    expect(log).toEqual(['canceller']);
    expect(calls).toBe(0);
    expect(events.map((e) => e.type)).toEqual(['run-start', 'iteration-start', 'run-end']);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'cancelled' });
  });
});
