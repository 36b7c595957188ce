import { config, map, tap, throwError, timer, type Observable } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { createAgent, memoryStore, type AgentEvent, type AgentStore } from '../../src/index';
import { eventLabels, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { permissions } from '../../operators/permissions';
import { withoutToolInput } from '../support/withoutToolInput';
import { payTool as pay } from '../support/specTools';

// A store whose notifications (answers, cancels) fail, as a network store's do when its listening
// connection is lost for good: the run fails as on a failed write (an `error` event, `run-end`
// reason `error`, left interrupted), and nothing reaches rxjs as an unhandled error.

let scheduler: TestScheduler;
const unhandled: unknown[] = [];
beforeEach(() => {
  scheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
  unhandled.length = 0;
  config.onUnhandledError = (error) => unhandled.push(error);
});
afterEach(() => {
  config.onUnhandledError = null;
});

const lost = () => new Error('listening connection lost');
/** Fails after `ms` of virtual time. */
const failsAfter = <T>(ms: number): Observable<T> =>
  timer(ms, scheduler).pipe(
    map(() => {
      throw lost();
    }),
  );

/** `inner` with some of its methods replaced. */
function withMethods(inner: AgentStore, methods: Partial<AgentStore>): AgentStore {
  return Object.assign(Object.create(inner) as AgentStore, methods);
}

const payCall: ScriptedTurn = { toolCalls: [{ name: 'pay', args: { n: 1 }, callId: 'c1' }] };

function agentOn(store: AgentStore, turns: ScriptedTurn[]) {
  const model = scriptedModel(turns, { scheduler });
  return createAgent({ model, tools: [pay], middleware: [permissions({ timeout: 10_000 })], store, scheduler });
}

const failed = { type: 'error', source: 'run', error: { name: 'Error', message: 'listening connection lost' } };

describe("a store whose notifications fail fails the run, not the process (the run's Observable never errors)", () => {
  it('cancellations() erroring while the model streams: error event, run-end, the run left interrupted and resumable', async () => {
    const inner = memoryStore({ scheduler });
    const store = withMethods(inner, { cancellations: () => failsAfter(100) });
    const agent = agentOn(store, [{ text: 'slow', delay: 500 }]);
    const events: AgentEvent[] = [];
    scheduler.run(({ expectObservable }) => {
      // One subscription (each is a run); an Observable error would show in the marbles.
      const run$ = agent.run('hi', { runId: 'r1' }).pipe(tap((e) => events.push(e)));
      expectObservable(run$.pipe(eventLabels())).toBe('(ab) 96ms (cd|)', { a: 'run-start', b: 'iteration-start', c: 'error:run', d: 'run-end:error' });
    });
    expect(unhandled).toEqual([]);
    expect(events.at(-2)).toEqual(expect.objectContaining(failed));
    expect(events.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'error' }));
    expect(inner.read('r1')?.some((entry) => entry.record.kind === 'end')).toBe(false);
    expect(await agent.runs.get('r1')).toEqual(expect.objectContaining({ status: 'interrupted' }));
    // On a healthy store, a resume finishes it.
    const resumed: AgentEvent[] = [];
    scheduler.run(() => {
      agentOn(inner, ['done'])
        .resume('r1')
        .subscribe((e) => resumed.push(e));
    });
    expect(resumed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed', text: 'done' }));
  });

  it('cancellations() failing at once, or throwing, fails the run the same way', async () => {
    const cases: Array<AgentStore['cancellations']> = [
      () => throwError(lost),
      () => {
        throw lost();
      },
    ];
    for (const [i, cancellations] of cases.entries()) {
      const inner = memoryStore({ scheduler });
      const agent = agentOn(withMethods(inner, { cancellations }), ['never']);
      const events: AgentEvent[] = [];
      let errored: unknown;
      scheduler.run(() => {
        agent.run('hi', { runId: `r${i}` }).subscribe({ next: (e) => events.push(e), error: (e: unknown) => (errored = e) });
      });
      expect(errored).toBeUndefined();
      expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
      expect(events[1]).toEqual(expect.objectContaining(failed));
      expect(await agent.runs.get(`r${i}`)).toEqual(expect.objectContaining({ status: 'interrupted' }));
    }
    expect(unhandled).toEqual([]);
  });

  it('answers() erroring while a request waits: the store failed, not the middleware; the run is left interrupted', async () => {
    const inner = memoryStore({ scheduler });
    const store = withMethods(inner, { answers: () => failsAfter(100) });
    const agent = agentOn(store, [payCall, 'never']);
    const events: AgentEvent[] = [];
    scheduler.run(({ expectObservable }) => {
      // One subscription (each is a run); an Observable error would show in the marbles.
      const run$ = agent.run('pay', { runId: 'r2' }).pipe(tap((e) => events.push(e)));
      expectObservable(run$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 94ms (ef|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:pay',
        d: 'permission-request',
        e: 'error:run',
        f: 'run-end:error',
      });
    });
    expect(unhandled).toEqual([]);
    expect(events.at(-2)).toEqual(expect.objectContaining(failed));
    expect(await agent.runs.get('r2')).toEqual(expect.objectContaining({ status: 'interrupted' }));
    // The request is still open in the journal: answered on a healthy store, the resume goes on.
    const resumed: AgentEvent[] = [];
    scheduler.run(() => {
      const healthy = agentOn(inner, ['paid']);
      void healthy.respond('r2', { type: 'permission-response', requestId: 'r2.0.c1.permission-request', approved: true });
      healthy.resume('r2').subscribe((e) => resumed.push(e));
    });
    expect(resumed.find((e) => e.type === 'tool-result')).toEqual(expect.objectContaining({ result: 'paid 1' }));
    expect(resumed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed' }));
  });

  it('answers() that throws when called fails only the run that waits for an answer, as a store failure', async () => {
    const inner = memoryStore({ scheduler });
    const store = withMethods(inner, {
      answers: () => {
        throw lost();
      },
    });
    // A run that asks nothing does not read its answers.
    const quiet: AgentEvent[] = [];
    scheduler.run(() => {
      agentOn(store, ['hello'])
        .run('hi', { runId: 'r3' })
        .subscribe((e) => quiet.push(e));
    });
    expect(quiet.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed' }));
    const events: AgentEvent[] = [];
    let errored: unknown;
    const agent = agentOn(store, [payCall, 'never']);
    scheduler.run(() => {
      agent.run('pay', { runId: 'r4' }).subscribe({ next: (e) => events.push(e), error: (e: unknown) => (errored = e) });
    });
    expect(errored).toBeUndefined();
    expect(events.slice(-2)).toEqual([expect.objectContaining(failed), expect.objectContaining({ type: 'run-end', reason: 'error' })]);
    expect(await agent.runs.get('r4')).toEqual(expect.objectContaining({ status: 'interrupted' }));
    expect(unhandled).toEqual([]);
  });
});
