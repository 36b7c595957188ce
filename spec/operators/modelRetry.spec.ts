import { map, queueScheduler, takeWhile, type Observable } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import {
  createAgent,
  createSession,
  ModelError,
  type AgentEvent,
  type AgentMiddleware,
  type EmittedEvent,
  type ModelCallContext,
  type ModelUpdate,
} from '../../src/index';
import { eventLabel, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { isRetryableModelError, modelRetry } from '../../operators/modelRetry';
import { modelFallback } from '../../operators/modelFallback';

const newScheduler = () => new TestScheduler((actual, expected) => expect(actual).toEqual(expected));

/** Labels, except the events whose fields a test checks whole. */
const labels = (...whole: string[]) => map((e: AgentEvent) => (whole.includes(e.type) ? e : eventLabel(e)));

const serverError = (message = 'Server error') => new ModelError(message, { status: 500 });

function setup(ts: TestScheduler, turns: ScriptedTurn[], middleware: AgentMiddleware[]) {
  const model = scriptedModel(turns, { scheduler: ts });
  const agent = createAgent({ model, middleware, scheduler: ts });
  return { model, agent };
}

/** Runs in virtual time and returns every event with its frame. */
function collect(turns: ScriptedTurn[], middleware: AgentMiddleware[], session = createSession()) {
  const ts = newScheduler();
  const events: Array<AgentEvent & { frame: number }> = [];
  let model!: ReturnType<typeof scriptedModel>;
  ts.run(() => {
    const built = setup(ts, turns, middleware);
    model = built.model;
    built.agent.run('hi', { runId: 'r', session }).subscribe((e) => events.push({ ...e, frame: ts.now() }));
  });
  return { events, model, session, byType: (type: string) => events.filter((e) => e.type === type) };
}

const retryEvent = (attempt: number, delayMs: number, error: object = { name: 'ModelError', message: 'Server error', status: 500 }) => ({
  type: 'model-retry',
  runId: 'r',
  iteration: 0,
  attempt,
  error,
  delayMs,
  // The id of the next attempt's answer.
  messageId: expect.stringMatching(/^msg_/),
});

const delta = (text: string): ModelUpdate => ({ type: 'text-delta', text });
const updates = { a: delta('a'), b: delta('b'), f: { type: 'finish', reason: 'stop' } as ModelUpdate };

/** The operator alone over a marble source (no agent): what it emits through ctx, and its drops. */
function wrapAlone(ts: TestScheduler, options: Parameters<typeof modelRetry>[0], source: Observable<ModelUpdate>) {
  const emitted: EmittedEvent[] = [];
  let discarded = 0;
  const ctx = {
    scheduler: ts,
    iteration: 0,
    emit: (event: EmittedEvent) => emitted.push(event),
    discardPartialResponse: () => discarded++,
  } as unknown as ModelCallContext;
  const stream = source.pipe(modelRetry({ jitter: 0, initialDelayMs: 5, backoffFactor: 1, retryOn: () => true, ...options }).wrapModel!(ctx));
  return { stream, emitted, discarded: () => discarded };
}

describe('modelRetry (operator, marbles)', () => {
  it('subscribes again after each delay, tearing the failed attempt down first, then fails with the last error', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('-a-#', updates, serverError());
      const { stream, emitted } = wrapAlone(ts, {}, source);
      expectObservable(stream).toBe('-a 7ms a 7ms a-#', updates, serverError());
      // prettier-ignore
      expectSubscriptions(source.subscriptions).toBe([
        '^--!',
        '--------^--!',
        '----------------^--!',
      ]);
      ts.flush();
      expect(emitted.map((e) => [e.type, (e as { attempt: number }).attempt, (e as { delayMs: number }).delayMs])).toEqual([
        ['model-retry', 1, 5],
        ['model-retry', 2, 5],
      ]);
    });
  });

  it('unsubscribing during a delay cancels the next attempt', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('-a-#', updates, serverError());
      const { stream } = wrapAlone(ts, {}, source);
      expectObservable(stream, '^-----!').toBe('-a----', updates);
      expectSubscriptions(source.subscriptions).toBe(['^--!']);
    });
  });

  it('each subscription counts its own attempts', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('-#', updates, serverError());
      const { stream } = wrapAlone(ts, { maxRetries: 1 }, source);
      expectObservable(stream).toBe('-------#', updates, serverError());
      expectObservable(stream, '---^').toBe('----------#', updates, serverError());
      // prettier-ignore
      expectSubscriptions(source.subscriptions).toBe([
        '^!',
        '---^!',
        '------^!',
        '---------^!',
      ]);
    });
  });

  it("onFailure 'continue': drops the partial answer and answers that the call failed", () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable }) => {
      const source = cold('-a#', updates, serverError('Down'));
      const { stream, discarded } = wrapAlone(ts, { maxRetries: 1, onFailure: 'continue' }, source);
      expectObservable(stream).toBe('-a 6ms a(gf|)', { ...updates, g: delta('Model call failed after 2 attempts: Down') });
      ts.flush();
      expect(discarded()).toBe(1);
    });
  });

  it('passes a completed stream through untouched', () => {
    const ts = newScheduler();
    ts.run(({ cold, expectObservable, expectSubscriptions }) => {
      const source = cold('-a-b-f|', updates);
      const { stream, emitted } = wrapAlone(ts, {}, source);
      expectObservable(stream).toBe('-a-b-f|', updates);
      expectSubscriptions(source.subscriptions).toBe('^-----!');
      ts.flush();
      expect(emitted).toEqual([]);
    });
  });
});

