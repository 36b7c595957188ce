import { NEVER, Observable, asyncScheduler, map, of, type SchedulerLike, type Subscription } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { createAgent, createSession, ModelTimeoutError, type AgentEvent, type ModelCallContext, type ModelUpdate } from '../../src/index';
import { eventLabel, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { modelTimeout, type ModelTimeoutOptions } from '../../operators/modelTimeout';
import { modelRetry } from '../../operators/modelRetry';

const newScheduler = () => new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
const labels = (...whole: string[]) => map((e: AgentEvent) => (whole.includes(e.type) ? e : eventLabel(e)));

const t = (text: string): ModelUpdate => ({ type: 'text-delta', text });
const updates = { a: t('a'), b: t('b'), c: t('c'), f: { type: 'finish', reason: 'stop' } as ModelUpdate };

/** The operator alone, over a marble source (no agent), with the test scheduler as ctx.scheduler. */
function wrap(ts: TestScheduler, options: ModelTimeoutOptions, source: Observable<ModelUpdate>): Observable<ModelUpdate> {
  const ctx = { scheduler: ts, iteration: 0 } as unknown as ModelCallContext;
  return source.pipe(modelTimeout(options).wrapModel!(ctx));
}

const firstToken = (ms: number) => new ModelTimeoutError(`No first token within ${ms} ms`, 'first-token');
const idle = (ms: number) => new ModelTimeoutError(`No token for ${ms} ms`, 'idle');
const total = (ms: number) => new ModelTimeoutError(`Model call did not finish within ${ms} ms`, 'total');

/** Compares thrown errors by class, message and kind (toEqual alone ignores the class). */
function expectTimeout(actual: unknown, expected: ModelTimeoutError) {
  expect(actual).toBeInstanceOf(ModelTimeoutError);
  expect(actual).toMatchObject({ name: 'ModelTimeoutError', message: expected.message, kind: expected.kind, retryable: true });
}

describe('modelTimeout (operator, marbles)', () => {
  it('first token: an update exactly at firstTokenMs is in time', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('100ms a 9ms f|', updates);
      expectObservable(wrap(ts, { firstTokenMs: 100 }, source)).toBe('100ms a 9ms f|', updates);
      expectSubscriptions(source.subscriptions).toBe('^ 110ms !');
    });
  });

  it('first token: one ms late fails at exactly firstTokenMs and unsubscribes the model', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('101ms a|', updates);
      expectObservable(wrap(ts, { firstTokenMs: 100 }, source)).toBe('100ms #', undefined, firstToken(100));
      expectSubscriptions(source.subscriptions).toBe('^ 99ms !');
    });
  });

  it('idle: gaps of exactly idleMs pass, one ms more fails at last update + idleMs', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const ok = cold('a 49ms b 49ms c 49ms f|', updates);
      expectObservable(wrap(ts, { idleMs: 50 }, ok)).toBe('a 49ms b 49ms c 49ms f|', updates);
      const late = cold('a 49ms b 50ms c|', updates);
      expectObservable(wrap(ts, { idleMs: 50 }, late)).toBe('a 49ms b 49ms #', updates, idle(50));
      expectSubscriptions(late.subscriptions).toBe('^ 99ms !');
    });
  });

  it('idle: the wait from the last update to the end counts too', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable }) => {
      expectObservable(wrap(ts, { idleMs: 50 }, cold('a 60ms |', updates))).toBe('a 49ms #', updates, idle(50));
    });
  });

  it('first token and idle are separate limits', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable }) => {
      // a long first wait is fine under firstTokenMs; then the short idle limit applies from the first update.
      expectObservable(wrap(ts, { firstTokenMs: 500, idleMs: 20 }, cold('400ms a 19ms b 30ms c|', updates))).toBe('400ms a 19ms b 19ms #', updates, idle(20));
      // the first update comes early: the idle deadline (30 + 20) is earlier than the first-token one (500).
      expectObservable(wrap(ts, { firstTokenMs: 500, idleMs: 20 }, cold('30ms a 30ms b|', updates))).toBe('30ms a 19ms #', updates, idle(20));
    });
  });

  it('total: the whole call must finish within totalMs, even while updates keep coming', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('a 29ms b 29ms c 29ms a 29ms f|', updates);
      expectObservable(wrap(ts, { idleMs: 50, totalMs: 100 }, source)).toBe('a 29ms b 29ms c 29ms a 9ms #', updates, total(100));
      expectSubscriptions(source.subscriptions).toBe('^ 99ms !');
      expectObservable(wrap(ts, { totalMs: 100 }, cold('a 98ms f|', updates))).toBe('a 98ms f|', updates);
    });
  });

  it('defaults: 30000 ms to the first token and between tokens, no total limit', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable }) => {
      expectObservable(wrap(ts, {}, cold('30000ms a 29999ms b 29999ms f|', updates))).toBe('30000ms a 29999ms b 29999ms f|', updates);
      expectObservable(wrap(ts, {}, cold('30001ms a|', updates))).toBe('30000ms #', undefined, firstToken(30000));
      expectObservable(wrap(ts, {}, cold('a 30000ms b|', updates))).toBe('a 29999ms #', updates, idle(30000));
    });
  });

  it('Infinity turns a limit off', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable }) => {
      expectObservable(wrap(ts, { firstTokenMs: Infinity, idleMs: Infinity }, cold('99999ms a 99999ms f|', updates))).toBe('99999ms a 99999ms f|', updates);
    });
  });

  it('passes errors and synchronous streams through and leaves no timer behind', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable }) => {
      const boom = new Error('boom');
      expectObservable(wrap(ts, { firstTokenMs: 10 }, cold('5ms #', undefined, boom))).toBe('5ms #', undefined, boom);
      expectObservable(wrap(ts, { firstTokenMs: 10 }, cold('(abf|)', updates))).toBe('(abf|)', updates);
    });
    // A stream that completes while subscribing schedules no check at all.
    const seen: ModelUpdate[] = [];
    let completed = false;
    ts.run(() => {
      wrap(ts, { firstTokenMs: 10 }, of(updates.a, updates.f)).subscribe({ next: (u) => seen.push(u), complete: () => (completed = true) });
      expect(ts.actions).toHaveLength(0);
    });
    expect(seen).toEqual([updates.a, updates.f]);
    expect(completed).toBe(true);
  });

  it('unsubscribing downstream unsubscribes the model and cancels the check', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('a 200ms b|', updates);
      expectObservable(wrap(ts, { idleMs: 100 }, source), '^ 49ms !').toBe('a', updates);
      expectSubscriptions(source.subscriptions).toBe('^ 49ms !');
    });
    expect(ts.actions).toHaveLength(0);
  });

  it('raises a retryable ModelTimeoutError naming its kind', () => {
    const ts = newScheduler();
    const errors: unknown[] = [];
    ts.run(({ cold }) => {
      wrap(ts, { firstTokenMs: 10 }, cold('20ms a|', updates)).subscribe({ error: (e) => errors.push(e) });
      wrap(ts, { idleMs: 10 }, cold('a 20ms a|', updates)).subscribe({ error: (e) => errors.push(e) });
      wrap(ts, { totalMs: 15 }, cold('a 9ms a 9ms a|', updates)).subscribe({ error: (e) => errors.push(e) });
    });
    expectTimeout(errors[0], firstToken(10));
    expectTimeout(errors[1], idle(10));
    expectTimeout(errors[2], total(15));
  });
});

