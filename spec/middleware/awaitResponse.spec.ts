import { Subject, catchError, concatMap, lastValueFrom, map, merge, of, queueScheduler, race, timer, toArray, zip } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { createAgent, type AgentMiddleware, type AgentResponse, type RequestEvent } from '../../src/index';
import { eventLabel, eventLabels, eventsOfType, scriptedModel } from '../../src/testing/index';

const question = (requestId?: string): RequestEvent => ({ type: 'continuation-request', requestId, iteration: 0, maxIterations: 1 }) as unknown as RequestEvent;

describe('awaitResponse (ctx.request)', () => {
  it('on a synchronous scheduler, the request comes before its expiry, and nothing is left open', async () => {
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: concatMap((ctx) => ctx.request(question('q1'), { timeout: 0, scheduler: queueScheduler, onTimeout: 'expired' }).pipe(map(() => ctx))),
    };
    const handle = createAgent({ model: scriptedModel(['ok']), middleware: [asking] }).start('go');
    const labels = (await lastValueFrom(handle.events$.pipe(toArray()))).map(eventLabel);
    expect(labels.indexOf('continuation-request')).toBeGreaterThan(-1);
    expect(labels.indexOf('continuation-request')).toBeLessThan(labels.indexOf('request-expired:timeout'));
    expect(labels.at(-1)).toBe('run-end:completed');
    expect(handle.respond({ type: 'continuation-response', requestId: 'q1', proceed: true } as never)).toBe(false); // closed
  });

  it('an answer whose requestId is only inherited answers nothing: respond() refuses it, and the responses stream does not match it', async () => {
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: concatMap((ctx) => ctx.request(question('q1'), { timeout: 50, onTimeout: 'expired' }).pipe(map(() => ctx))),
    };
    const inherited = () => Object.create({ type: 'continuation-response', requestId: 'q1', approved: true }) as AgentResponse;
    const responses = of(inherited());
    const handle = createAgent({ model: scriptedModel(['ok']), middleware: [asking] }).start('go', { responses });
    const refused: boolean[] = [];
    handle.events$.subscribe((e) => {
      if (e.type === 'continuation-request') refused.push(handle.respond(inherited()));
    });
    const labels = (await lastValueFrom(handle.events$.pipe(toArray()))).map(eventLabel);
    expect(refused).toEqual([false]);
    expect(labels).toContain('request-expired:timeout');
    expect(labels.at(-1)).toBe('run-end:completed');
  });

  it('a timeout without onTimeout yields undefined (as its type says), so a hook that maps the answer still emits its context', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const asking: AgentMiddleware = {
        name: 'asking',
        beforeIteration: concatMap((ctx) =>
          ctx.request(question('q1'), { timeout: 50 }).pipe(map((answer) => (answer === undefined ? ctx.terminate('nobody answered') : ctx))),
        ),
      };
      const agent = createAgent({ model: scriptedModel(['ok'], { scheduler: testScheduler }), middleware: [asking], scheduler: testScheduler });
      expectObservable(agent.run('go').pipe(eventLabels())).toBe('(abc) 45ms (def|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'continuation-request',
        d: 'request-expired:timeout',
        e: 'iteration-end',
        f: 'run-end:terminated',
      });
    });
  });

  it('a wait its asker leaves while the run goes on (a race with a timer) ends with request-expired reason cancelled', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const asking: AgentMiddleware = {
        name: 'asking',
        beforeIteration: concatMap((ctx) => race(ctx.request(question('q1'), { timeout: 100 }), timer(30)).pipe(map(() => ctx))),
      };
      const agent = createAgent({ model: scriptedModel(['ok'], { scheduler: testScheduler }), middleware: [asking], scheduler: testScheduler });
      expectObservable(agent.run('go').pipe(eventLabels())).toBe('(abc) 25ms (defg|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'continuation-request',
        d: 'request-expired:cancelled',
        e: 'text-delta:ok',
        f: 'iteration-end',
        g: 'run-end:completed',
      });
    });
  });

  it("a hook's stream that fails while its request waits: the request ends with the run's error, without an expiry of its own", () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable, cold }) => {
      const asking: AgentMiddleware = {
        name: 'asking',
        beforeIteration: concatMap((ctx) =>
          merge(ctx.request(question('q1'), { timeout: 100 }), cold('20ms #', undefined, new Error('boom'))).pipe(map(() => ctx)),
        ),
      };
      const agent = createAgent({ model: scriptedModel(['ok'], { scheduler: testScheduler }), middleware: [asking], scheduler: testScheduler });
      expectObservable(agent.run('go').pipe(eventLabels())).toBe('(abc) 15ms (de|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'continuation-request',
        d: 'error:middleware',
        e: 'run-end:error',
      });
    });
  });

  it('two waits on one explicit id: the second fails, naming the id', async () => {
    const twice: AgentMiddleware = {
      name: 'twice',
      beforeIteration: concatMap((ctx) =>
        zip(ctx.request(question('same'), { timeout: 10 }), ctx.request(question('same'), { timeout: 10 })).pipe(map(() => ctx)),
      ),
    };
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']), middleware: [twice] })
        .run('go')
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'error')[0]).toMatchObject({ source: 'middleware', middleware: 'twice', error: { message: "request 'same' is already open" } });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('an answer the responses stream replays at once (ids known in advance) answers the request, which is then not asked', async () => {
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: concatMap((ctx) => ctx.request(question('q1')).pipe(map(() => ctx))),
    };
    const responses = of({ type: 'continuation-response', requestId: 'q1', proceed: true } as unknown as AgentResponse);
    const labels = (
      await lastValueFrom(
        createAgent({ model: scriptedModel(['ok']), middleware: [asking] })
          .run('go', { responses })
          .pipe(toArray()),
      )
    ).map(eventLabel);
    expect(labels).not.toContain('continuation-request');
    expect(labels.at(-1)).toBe('run-end:completed');
  });

  it.each([
    [30 * 24 * 3600 * 1000, '2592000000'],
    [NaN, 'NaN'],
    ['5000', '"5000"'],
  ])('a timeout that is not one (%p: over 2^31-1 ms, not a number) is a TypeError naming it, not an expiry at once', async (timeout, shown) => {
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: concatMap((ctx) => ctx.request(question('q1'), { timeout: timeout as number }).pipe(map(() => ctx))),
    };
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']), middleware: [asking] })
        .run('go')
        .pipe(toArray()),
    );
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:middleware', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe(
      `request: 'timeout' must be a number of milliseconds at most 2147483647 (0 or less: at once, Infinity: off), got ${shown}`,
    );
    expect(eventsOfType(events, 'continuation-request')).toEqual([]); // nothing asked
  });

  it('responses that failed already (a Subject that errored): the run fails without asking, and leaves nothing open', async () => {
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: concatMap((ctx) => ctx.request(question('q1')).pipe(map(() => ctx))),
    };
    const responses = new Subject<AgentResponse>();
    responses.error(new Error('the UI went away'));
    const labels = (
      await lastValueFrom(
        createAgent({ model: scriptedModel(['ok']), middleware: [asking] })
          .run('go', { responses })
          .pipe(toArray()),
      )
    ).map(eventLabel);
    expect(labels).toEqual(['run-start', 'iteration-start', 'error:middleware', 'run-end:error']);
  });

  it('a timeout of 0 or less (a deadline already past) expires the request at once', async () => {
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: concatMap((ctx) => ctx.request(question('q1'), { timeout: -5, onTimeout: 'late' }).pipe(map(() => ctx))),
    };
    const labels = (
      await lastValueFrom(
        createAgent({ model: scriptedModel(['ok']), middleware: [asking] })
          .run('go')
          .pipe(toArray()),
      )
    ).map(eventLabel);
    expect(labels).toContain('request-expired:timeout');
    expect(labels.at(-1)).toBe('run-end:completed');
  });

  it('responses whose subscribe throws fail the request and leave its id closed (asking again is not "already open")', async () => {
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: concatMap((ctx) =>
        ctx.request(question('q1')).pipe(
          catchError(() => ctx.request(question('q1'))),
          map(() => ctx),
        ),
      ),
    };
    const responses = {
      subscribe: () => {
        throw new Error('not an rxjs Observable');
      },
    } as unknown as Subject<AgentResponse>;
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']), middleware: [asking] })
        .run('go', { responses })
        .pipe(toArray()),
    );
    expect(events.map(eventLabel).slice(-2)).toEqual(['error:middleware', 'run-end:error']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe('not an rxjs Observable');
  });
});