describe('modelRetry', () => {
  it('retries with the backoff of 1000 then 2000 ms, emitting model-retry with exact fields', () => {
    const ts = newScheduler();
    ts.run(({ expectObservable }) => {
      const { agent, model } = setup(ts, [{ text: 'Hel', error: serverError() }, { error: serverError() }, 'Hello'], [modelRetry({ jitter: 0 })]);
      expectObservable(agent.run('hi', { runId: 'r' }).pipe(labels('model-retry'))).toBe('(abcd) 994ms e 1999ms (fgh|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:Hel',
        d: retryEvent(1, 1000),
        e: retryEvent(2, 2000),
        f: 'text-delta:Hello',
        g: 'iteration-end',
        h: 'run-end:completed',
      });
      ts.flush();
      expect(model.calls).toBe(3);
    });
  });

  it("each model-retry names the next attempt's answer: the answer kept in the history has the last one's id", () => {
    const { byType, session } = collect([{ text: 'Hel', error: serverError() }, { error: serverError() }, 'Hello'], [modelRetry({ jitter: 0 })]);
    const [start] = byType('iteration-start') as Array<{ messageId?: string }>;
    const retries = byType('model-retry') as Array<{ messageId?: string }>;
    const ids = [start.messageId, ...retries.map((r) => r.messageId)];
    expect(new Set(ids).size).toBe(3); // one per attempt
    expect(session.messages.map((m) => [m.role, m.id])).toEqual([
      ['user', expect.stringMatching(/^msg_/)],
      ['assistant', ids[2]],
    ]);
  });

  it('defaults: 2 retries, then the run fails with the last error', () => {
    const { events, model, byType } = collect(
      [{ error: serverError('first') }, { error: serverError('second') }, { error: serverError('third') }, 'never'],
      [modelRetry({ jitter: 0 })],
    );
    expect(model.calls).toBe(3);
    expect(byType('model-retry').map((e) => [e.frame, (e as { attempt: number }).attempt])).toEqual([
      [0, 1],
      [1000, 2],
    ]);
    expect(byType('error')).toEqual([
      { type: 'error', runId: 'r', source: 'model', error: { name: 'ModelError', message: 'third', status: 500 }, frame: 3000 },
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error', frame: 3000 });
  });

  it('exactly maxRetries failures recover; one more fails the run', () => {
    const ok = collect([{ error: serverError() }, 'Done'], [modelRetry({ maxRetries: 1, jitter: 0 })]);
    expect(ok.events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Done', frame: 1000 });
    const ko = collect([{ error: serverError() }, { error: serverError() }, 'Done'], [modelRetry({ maxRetries: 1, jitter: 0 })]);
    expect(ko.model.calls).toBe(2);
    expect(ko.events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error', frame: 1000 });
  });

  it('maxRetries: 0 does not retry', () => {
    const { model, events, byType } = collect([{ error: serverError() }, 'Done'], [modelRetry({ maxRetries: 0 })]);
    expect(model.calls).toBe(1);
    expect(byType('model-retry')).toEqual([]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('applies ±jitter with the injected randomness', () => {
    const low = collect([{ error: serverError() }, { error: serverError() }, 'ok'], [modelRetry({ random: () => 0 })]);
    expect(low.byType('model-retry').map((e) => [e.frame, (e as { delayMs: number }).delayMs])).toEqual([
      [0, 750],
      [750, 1500],
    ]);
    expect(low.events.at(-1)).toMatchObject({ reason: 'completed', frame: 2250 });
    const high = collect([{ error: serverError() }, 'ok'], [modelRetry({ random: () => 0.75 })]);
    expect(high.byType('model-retry')[0]).toMatchObject({ delayMs: 1125 });
    expect(high.events.at(-1)).toMatchObject({ frame: 1125 });
  });

  it("a server's retryAfterMs replaces the backoff (no jitter) and is capped by maxDelayMs", () => {
    const ts = newScheduler();
    ts.run(({ expectObservable }) => {
      const { agent } = setup(
        ts,
        [
          { error: new ModelError('Rate limited', { status: 429, retryAfterMs: 300 }) },
          { error: new ModelError('Rate limited', { status: 429, retryAfterMs: 120_000 }) },
          'ok',
        ],
        [modelRetry({ random: () => 0, maxDelayMs: 5000 })],
      );
      const rateLimited = { name: 'ModelError', message: 'Rate limited', status: 429 };
      expectObservable(agent.run('hi', { runId: 'r' }).pipe(labels('model-retry'))).toBe('(abc) 295ms d 4999ms (efg|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: retryEvent(1, 300, rateLimited),
        d: retryEvent(2, 5000, rateLimited),
        e: 'text-delta:ok',
        f: 'iteration-end',
        g: 'run-end:completed',
      });
    });
  });

  it('caps the exponential delay at maxDelayMs', () => {
    const { byType } = collect(
      [{ error: serverError() }, { error: serverError() }, { error: serverError() }, 'ok'],
      [modelRetry({ maxRetries: 3, initialDelayMs: 100, backoffFactor: 10, maxDelayMs: 5000, jitter: 0 })],
    );
    expect(byType('model-retry').map((e) => (e as { delayMs: number }).delayMs)).toEqual([100, 1000, 5000]);
  });

  it('drops the partial text of failed attempts from run-end text and session messages', () => {
    const { events, session, byType } = collect(
      [{ text: ['Hal', 'f an'], error: serverError() }, { text: ['Half', ' again'], errorAfter: 1, error: serverError() }, { text: ['Whole', ' answer'] }],
      [modelRetry({ jitter: 0 })],
    );
    expect(byType('text-delta').map((e) => (e as { text: string }).text)).toEqual(['Hal', 'f an', 'Half', 'Whole', ' answer']);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Whole answer' });
    expect(session.messages).toMatchObject([
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Whole answer' }] },
    ]);
  });

  it('does not retry a 400 or an arbitrary error by default', () => {
    const bad = collect([{ error: new ModelError('Bad request', { status: 400 }) }, 'ok'], [modelRetry()]);
    expect(bad.model.calls).toBe(1);
    expect(bad.byType('model-retry')).toEqual([]);
    expect(bad.byType('error')[0]).toMatchObject({ error: { message: 'Bad request', status: 400 } });
    const plain = collect([{ error: new Error('bug') }, 'ok'], [modelRetry()]);
    expect(plain.model.calls).toBe(1);
    expect(plain.events.at(-1)).toMatchObject({ reason: 'error' });
  });

  it('retries network errors by default', () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const fetchFailed = new TypeError('fetch failed', { cause: Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }) });
    const { model, events } = collect([{ error: reset }, { error: fetchFailed }, 'ok'], [modelRetry({ jitter: 0 })]);
    expect(model.calls).toBe(3);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'ok' });
    expect(isRetryableModelError(new ModelError('x', { status: 429 }))).toBe(true);
    expect(isRetryableModelError(new ModelError('x', { status: 400 }))).toBe(false);
    expect(isRetryableModelError(new ModelError('cut', { retryable: true }))).toBe(true);
    expect(isRetryableModelError(new TypeError('terminated'))).toBe(true);
    expect(isRetryableModelError(new TypeError('x is not a function'))).toBe(false);
  });

  it('retryOn decides which errors are retried', () => {
    const seen: unknown[] = [];
    const retryOn = (error: unknown) => (seen.push(error), (error as Error).message === 'again');
    const { model, events } = collect(
      [{ error: new Error('again') }, { error: new ModelError('stop', { status: 503 }) }, 'ok'],
      [modelRetry({ retryOn, jitter: 0 })],
    );
    expect(model.calls).toBe(2);
    expect(seen.map((e) => (e as Error).message)).toEqual(['again', 'stop']);
    expect(events.at(-1)).toMatchObject({ reason: 'error' });
  });

  describe("onFailure: 'continue'", () => {
    it('ends the iteration with "Model call failed after N attempts" and the run completes', () => {
      const ts = newScheduler();
      const session = createSession();
      ts.run(({ expectObservable }) => {
        const { agent } = setup(
          ts,
          [{ error: serverError() }, { text: 'Part', error: serverError() }, { text: 'Partial', error: serverError('Still down') }],
          [modelRetry({ jitter: 0, onFailure: 'continue' })],
        );
        expectObservable(agent.run('hi', { runId: 'r', session }).pipe(labels('run-end'))).toBe('(abc) 995ms (de) 1996ms (fghi|)', {
          a: 'run-start',
          b: 'iteration-start',
          c: 'model-retry',
          d: 'text-delta:Part',
          e: 'model-retry',
          f: 'text-delta:Partial',
          g: 'text-delta:Model call failed after 3 attempts: Still down',
          h: 'iteration-end',
          i: {
            type: 'run-end',
            runId: 'r',
            reason: 'completed',
            text: 'Model call failed after 3 attempts: Still down',
            usage: { inputTokens: 0, outputTokens: 0 },
          },
        });
      });
      expect(session.messages.at(-1)).toMatchObject({
        role: 'assistant',
        content: [{ type: 'text', text: 'Model call failed after 3 attempts: Still down' }],
      });
    });

    it('also for a non-retryable error, after 1 attempt', () => {
      const { events, model, byType } = collect(
        [{ text: 'Par', error: new ModelError('Bad request', { status: 400 }) }],
        [modelRetry({ onFailure: 'continue' })],
      );
      expect(model.calls).toBe(1);
      expect(byType('error')).toEqual([]);
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Model call failed after 1 attempts: Bad request' });
    });
  });

  it('keeps no state between runs of one agent (counts live in the subscription)', () => {
    const ts = newScheduler();
    const retry = modelRetry({ maxRetries: 1, jitter: 0 });
    const ends: unknown[] = [];
    ts.run(() => {
      // Two runs, each failing once then succeeding: a shared counter would exhaust the second.
      for (const id of ['r1', 'r2']) {
        const model = scriptedModel([{ error: serverError() }, 'ok'], { scheduler: ts });
        const agent = createAgent({ model, middleware: [retry], scheduler: ts });
        agent.run('hi', { runId: id }).subscribe((e) => e.type === 'run-end' && ends.push([e.runId, e.reason, ts.now()]));
      }
    });
    expect(ends).toEqual([
      ['r1', 'completed', 1000],
      ['r2', 'completed', 1000],
    ]);
  });

  it('a new iteration starts with a fresh retry budget', () => {
    const { events, model } = collect(
      [{ error: serverError() }, { toolCalls: [{ name: 'nope', args: {} }] }, { error: serverError() }, 'done'],
      [modelRetry({ maxRetries: 1, jitter: 0 })],
    );
    expect(model.calls).toBe(4);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'done', frame: 2000 });
    expect(events.filter((e) => e.type === 'model-retry').map((e) => (e as { iteration: number }).iteration)).toEqual([0, 1]);
  });

  it('cancelling during the backoff delay stops retrying', () => {
    const ts = newScheduler();
    ts.run(({ expectObservable, cold }) => {
      const { agent, model } = setup(ts, [{ error: serverError() }, 'ok'], [modelRetry({ jitter: 0 })]);
      const controller = new AbortController();
      cold('500ms a').subscribe(() => controller.abort());
      expectObservable(agent.run('hi', { runId: 'r', signal: controller.signal }).pipe(labels())).toBe('(abc) 495ms (d|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'model-retry',
        d: 'run-end:cancelled',
      });
      ts.flush();
      expect(model.calls).toBe(1);
    });
  });

  it('a consumer that unsubscribes on model-retry cancels the delayed attempt', () => {
    const ts = newScheduler();
    ts.run(({ expectObservable }) => {
      const { agent, model } = setup(ts, [{ error: serverError() }, 'ok'], [modelRetry({ jitter: 0 })]);
      const untilRetry = agent.run('hi', { runId: 'r' }).pipe(takeWhile((e) => e.type !== 'model-retry', true));
      expectObservable(untilRetry.pipe(labels())).toBe('(abc|)', { a: 'run-start', b: 'iteration-start', c: 'model-retry' });
      ts.flush();
      expect(model.calls).toBe(1);
      expect(ts.actions).toEqual([]);
    });
  });

  it('a consumer that unsubscribes on model-retry stops a retry that would start at once', () => {
    const rateLimited = () => new ModelError('Rate limited', { status: 429, retryAfterMs: 0 });
    const model = scriptedModel([{ error: rateLimited() }, 'ok']);
    const agent = createAgent({ model, middleware: [modelRetry({ scheduler: queueScheduler })] });
    const seen: string[] = [];
    let completed = false;
    agent
      .run('hi')
      .pipe(takeWhile((e) => e.type !== 'model-retry', true))
      .subscribe({ next: (e) => seen.push(eventLabel(e)), complete: () => (completed = true) });
    expect(seen).toEqual(['run-start', 'iteration-start', 'model-retry']);
    expect(completed).toBe(true);
    expect(model.calls).toBe(1);
  });

  it('with a synchronous scheduler and retryAfterMs 0, retries at once, in order', () => {
    const rateLimited = () => new ModelError('Rate limited', { status: 429, retryAfterMs: 0 });
    const { events, model } = collect([{ text: 'A', error: rateLimited() }, { error: rateLimited() }, 'ok'], [modelRetry({ scheduler: queueScheduler })]);
    expect(model.calls).toBe(3);
    expect(events.map((e) => `${eventLabel(e)}@${e.frame}`)).toEqual([
      'run-start@0',
      'iteration-start@0',
      'text-delta:A@0',
      'model-retry@0',
      'model-retry@0',
      'text-delta:ok@0',
      'iteration-end@0',
      'run-end:completed@0',
    ]);
  });

  it('cancelling during the delay on the wall clock leaves no timer behind', async () => {
    jest.useFakeTimers();
    try {
      const model = scriptedModel([{ error: serverError() }, 'ok']);
      const agent = createAgent({ model, middleware: [modelRetry({ jitter: 0 })] });
      const controller = new AbortController();
      const seen: string[] = [];
      agent.run('hi', { signal: controller.signal }).subscribe((e) => seen.push(eventLabel(e)));
      expect(seen).toContain('model-retry');
      expect(jest.getTimerCount()).toBe(1);
      controller.abort();
      expect(jest.getTimerCount()).toBe(0);
      jest.advanceTimersByTime(5000);
      expect(model.calls).toBe(1);
      expect(seen.at(-1)).toBe('run-end:cancelled');
    } finally {
      jest.useRealTimers();
    }
  });

  it("never retries an inner middleware's failure, also not with onFailure: continue", () => {
    for (const onFailure of ['error', 'continue'] as const) {
      // modelFallback builds the wrappers inside it again through ctx.call(); 'inner' breaks then.
      let built = 0;
      const inner: AgentMiddleware = {
        name: 'inner',
        wrapModel: () => {
          if (++built > 1) throw new Error('inner wrapper broke');
          return (source) => source;
        },
      };
      const { events, byType, model } = collect([{ error: serverError() }, 'ok'], [modelRetry({ onFailure }), modelFallback(scriptedModel(['backup'])), inner]);
      expect(byType('model-retry')).toEqual([]);
      expect(byType('error')).toEqual([
        expect.objectContaining({ source: 'middleware', middleware: 'inner', error: expect.objectContaining({ message: 'inner wrapper broke' }) }),
      ]);
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
      expect([model.calls, built]).toEqual([1, 2]);
    }
  });

  it('a throwing retryOn fails the call with what it threw', () => {
    const retryOn = () => {
      throw new Error('retryOn broke');
    };
    const { byType, model } = collect([{ error: serverError() }, 'ok'], [modelRetry({ retryOn })]);
    expect(model.calls).toBe(1);
    expect(byType('error')[0]).toMatchObject({ error: { message: 'retryOn broke' } });
    const cont = collect([{ error: serverError() }, 'ok'], [modelRetry({ retryOn, onFailure: 'continue' })]);
    expect(cont.events.at(-1)).toMatchObject({ reason: 'completed', text: 'Model call failed after 1 attempts: retryOn broke' });
  });

  it('validates its options with TypeErrors naming the option', () => {
    expect(() => modelRetry({ maxRetries: -1 })).toThrow(new TypeError('modelRetry: maxRetries must be an integer >= 0, got -1'));
    expect(() => modelRetry({ maxRetries: 1.5 })).toThrow(/maxRetries/);
    expect(() => modelRetry({ initialDelayMs: -5 })).toThrow(/initialDelayMs/);
    expect(() => modelRetry({ backoffFactor: 0 })).toThrow(/backoffFactor/);
    expect(() => modelRetry({ maxDelayMs: Number.NaN })).toThrow(/maxDelayMs/);
    expect(() => modelRetry({ jitter: 1.5 })).toThrow(/jitter/);
    expect(() => modelRetry({ random: 3 as unknown as () => number })).toThrow(/random/);
    expect(() => modelRetry({ retryOn: 'yes' as unknown as () => boolean })).toThrow(/retryOn/);
    expect(() => modelRetry({ onFailure: 'ignore' as 'error' })).toThrow(/onFailure/);
    expect(() => modelRetry({ scheduler: {} as never })).toThrow(/scheduler/);
    expect(() => modelRetry(null as never)).toThrow(TypeError);
    expect(modelRetry().name).toBe('modelRetry');
  });
});