describe('modelTimeout (wall clock, jest fake timers)', () => {
  beforeEach(() => jest.useFakeTimers({ now: 1_000_000 }));
  afterEach(() => jest.useRealTimers());

  /** Updates at the given ms (Date.now-based, asyncScheduler), then silence. */
  function timed(at: number[]): Observable<ModelUpdate> {
    return new Observable<ModelUpdate>((subscriber) => {
      const handles = at.map((ms) => setTimeout(() => subscriber.next(updates.a), ms));
      return () => handles.forEach(clearTimeout);
    });
  }
  function watch(options: ModelTimeoutOptions, source: Observable<ModelUpdate>) {
    const ctx = { scheduler: asyncScheduler, iteration: 0 } as unknown as ModelCallContext;
    const t0 = Date.now();
    const seen = { values: 0, failedAt: undefined as number | undefined, error: undefined as unknown };
    const subscription = source.pipe(modelTimeout(options).wrapModel!(ctx)).subscribe({
      next: () => seen.values++,
      error: (error) => ((seen.failedAt = Date.now() - t0), (seen.error = error)),
    });
    return { seen, subscription };
  }

  // The second case: idleMs 100 makes the check run every 5 ms before the first token too, yet the
  // limit is not rounded to them.
  it.each([
    [{ firstTokenMs: 100 }, 100],
    [{ firstTokenMs: 23, idleMs: 100 }, 23],
  ])('first token is exact (%j)', (options, limit) => {
    const { seen } = watch(options, timed([]));
    jest.advanceTimersByTime(limit - 1);
    expect(seen.failedAt).toBeUndefined();
    jest.advanceTimersByTime(1);
    expect(seen.failedAt).toBe(limit);
    expectTimeout(seen.error, firstToken(limit));
  });

  it('idle fires at most idleMs/20 late, never early, without reading the clock per delta', () => {
    // idleMs 100: while updates flow the check runs every 5 ms. 300 updates, 3 per ms, the last at 109.
    const at = Array.from({ length: 300 }, (_, i) => 10 + Math.floor(i / 3));
    const { seen } = watch({ idleMs: 100 }, timed(at));
    const now = jest.spyOn(Date, 'now');
    jest.advanceTimersByTime(208);
    expect(seen.values).toBe(300);
    expect(seen.failedAt).toBeUndefined(); // never early: 109 + 100 = 209
    jest.advanceTimersByTime(10);
    expect(seen.failedAt).toBeGreaterThanOrEqual(209);
    expect(seen.failedAt).toBeLessThanOrEqual(214);
    expectTimeout(seen.error, idle(100));
    // about one clock read per check (every 5 ms), none per update
    expect(now.mock.calls.length).toBeLessThan(80);
    now.mockRestore();
  });

  it('gaps just under idleMs never fail', async () => {
    const at = Array.from({ length: 20 }, (_, i) => i * 99);
    const { seen, subscription } = watch({ idleMs: 100, firstTokenMs: 100 }, timed(at));
    jest.advanceTimersByTime(19 * 99 + 99);
    expect(seen.values).toBe(20);
    expect(seen.failedAt).toBeUndefined();
    subscription.unsubscribe();
    expect(jest.getTimerCount()).toBe(1);
    await Promise.resolve(); // the shared timer stops in a microtask once no call is open (a real one: fake timers do not hold it)
    expect(jest.getTimerCount()).toBe(0);
  });

  it('a call shorter than idleMs/20 arms one timer in all (none re-armed at the first token)', async () => {
    const setIntervalSpy = jest.spyOn(globalThis, 'setInterval');
    const { seen, subscription } = watch({}, timed([1, 2, 3]));
    jest.advanceTimersByTime(3);
    expect(seen.values).toBe(3);
    expect(setIntervalSpy).toHaveBeenCalledTimes(1);
    subscription.unsubscribe();
    expect(jest.getTimerCount()).toBe(1); // kept until a microtask finds no call open (the next call may reuse it)
    await Promise.resolve();
    expect(jest.getTimerCount()).toBe(0);
    setIntervalSpy.mockRestore();
  });

  it('back-to-back calls of one instance share one timer; concurrent calls are each checked', async () => {
    const setIntervalSpy = jest.spyOn(globalThis, 'setInterval');
    const ctx = { scheduler: asyncScheduler, iteration: 0 } as unknown as ModelCallContext;
    const wrap = modelTimeout({ firstTokenMs: 50, idleMs: 100 }).wrapModel!;
    const failures: Array<[string, number]> = [];
    const t0 = Date.now();
    const call = (name: string, at: number[]) =>
      timed(at)
        .pipe(wrap(ctx))
        .subscribe({ error: (e: ModelTimeoutError) => failures.push([`${name}: ${e.kind}`, Date.now() - t0]) });
    // Sequential: each call ends and the next starts in the same task, as in an agent's loop.
    for (let i = 0; i < 5; i++) call(`seq${i}`, []).unsubscribe();
    expect(setIntervalSpy).toHaveBeenCalledTimes(1);
    // Concurrent: a call that streams, one that never starts, one that stalls after a token.
    call('streams', [10, 20, 30, 40, 120, 200]);
    call('silent', []);
    call('stalls', [5]);
    jest.advanceTimersByTime(250); // 'streams' is idle from 200: in time until 300
    expect(failures).toEqual([
      ['silent: first-token', 50],
      ['stalls: idle', expect.any(Number)],
    ]);
    const stalledAt = failures[1][1];
    expect(stalledAt).toBeGreaterThanOrEqual(105);
    expect(stalledAt).toBeLessThanOrEqual(105 + 5); // idleMs / 20 late at most
    jest.advanceTimersByTime(60);
    expect(failures.map(([what]) => what)).toEqual(['silent: first-token', 'stalls: idle', 'streams: idle']);
    await Promise.resolve();
    expect(jest.getTimerCount()).toBe(0);
    setIntervalSpy.mockRestore();
  });

  it('firstTokenMs Infinity with a finite idleMs: a call that stalls after its first token still times out', () => {
    const { seen } = watch({ firstTokenMs: Infinity, idleMs: 100 }, timed([10]));
    jest.advanceTimersByTime(1000);
    expect(seen.values).toBe(1);
    expectTimeout(seen.error, idle(100));
    expect(seen.failedAt).toBeGreaterThanOrEqual(110);
    expect(seen.failedAt).toBeLessThanOrEqual(115);
  });

  it('a call whose teardown throws fails, and the shared timer goes on checking the others', async () => {
    const ctx = { scheduler: asyncScheduler, iteration: 0 } as unknown as ModelCallContext;
    const wrap = modelTimeout({ firstTokenMs: 50 }).wrapModel!(ctx);
    const failed: string[] = [];
    const badTeardown = new Observable<ModelUpdate>(() => () => {
      throw new Error('bad teardown');
    });
    badTeardown.pipe(wrap).subscribe({ error: () => failed.push('bad') });
    NEVER.pipe(wrap).subscribe({ error: () => failed.push('open') });
    // The teardown's error is thrown from a timer of its own (as rxjs throws a scheduled action's error).
    expect(() => jest.advanceTimersByTime(60)).toThrow('bad teardown');
    expect(failed).toEqual(['bad', 'open']); // at the same check, not at a later one
    NEVER.pipe(wrap).subscribe({ error: () => failed.push('later') });
    jest.advanceTimersByTime(60);
    expect(failed).toEqual(['bad', 'open', 'later']);
    await Promise.resolve();
    expect(jest.getTimerCount()).toBe(0);
  });

  it('a shared timer closed from outside (as rxjs closes actions queued behind one that throws) is replaced', async () => {
    const actions: Subscription[] = [];
    const scheduler: SchedulerLike = {
      now: asyncScheduler.now,
      schedule: (work, delay, state) => {
        const action = asyncScheduler.schedule(work as never, delay, state);
        actions.push(action);
        return action;
      },
    };
    const ctx = { scheduler, iteration: 0 } as unknown as ModelCallContext;
    const wrap = modelTimeout({ firstTokenMs: 50 }).wrapModel!(ctx);
    const failed: string[] = [];
    NEVER.pipe(wrap).subscribe({ error: () => failed.push('first') });
    actions.forEach((a) => a.unsubscribe()); // the shared check is gone
    NEVER.pipe(wrap).subscribe({ error: () => failed.push('second') });
    jest.advanceTimersByTime(60);
    expect(failed).toEqual(['first', 'second']); // the next call re-arms the timer, which checks both
    await Promise.resolve();
    expect(jest.getTimerCount()).toBe(0);
  });

  it('total is exact', () => {
    const { seen } = watch({ totalMs: 50, idleMs: 1000 }, timed([0, 10, 20, 30, 40, 50, 60]));
    jest.advanceTimersByTime(50);
    expect(seen.failedAt).toBe(50);
    expectTimeout(seen.error, total(50));
    expect(jest.getTimerCount()).toBe(0);
  });
});

