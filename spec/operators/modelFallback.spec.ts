import { map } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { createAgent, createSession, ModelError, type AgentEvent, type AgentMiddleware, type ModelClient } from '../../src/index';
import { eventLabel, scriptedModel } from '../../src/testing/index';
import { modelFallback } from '../../operators/modelFallback';
import { modelRetry } from '../../operators/modelRetry';
import { modelTimeout } from '../../operators/modelTimeout';

const newScheduler = () => new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
const labels = (...whole: string[]) => map((e: AgentEvent) => (whole.includes(e.type) ? e : eventLabel(e)));
const down = (message: string, status = 503) => new ModelError(message, { status });

function collect(build: (ts: TestScheduler) => { primary: ModelClient; middleware: AgentMiddleware[] }) {
  const ts = newScheduler();
  const session = createSession();
  const events: Array<AgentEvent & { frame: number }> = [];
  ts.run(() => {
    const { primary, middleware } = build(ts);
    createAgent({ model: primary, middleware, scheduler: ts })
      .run('hi', { runId: 'r', session })
      .subscribe((e) => events.push({ ...e, frame: ts.now() }));
  });
  return { events, session, byType: (type: string) => events.filter((e) => e.type === type) };
}

describe('modelFallback', () => {
  it('sends the same request to the fallback, emits model-fallback and drops the partial text', () => {
    const ts = newScheduler();
    const session = createSession();
    let primary!: ReturnType<typeof scriptedModel>;
    let backup!: ReturnType<typeof scriptedModel>;
    ts.run(({ expectObservable }) => {
      primary = scriptedModel([{ text: ['Half', ' an'], error: down('Overloaded'), delay: 10 }], { scheduler: ts });
      backup = scriptedModel([{ text: 'From backup', delay: 5 }], { scheduler: ts });
      const agent = createAgent({ model: primary, middleware: [modelFallback(backup)], scheduler: ts });
      expectObservable(agent.run('hi', { runId: 'r', session }).pipe(labels('model-fallback'))).toBe('(ab) 6ms c 9ms (de) 1ms f 4ms (gh|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:Half',
        d: 'text-delta: an',
        e: { type: 'model-fallback', runId: 'r', from: 0, to: 1, error: { name: 'ModelError', message: 'Overloaded', status: 503 } },
        f: 'text-delta:From backup',
        g: 'iteration-end',
        h: 'run-end:completed',
      });
    });
    expect(backup.requests).toHaveLength(1);
    expect(backup.requests[0].messages).toEqual(primary.requests[0].messages);
    expect(backup.requests[0].settings).toEqual(primary.requests[0].settings);
    expect(session.messages).toMatchObject([
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'From backup' }] },
    ]);
  });

  it('tries each fallback in order, with positions in the events', () => {
    const { byType, events } = collect((ts) => ({
      primary: scriptedModel([{ error: down('p') }], { scheduler: ts }),
      middleware: [
        modelFallback(scriptedModel([{ text: 'partial', error: down('f1', 500) }], { scheduler: ts }), scriptedModel(['third time lucky'], { scheduler: ts })),
      ],
    }));
    expect(byType('model-fallback')).toEqual([
      { type: 'model-fallback', runId: 'r', from: 0, to: 1, error: { name: 'ModelError', message: 'p', status: 503 }, frame: 0 },
      { type: 'model-fallback', runId: 'r', from: 1, to: 2, error: { name: 'ModelError', message: 'f1', status: 500 }, frame: 0 },
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'third time lucky' });
  });

  it('raises the last error when every model fails', () => {
    const { byType, events } = collect((ts) => ({
      primary: scriptedModel([{ error: down('p') }], { scheduler: ts }),
      middleware: [modelFallback(scriptedModel([{ error: down('f1') }], { scheduler: ts }), scriptedModel([{ error: down('last', 502) }], { scheduler: ts }))],
    }));
    expect(byType('model-fallback')).toHaveLength(2);
    expect(byType('error')).toEqual([{ type: 'error', runId: 'r', source: 'model', error: { name: 'ModelError', message: 'last', status: 502 }, frame: 0 }]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('does not touch a successful call; every call starts with the primary', () => {
    const ts = newScheduler();
    let backup!: ReturnType<typeof scriptedModel>;
    let primary!: ReturnType<typeof scriptedModel>;
    const events: AgentEvent[] = [];
    ts.run(() => {
      primary = scriptedModel([{ error: down('once') }, 'fine'], { scheduler: ts });
      backup = scriptedModel([{ toolCalls: [{ name: 'missing', args: {} }] }], { scheduler: ts });
      createAgent({ model: primary, middleware: [modelFallback(backup)], scheduler: ts })
        .run('hi', { runId: 'r' })
        .subscribe((e) => events.push(e));
    });
    // iteration 0: primary fails, backup answers (a tool call); iteration 1: the primary again, fine.
    expect(primary.calls).toBe(2);
    expect(backup.calls).toBe(1);
    expect(events.filter((e) => e.type === 'model-fallback')).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'fine' });
  });

  it('wrappers registered after it apply to each model: retry each, then fall back', () => {
    const { byType, events } = collect((ts) => ({
      primary: scriptedModel([{ error: down('p1') }, { error: down('p2') }, { error: down('p3') }], { scheduler: ts }),
      middleware: [modelFallback(scriptedModel(['backup'], { scheduler: ts })), modelRetry({ jitter: 0 })],
    }));
    expect(byType('model-retry').map((e) => e.frame)).toEqual([0, 1000]);
    expect(byType('model-fallback')).toEqual([
      expect.objectContaining({ from: 0, to: 1, error: { name: 'ModelError', message: 'p3', status: 503 }, frame: 3000 }),
    ]);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'backup', frame: 3000 });
  });

  it('a modelRetry registered before it retries the whole sequence', () => {
    const { byType, events } = collect((ts) => ({
      primary: scriptedModel([{ error: down('p1') }, 'primary back'], { scheduler: ts }),
      middleware: [modelRetry({ jitter: 0 }), modelFallback(scriptedModel([{ error: down('b1') }], { scheduler: ts }))],
    }));
    expect(byType('model-fallback')).toHaveLength(1);
    expect(byType('model-retry')).toEqual([expect.objectContaining({ attempt: 1, error: expect.objectContaining({ message: 'b1' }), frame: 0 })]);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'primary back', frame: 1000 });
  });

  it('falls back when a modelTimeout inside it fires', () => {
    const { byType, events } = collect((ts) => ({
      primary: scriptedModel([{ text: 'late', delay: 500 }], { scheduler: ts }),
      middleware: [modelFallback(scriptedModel([{ text: 'quick', delay: 10 }], { scheduler: ts })), modelTimeout({ firstTokenMs: 100 })],
    }));
    expect(byType('model-fallback')).toEqual([
      expect.objectContaining({ from: 0, to: 1, error: { name: 'ModelTimeoutError', message: 'No first token within 100 ms' }, frame: 100 }),
    ]);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'quick', frame: 120 });
  });

  it('validates its clients with TypeErrors', () => {
    expect(() => modelFallback()).toThrow(new TypeError('modelFallback: clients must hold at least one fallback ModelClient'));
    expect(() => modelFallback(scriptedModel([]), 'gpt-4o' as unknown as ModelClient)).toThrow(
      new TypeError('modelFallback: clients[1] must be a ModelClient (a function), got string'),
    );
    expect(modelFallback(scriptedModel([])).name).toBe('modelFallback');
  });
});