describe('modelTimeout (in an agent)', () => {
  function setup(ts: TestScheduler, turns: ScriptedTurn[], options: ModelTimeoutOptions, retry = false) {
    const model = scriptedModel(turns, { scheduler: ts });
    const middleware = retry ? [modelRetry({ jitter: 0 }), modelTimeout(options)] : [modelTimeout(options)];
    return { model, agent: createAgent({ model, middleware, scheduler: ts }) };
  }

  it('fails the run with the timeout exact to the frame', () => {
    const ts = newScheduler();
    ts.run(({ expectObservable }) => {
      const { agent } = setup(ts, [{ text: ['a', 'b'], delay: 60 }], { firstTokenMs: 100, idleMs: 50 });
      expectObservable(agent.run('hi', { runId: 'r' }).pipe(labels('error'))).toBe('(ab) 56ms c 49ms (dx|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:a',
        d: { type: 'error', runId: 'r', source: 'model', error: { name: 'ModelTimeoutError', message: 'No token for 50 ms' } },
        x: 'run-end:error',
      });
    });
  });

  it('passes a scripted stream whose gaps are exactly idleMs', () => {
    const ts = newScheduler();
    ts.run(({ expectObservable }) => {
      const { agent } = setup(ts, [{ text: ['a', 'b'], delay: 50 }], { firstTokenMs: 50, idleMs: 50 });
      expectObservable(agent.run('hi', { runId: 'r' }).pipe(labels())).toBe('(ab) 46ms c 49ms d 49ms (ef|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:a',
        d: 'text-delta:b',
        e: 'iteration-end',
        f: 'run-end:completed',
      });
    });
  });

  it('is retried by a modelRetry registered before it; the stalled partial text is dropped', () => {
    const ts = newScheduler();
    const session = createSession();
    ts.run(({ expectObservable }) => {
      const { agent, model } = setup(
        ts,
        [
          { text: ['Stal', 'led'], delay: 80 },
          { text: 'Fresh', delay: 10 },
        ],
        { firstTokenMs: 100, idleMs: 50 },
        true,
      );
      expectObservable(agent.run('hi', { runId: 'r', session }).pipe(labels('model-retry'))).toBe('(ab) 76ms c 49ms d 1009ms e 9ms (fg|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:Stal',
        d: {
          type: 'model-retry',
          runId: 'r',
          iteration: 0,
          attempt: 1,
          error: { name: 'ModelTimeoutError', message: 'No token for 50 ms' },
          delayMs: 1000,
          messageId: expect.stringMatching(/^msg_/),
        },
        e: 'text-delta:Fresh',
        f: 'iteration-end',
        g: 'run-end:completed',
      });
      ts.flush();
      expect(model.calls).toBe(2);
    });
    expect(session.messages.at(-1)).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: 'Fresh' }] });
  });

  it('validates its options with TypeErrors naming the option', () => {
    expect(() => modelTimeout({ firstTokenMs: 0 })).toThrow(
      new TypeError('modelTimeout: firstTokenMs must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got 0'),
    );
    expect(() => modelTimeout({ idleMs: -1 })).toThrow(/idleMs/);
    expect(() => modelTimeout({ totalMs: Number.NaN })).toThrow(/totalMs/);
    expect(() => modelTimeout({ idleMs: '5' as unknown as number })).toThrow(/idleMs/);
    expect(() => modelTimeout({ scheduler: 1 as never })).toThrow(/scheduler/);
    expect(() => modelTimeout({ idleCheck: 'precise' as never })).toThrow(new TypeError(`modelTimeout: idleCheck must be 'sampled' or 'exact', got "precise"`));
    expect(modelTimeout().name).toBe('modelTimeout');
  });
});

describe('modelTimeout idleCheck', () => {
  const updates = { a: t('a'), b: t('b'), c: t('c') };
  /** idleMs 100 (checked every 5 ms when sampled): 'b' at frame 3, then silence until frame 204. */
  const stalls = (ts: TestScheduler, scheduler: SchedulerLike, options: ModelTimeoutOptions) => {
    const ctx = { scheduler, iteration: 0 } as unknown as ModelCallContext;
    return ts.createColdObservable('a 2ms b 200ms c|', updates).pipe(modelTimeout({ idleMs: 100, ...options }).wrapModel!(ctx));
  };

  it('sampled (the default): the idle timeout fires up to idleMs/20 late, never early, on every scheduler alike', () => {
    const ts = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    ts.run(({ expectObservable }) => {
      // Due at 103; the check that sees 'b' is at 5, so it fails at 105. The same with the agent's
      // default asyncScheduler, which keeps virtual time inside run().
      for (const scheduler of [ts, asyncScheduler]) {
        expectObservable(stalls(ts, scheduler, {})).toBe('a 2ms b 101ms #', updates, idle(100));
      }
    });
  });

  it('sampled: the check an instance shares between its calls stops in a microtask once no call is open', async () => {
    const ts = newScheduler();
    const agent = createAgent({
      model: scriptedModel([{ text: 'hi', delay: 10 }], { scheduler: ts }),
      middleware: [modelTimeout({ idleMs: 100 })],
      scheduler: ts,
    });
    let ended = false;
    agent.run('q').subscribe({ complete: () => (ended = true) });
    // Frame by frame until the run is over (a flush would also run the check, and nothing would be left).
    while (!ended && ts.actions.length > 0) {
      ts.maxFrames = ts.actions[0].delay;
      ts.flush();
    }
    const pending = () => (ts.actions as Array<{ closed: boolean }>).filter((action) => !action.closed).length;
    expect(ended).toBe(true);
    expect(pending()).toBe(1);
    await Promise.resolve();
    expect(pending()).toBe(0);
  });

  it('exact: the idle timeout is exact to the frame, with the TestScheduler or the default asyncScheduler inside run()', () => {
    const ts = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    ts.run(({ expectObservable }) => {
      for (const scheduler of [ts, asyncScheduler]) {
        expectObservable(stalls(ts, scheduler, { idleCheck: 'exact' })).toBe('a 2ms b 99ms #', updates, idle(100));
      }
    });
  });
});
