import { withoutToolInput } from '../support/withoutToolInput';
import { lastValueFrom, map, race, share, switchMap, tap, throwError, timer, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineState,
  defineTool,
  InMemorySessionStore,
  JournalConflictError,
  SessionConflictError,
  type AgentMiddleware,
  memoryStore,
  type AgentEvent,
  type AgentStore,
  type JournalRecord,
  type Message,
  type RunInfo,
  type Tool,
  UnparsedArguments,
} from '../../src/index';
import { eventLabels, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { permissions } from '../../operators/permissions';
import { runProcesses } from '../support/processes';

const REQUEST = 'r.0.c1.permission-request';
const payCall: ScriptedTurn = { toolCalls: [{ name: 'pay', args: { n: 1 }, callId: 'c1' }] };

let scheduler: TestScheduler;
beforeEach(() => {
  scheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
});

/** A pay tool that needs approval and records its executions. */
function payTool(ran: string[], options: { idempotent?: boolean; ms?: number } = {}): Tool {
  return defineTool({
    name: 'pay',
    description: 'Pays',
    parameters: z.object({ n: z.number() }),
    needsApproval: options.ms === undefined,
    idempotent: options.idempotent,
    execute: ({ n }) => {
      ran.push(`pay ${n}`);
      return options.ms === undefined ? `paid ${n}` : timer(options.ms, scheduler).pipe(switchMap(() => [`paid ${n}`]));
    },
  });
}

/** An agent on `store` (one per process in these tests: each has its own model script). */
function agentOn(store: AgentStore, turns: ScriptedTurn[], tool: Tool, onRequest: 'wait' | 'suspend' = 'suspend', approval = true, timeout = 1000) {
  const model = scriptedModel(turns, { scheduler });
  const agent = createAgent({ model, tools: [tool], middleware: approval ? [permissions({ timeout })] : [], store, scheduler, onRequest });
  return { agent, model };
}

const approve = { type: 'permission-response', requestId: REQUEST, approved: true } as const;

/** Each tool call paired with a result in the next message: what a model request needs. */
function expectValidHistory(messages: readonly Message[]): void {
  for (let i = 0; i < messages.length; i++) {
    const calls = messages[i].content.filter((p) => p.type === 'tool-call');
    if (calls.length === 0) continue;
    const results = messages[i + 1]?.content.filter((p) => p.type === 'tool-result') ?? [];
    expect(results.map((r) => (r as { callId: string }).callId)).toEqual(calls.map((c) => (c as { callId: string }).callId));
  }
}

describe('suspend, answer, resume', () => {
  it('suspends on a request, takes an answer given by id, and resumes in another agent without calling the model or the tool twice', async () => {
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const ran: string[] = [];
    const a = agentOn(store, [payCall], payTool(ran));
    const b = agentOn(store, ['done'], payTool(ran));
    const answered: Array<Promise<boolean>> = [];
    const seqs: number[] = [];
    scheduler.run(({ cold, expectObservable }) => {
      const first$ = a.agent.run('pay', { runId: 'r', sessionId: 's' });
      expectObservable(first$.pipe(withoutToolInput(), eventLabels())).toBe('(abcde|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:pay',
        d: 'permission-request',
        e: 'run-end:suspended',
      });
      cold('10ms x').subscribe(() => answered.push(b.agent.respond('r', approve), b.agent.respond('r', approve)));
      const resumed$ = cold('20ms (x|)').pipe(
        switchMap(() => b.agent.resume('r')),
        share(),
      );
      resumed$.subscribe((e) => seqs.push(e.seq ?? -1));
      expectObservable(resumed$.pipe(withoutToolInput(), eventLabels())).toBe('20ms (abcdefg|)', {
        a: 'run-start',
        b: 'tool-result:pay',
        c: 'iteration-end',
        d: 'iteration-start',
        e: 'text-delta:done',
        f: 'iteration-end',
        g: 'run-end:completed',
      });
    });
    expect(await Promise.all(answered)).toEqual([true, false]); // the first answer wins
    expect(ran).toEqual(['pay 1']);
    expect([a.model.calls, b.model.calls]).toEqual([1, 1]);
    expect(seqs).toEqual([9, 10, 11, 12, 13, 14, 15]); // the journal's seq goes on where the suspended run stopped
    const session = store.load('s');
    expect(session?.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expectValidHistory(session?.messages ?? []);
  });

  it('lists the pending requests in run-end and in runs.get, with their absolute deadline', async () => {
    const store = memoryStore({ scheduler });
    const { agent } = agentOn(store, [payCall], payTool([]));
    const ends: AgentEvent[] = [];
    const infos: Array<Promise<RunInfo | undefined>> = [];
    scheduler.run(({ cold }) => {
      cold('5ms x').subscribe(() => agent.run('pay', { runId: 'r' }).subscribe((e) => e.type === 'run-end' && ends.push(e)));
      cold('7ms x').subscribe(() => infos.push(agent.runs.get('r')));
    });
    const pending = [{ requestId: REQUEST, type: 'permission-request', deadline: 1005 }];
    expect(ends).toEqual([expect.objectContaining({ reason: 'suspended', pendingRequests: pending, seq: 8 })]);
    expect(await infos[0]).toEqual({ runId: 'r', status: 'suspended', sessionId: undefined, seq: 8, pendingRequests: pending, lease: undefined });
  });

  it.each([
    ['its asker left (a race with a timer)', 100, true],
    ['that timed out', 3, false],
  ])('stores at once that a request %s waits no more: not pending, its answer refused', async (_what, timeout, racing) => {
    const store = memoryStore({ scheduler });
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: (source) =>
        source.pipe(
          switchMap((ctx) => {
            const asked = ctx.request({ type: 'continuation-request', requestId: 'q1', iteration: ctx.iteration, maxIterations: 1 } as never, { timeout });
            return (racing ? race(asked, timer(3, scheduler)) : asked).pipe(map(() => ctx));
          }),
        ),
    };
    // A slow model after the request is left: nothing else stores the journal meanwhile.
    const model = scriptedModel([{ text: ['a', 'b'], delay: 50 }], { scheduler });
    const agent = createAgent({ model, middleware: [asking], store, scheduler });
    const infos: Array<Promise<RunInfo | undefined>> = [];
    const answered: Array<Promise<boolean>> = [];
    scheduler.run(({ cold }) => {
      agent.run('go', { runId: 'r' }).subscribe();
      cold('1ms x').subscribe(() => infos.push(agent.runs.get('r')));
      cold('7ms x').subscribe(() => {
        infos.push(agent.runs.get('r'));
        answered.push(agent.respond('r', { type: 'continuation-response', requestId: 'q1', approved: true } as never));
      });
    });
    const [asked, left] = await Promise.all(infos);
    expect(asked).toMatchObject({ status: 'running', pendingRequests: [{ requestId: 'q1', type: 'continuation-request', deadline: timeout }] });
    expect(left).toMatchObject({ status: 'running', pendingRequests: [] });
    expect(await answered[0]).toBe(false);
  });

  it('takes an answer through the store to a request asked again after its asker had left it', async () => {
    const store = memoryStore({ scheduler });
    const q1 = { type: 'continuation-request', requestId: 'q1', iteration: 0, maxIterations: 1 } as never;
    const asking: AgentMiddleware = {
      name: 'asking',
      beforeIteration: (source) =>
        source.pipe(
          switchMap((ctx) =>
            race(ctx.request(q1, { timeout: 1000 }), timer(3, scheduler)).pipe(
              switchMap(() => ctx.request(q1, { timeout: 1000 })),
              map(() => ctx),
            ),
          ),
        ),
    };
    const agent = createAgent({ model: scriptedModel(['ok'], { scheduler }), middleware: [asking], store, scheduler });
    const infos: Array<Promise<RunInfo | undefined>> = [];
    const answered: Array<Promise<boolean>> = [];
    const labels: string[] = [];
    scheduler.run(({ cold }) => {
      agent.run('go', { runId: 'r' }).subscribe((e) => labels.push(e.type === 'request-expired' ? `request-expired:${e.reason}` : e.type));
      cold('7ms x').subscribe(() => infos.push(agent.runs.get('r')));
      cold('9ms x').subscribe(() => answered.push(agent.respond('r', { type: 'continuation-response', requestId: 'q1', approved: true } as never)));
    });
    expect((await infos[0])?.pendingRequests).toEqual([{ requestId: 'q1', type: 'continuation-request', deadline: 1000 }]);
    expect(await answered[0]).toBe(true);
    expect(labels).toEqual([
      'run-start',
      'iteration-start',
      'continuation-request',
      'request-expired:cancelled',
      'continuation-request',
      'text-delta',
      'iteration-end',
      'run-end',
    ]);
  });

  it("delivers a suspension's run-end once the store has let the lease go: runs.get then says suspended", async () => {
    const store = memoryStore({ scheduler });
    let letGo!: () => void;
    const released = new Promise<void>((resolve) => (letGo = resolve));
    const slowRelease: AgentStore = Object.assign(Object.create(store) as AgentStore, {
      releaseLease: (runId: string, owner: string) => released.then(() => store.releaseLease(runId, owner)),
    });
    const { agent } = agentOn(slowRelease, [payCall], payTool([]));
    const ended = new Promise<{ info: RunInfo | undefined; seen: string[] }>((resolve) => {
      const seen: string[] = [];
      agent.run('pay', { runId: 'r' }).subscribe((event) => {
        seen.push(event.type);
        if (event.type === 'run-end') void agent.runs.get('r').then((info) => resolve({ info, seen }));
      });
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(store.getLease('r')).toBeDefined(); // journaled, not let go yet: the run-end waits
    letGo();
    const { info, seen } = await ended;
    expect(seen.at(-1)).toBe('run-end');
    expect(info).toMatchObject({ status: 'suspended', lease: undefined });
  });

  it("delivers a suspension's run-end after leaseMs when the store never answers the release (the lease has expired by then)", () => {
    const store = memoryStore({ scheduler });
    const silentRelease: AgentStore = Object.assign(Object.create(store) as AgentStore, { releaseLease: () => new Promise<void>(() => undefined) });
    const { agent } = agentOn(silentRelease, [payCall], payTool([]));
    const ends: Array<[string, number]> = [];
    scheduler.run(() => {
      agent.run('pay', { runId: 'r' }).subscribe((event) => event.type === 'run-end' && ends.push([event.reason, scheduler.now()]));
    });
    expect(ends).toEqual([['suspended', 30_000]]);
  });

  it('takes the safe default when the deadline passed while the run was suspended, and refuses a late answer', async () => {
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const ran: string[] = [];
    const a = agentOn(store, [payCall], payTool(ran));
    const b = agentOn(store, ['ok'], payTool(ran));
    const late: Array<Promise<boolean>> = [];
    const results: unknown[] = [];
    scheduler.run(({ cold, expectObservable }) => {
      a.agent.run('pay', { runId: 'r' }).subscribe();
      cold('1500ms x').subscribe(() => late.push(b.agent.respond('r', approve)));
      const resumed$ = cold('2s (x|)').pipe(
        switchMap(() => b.agent.resume('r')),
        share(),
      );
      resumed$.subscribe((e) => e.type === 'tool-result' && results.push(e.result));
      expectObservable(resumed$.pipe(withoutToolInput(), eventLabels())).toBe('2s (abcdefgh|)', {
        a: 'run-start',
        b: 'request-expired:timeout',
        c: 'tool-result:pay',
        d: 'iteration-end',
        e: 'iteration-start',
        f: 'text-delta:ok',
        g: 'iteration-end',
        h: 'run-end:completed',
      });
    });
    expect(await late[0]).toBe(false);
    expect(ran).toEqual([]);
    expect(results).toEqual([expect.stringContaining('timed out')]);
  });

  it('waits for the time left to the deadline when resumed before it', () => {
    const store = memoryStore({ scheduler });
    const a = agentOn(store, [payCall], payTool([]));
    const b = agentOn(store, ['ok'], payTool([]));
    scheduler.run(({ cold, expectObservable }) => {
      a.agent.run('pay', { runId: 'r' }).subscribe();
      // Resumed to wait this time (the run was started to suspend).
      const resumed$ = cold('600ms (x|)').pipe(
        switchMap(() => b.agent.resume('r', { onRequest: 'wait' })),
        share(),
      );
      // Asked at 0 with a 1000 ms timeout: resumed at 600, it expires at 1000, not 1600.
      expectObservable(resumed$.pipe(withoutToolInput(), eventLabels())).toBe('600ms a 399ms (bcdefgh|)', {
        a: 'run-start',
        b: 'request-expired:timeout',
        c: 'tool-result:pay',
        d: 'iteration-end',
        e: 'iteration-start',
        f: 'text-delta:ok',
        g: 'iteration-end',
        h: 'run-end:completed',
      });
    });
  });
});

describe('cancel', () => {
  it('cancels a suspended run from another agent: its request expires and the session keeps the completed part', async () => {
    const store = memoryStore({ scheduler });
    const ran: string[] = [];
    const a = agentOn(store, [payCall], payTool(ran));
    const b = agentOn(store, [], payTool(ran));
    const cancelled: Array<Promise<boolean>> = [];
    scheduler.run(({ cold, expectObservable }) => {
      a.agent.run('pay', { runId: 'r', sessionId: 's' }).subscribe();
      // Followed live from another agent, from after the suspension (seq 8).
      const followed$ = cold('5ms (x|)').pipe(switchMap(() => b.agent.events('r', { after: 8 })));
      cold('10ms x').subscribe(() => cancelled.push(b.agent.cancel('r')));
      expectObservable(followed$.pipe(withoutToolInput(), eventLabels())).toBe('10ms (abc|)', {
        a: 'run-start',
        b: 'request-expired:cancelled',
        c: 'run-end:cancelled',
      });
    });
    expect(await cancelled[0]).toBe(true);
    expect(ran).toEqual([]);
    expect(store.load('s')?.messages).toMatchObject([{ role: 'user', content: [{ type: 'text', text: 'pay' }] }]);
    expect(await b.agent.runs.get('r')).toBeUndefined(); // retention 0: dropped at its end
  });

  it('cancels a live run held by another agent through the store', () => {
    const store = memoryStore({ scheduler });
    const a = agentOn(store, [payCall], payTool([]), 'wait');
    const b = agentOn(store, [], payTool([]));
    let cancelled: Promise<boolean> | undefined;
    scheduler.run(({ cold, expectObservable }) => {
      const live$ = a.agent.run('pay', { runId: 'r' });
      cold('10ms x').subscribe(() => {
        cancelled = b.agent.cancel('r');
      });
      expectObservable(live$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 4ms (ef|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:pay',
        d: 'permission-request',
        e: 'request-expired:cancelled',
        f: 'run-end:cancelled',
      });
    });
    // memoryStore tells the live run at once, so it has ended before cancel() reads the lease.
    return expect(cancelled).resolves.toBe(true);
  });

  it('answers true for a live run that ended on the cancel before the lease was read (retention kept)', async () => {
    const store = memoryStore({ scheduler, retainMs: 1000 });
    const a = agentOn(store, [payCall], payTool([]), 'wait');
    let cancelled: Promise<boolean> | undefined;
    scheduler.run(({ cold }) => {
      a.agent.run('pay', { runId: 'r' }).subscribe();
      cold('10ms x').subscribe(() => {
        cancelled = a.agent.cancel('r');
      });
    });
    expect(await cancelled).toBe(true);
    expect((await a.agent.runs.get('r'))?.reason).toBe('cancelled');
  });

  it('answers false for a finished run', async () => {
    const store = memoryStore({ scheduler, retainMs: 1000 });
    const { agent } = agentOn(store, ['hi'], payTool([]));
    let done: Promise<boolean> | undefined;
    scheduler.run(() => {
      agent.run('hi', { runId: 'r' }).subscribe();
      done = agent.cancel('r');
    });
    expect(await done).toBe(false);
  });
});

describe('one process runs a run', () => {
  it('refuses a second resume while a live run holds the lease (RunBusyError), and an answer from elsewhere reaches the live run', async () => {
    const store = memoryStore({ scheduler });
    const ran: string[] = [];
    const a = agentOn(store, [payCall, 'paid'], payTool(ran), 'wait');
    const b = agentOn(store, [], payTool(ran));
    const errors: unknown[] = [];
    scheduler.run(({ cold, expectObservable }) => {
      const live$ = a.agent.run('pay', { runId: 'r' });
      const second$ = cold('10ms (x|)').pipe(
        switchMap(() => b.agent.resume('r')),
        share(),
      );
      second$.subscribe((e) => {
        if (e.type === 'error') errors.push(e.error);
        expect(e.seq).toBeUndefined(); // not journaled
      });
      cold('20ms x').subscribe(() => void b.agent.respond('r', approve));
      expectObservable(second$.pipe(withoutToolInput(), eventLabels())).toBe('10ms (abc|)', { a: 'run-start', b: 'error:run', c: 'run-end:error' });
      expectObservable(live$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 14ms (efghij|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:pay',
        d: 'permission-request',
        e: 'tool-result:pay',
        f: 'iteration-end',
        g: 'iteration-start',
        h: 'text-delta:paid',
        i: 'iteration-end',
        j: 'run-end:completed',
      });
    });
    expect(errors).toEqual([expect.objectContaining({ name: 'RunBusyError', message: expect.stringContaining("Run 'r' is running in another process") })]);
    expect(ran).toEqual(['pay 1']);
  });

  it('refuses a resume while the lease of a process that died has not expired, and takes the run once it has', () => {
    const store = memoryStore({ scheduler });
    const ran: string[] = [];
    const a = agentOn(store, [payCall], payTool(ran, { ms: 100 }), 'wait', false);
    const b = agentOn(store, ['after'], payTool(ran, { ms: 100 }), 'wait', false);
    const labels: string[][] = [[], []];
    scheduler.run(({ cold }) => {
      const sub = a.agent.run('pay', { runId: 'r' }).subscribe();
      // The process dies at 50 ms: its run stops, and its lease stays behind until it expires.
      cold('50ms x').subscribe(() => {
        sub.unsubscribe();
        store.acquireLease('r', 'a-process-that-died', 30_000);
      });
      cold('10s x').subscribe(() => b.agent.resume('r').subscribe((e) => labels[0].push(e.type)));
      cold('31s x').subscribe(() => b.agent.resume('r').subscribe((e) => labels[1].push(e.type)));
    });
    expect(labels[0]).toEqual(['run-start', 'error', 'run-end']);
    expect(labels[1]).toEqual(['run-start', 'tool-result', 'iteration-end', 'iteration-start', 'text-delta', 'iteration-end', 'run-end']);
    expect(ran).toEqual(['pay 1']);
  });

  it('refuses a new run with the id of a live run (RunBusyError), leaving the live run alone', () => {
    const store = memoryStore({ scheduler });
    const a = agentOn(store, [payCall, 'ok'], payTool([]), 'wait');
    const errors: unknown[] = [];
    const live: string[] = [];
    scheduler.run(({ cold }) => {
      a.agent.run('pay', { runId: 'r' }).subscribe((e) => live.push(e.type));
      cold('5ms x').subscribe(() => a.agent.run('again', { runId: 'r' }).subscribe((e) => e.type === 'error' && errors.push(e.error)));
      cold('10ms x').subscribe(() => void a.agent.respond('r', approve));
    });
    expect(errors).toEqual([expect.objectContaining({ name: 'RunBusyError' })]);
    expect(live.at(-1)).toBe('run-end');
  });

  it('renews the lease while the run waits, and lets it go at the end', async () => {
    const store = memoryStore({ scheduler });
    const a = agentOn(store, [payCall, 'paid'], payTool([]), 'wait', true, 300_000);
    const leases: unknown[] = [];
    const answers: Array<Promise<boolean>> = [];
    scheduler.run(({ cold }) => {
      a.agent.run('pay', { runId: 'r' }).subscribe();
      // Lease 30 s, renewed every 10 s: still held at 45 s; the answer at 50 s ends the run.
      cold('45s x').subscribe(() => leases.push(store.getLease('r')));
      cold('50s x').subscribe(() => answers.push(a.agent.respond('r', approve)));
      cold('51s x').subscribe(() => leases.push(store.getLease('r')));
    });
    expect(leases).toEqual([expect.objectContaining({ expiresAt: 70_000 }), undefined]);
    expect(await Promise.all(answers)).toEqual([true]);
  });
});

describe('a process that stops mid-tool', () => {
  function crashThenResume(idempotent: boolean) {
    const store = memoryStore({ scheduler });
    const ran: string[] = [];
    const a = agentOn(store, [payCall], payTool(ran, { idempotent, ms: 100 }), 'wait', false);
    const b = agentOn(store, ['after'], payTool(ran, { idempotent, ms: 100 }), 'wait', false);
    const results: unknown[] = [];
    return { store, ran, a, b, results };
  }

  it('does not run a non-idempotent tool again: the model reads that its outcome is unknown', () => {
    const { store, ran, a, b, results } = crashThenResume(false);
    scheduler.run(({ cold, expectObservable }) => {
      // The process "dies" at 50 ms, while the tool runs.
      expectObservable(a.agent.run('pay', { runId: 'r', sessionId: 's' }).pipe(withoutToolInput(), eventLabels()), '^ 50ms !').toBe('(abc)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:pay',
      });
      const resumed$ = cold('60ms (x|)').pipe(
        switchMap(() => b.agent.resume('r')),
        share(),
      );
      resumed$.subscribe((e) => e.type === 'tool-result' && results.push(e.result));
      expectObservable(resumed$.pipe(withoutToolInput(), eventLabels())).toBe('60ms (abcdefg|)', {
        a: 'run-start',
        b: 'tool-result:pay',
        c: 'iteration-end',
        d: 'iteration-start',
        e: 'text-delta:after',
        f: 'iteration-end',
        g: 'run-end:completed',
      });
    });
    expect(ran).toEqual(['pay 1']);
    expect(results).toEqual(["Tool 'pay' was interrupted; its outcome is unknown."]);
    expect(b.model.requests[0].messages.at(-1)?.content).toEqual([
      { type: 'tool-result', callId: 'c1', name: 'pay', result: "Tool 'pay' was interrupted; its outcome is unknown.", isError: true },
    ]);
    expectValidHistory(store.load('s')?.messages ?? []);
    expect(store.load('s')?.messages).toHaveLength(4);
  });

  it('runs an idempotent tool again, once', () => {
    const { ran, a, b, results } = crashThenResume(true);
    scheduler.run(({ cold, expectObservable }) => {
      expectObservable(a.agent.run('pay', { runId: 'r' }).pipe(withoutToolInput(), eventLabels()), '^ 50ms !').toBe('(abc)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:pay',
      });
      const resumed$ = cold('60ms (x|)').pipe(
        switchMap(() => b.agent.resume('r')),
        share(),
      );
      resumed$.subscribe((e) => e.type === 'tool-result' && results.push(e.result));
      expectObservable(resumed$.pipe(withoutToolInput(), eventLabels())).toBe('60ms a 99ms (bcdefg|)', {
        a: 'run-start',
        b: 'tool-result:pay',
        c: 'iteration-end',
        d: 'iteration-start',
        e: 'text-delta:after',
        f: 'iteration-end',
        g: 'run-end:completed',
      });
    });
    expect(ran).toEqual(['pay 1', 'pay 1']);
    expect(results).toEqual(['paid 1']);
    expect(b.model.calls).toBe(1); // the first iteration's answer came from the journal
  });

  it('shows an interrupted run in runs.get, free to resume at once', async () => {
    const { a, b } = crashThenResume(false);
    let info: Promise<RunInfo | undefined> | undefined;
    scheduler.run(({ cold }) => {
      const sub = a.agent.run('pay', { runId: 'r' }).subscribe();
      cold('50ms x').subscribe(() => sub.unsubscribe());
      cold('60ms x').subscribe(() => {
        info = b.agent.runs.get('r');
      });
    });
    expect(await info).toEqual(expect.objectContaining({ status: 'interrupted', seq: 6, lease: undefined }));
  });
});

describe('a process that stops while the model streams', () => {
  it('discards the partial answer with a model-retry on resume, so that a replay and the live streams tell the same text', () => {
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const make = (turns: ScriptedTurn[]) => createAgent({ model: scriptedModel(turns, { scheduler }), store, scheduler });
    const live: AgentEvent[] = [];
    const replayed: AgentEvent[] = [];
    scheduler.run(({ cold, expectObservable }) => {
      // The process "dies" at 25 ms, two deltas into the answer.
      const first$ = make([{ text: ['Hel', 'lo', ' wor', 'ld'], delay: 10 }]).run('hi', { runId: 'r' });
      expectObservable(
        first$.pipe(
          tap((e) => live.push(e)),
          eventLabels(),
        ),
        '^ 25ms !',
      ).toBe('(ab) 6ms c 9ms d', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:Hel',
        d: 'text-delta:lo',
      });
      const resumed$ = cold('30ms (x|)').pipe(switchMap(() => make([{ text: ['Hi', '!'] }]).resume('r')));
      expectObservable(
        resumed$.pipe(
          tap((e) => live.push(e)),
          eventLabels(),
        ),
      ).toBe('30ms (abcdef|)', {
        a: 'run-start',
        b: 'model-retry',
        c: 'text-delta:Hi',
        d: 'text-delta:!',
        e: 'iteration-end',
        f: 'run-end:completed',
      });
      cold('100ms x').subscribe(() =>
        make([])
          .events('r')
          .subscribe((e) => replayed.push(e)),
      );
    });
    const retry = live.find((e) => e.type === 'model-retry');
    expect(retry).toEqual({
      type: 'model-retry',
      runId: 'r',
      iteration: 0,
      attempt: 1,
      error: {
        name: 'RunInterruptedError',
        message: 'The run stopped while the model was answering; the partial answer is discarded and the model is asked again',
      },
      delayMs: 0,
      // The id of the answer the model is asked again for.
      messageId: expect.stringMatching(/^msg_/),
      seq: 6,
    });
    expect(replayed).toEqual(live);
    // A UI that drops the iteration's text on model-retry shows the answer the run ended with.
    const shown = (events: AgentEvent[]) => events.reduce((text, e) => (e.type === 'model-retry' ? '' : e.type === 'text-delta' ? text + e.text : text), '');
    expect(shown(replayed)).toBe('Hi!');
    expect(replayed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', text: 'Hi!' }));
  });

  it('sends no model-retry when the model had not streamed yet, and counts the retries journaled before', () => {
    const make = (store: AgentStore, turns: ScriptedTurn[]) => createAgent({ model: scriptedModel(turns, { scheduler }), store, scheduler });
    const quiet = memoryStore({ scheduler });
    const twice = memoryStore({ scheduler });
    const labels = (e: AgentEvent) => (e.type === 'model-retry' ? `retry ${e.attempt}` : e.type);
    let processes: AgentEvent[][] = [];
    scheduler.run(() => {
      processes = runProcesses(scheduler, [
        // The model had not streamed when the process stopped.
        { start: () => make(quiet, [{ text: 'late', delay: 50 }]).run('hi', { runId: 'r' }), stopAt: 10 },
        { start: () => make(quiet, ['now']).resume('r'), at: 20 },
        // It had, twice.
        { start: () => make(twice, [{ text: ['x', 'y'], delay: 5 }]).run('hi', { runId: 'r' }), stopAt: 7 },
        { start: () => make(twice, [{ text: ['a', 'b'], delay: 10 }]).resume('r'), at: 20, stopAt: 35 },
        { start: () => make(twice, ['c']).resume('r'), at: 40 },
      ]);
    });
    const seen = [processes[1], processes[3], processes[4]].map((events) => events.map(labels));
    expect(seen[0]).toEqual(['run-start', 'text-delta', 'iteration-end', 'run-end']);
    expect(seen[1]).toEqual(['run-start', 'retry 1', 'text-delta']);
    expect(seen[2]).toEqual(['run-start', 'retry 2', 'text-delta', 'iteration-end', 'run-end']);
  });
});

describe('retention', () => {
  it('drops a finished run at its end by default: runs.get answers undefined and resume says the run is unknown', async () => {
    const store = memoryStore({ scheduler });
    const { agent } = agentOn(store, ['hi'], payTool([]));
    const errors: unknown[] = [];
    let info: Promise<RunInfo | undefined> | undefined;
    scheduler.run(({ cold }) => {
      agent.run('hi', { runId: 'r' }).subscribe();
      cold('1ms x').subscribe(() => {
        info = agent.runs.get('r');
        agent.resume('r').subscribe((e) => e.type === 'error' && errors.push(e.error));
      });
    });
    expect(await info).toBeUndefined();
    expect(errors).toEqual([expect.objectContaining({ name: 'RunNotFoundError' })]);
  });

  it('rejects an answer or a cancel for a run the store dropped with RunNotFoundError', async () => {
    const { agent } = agentOn(memoryStore(), ['hi'], payTool([]));
    await new Promise<void>((resolve) => agent.run('hi', { runId: 'r' }).subscribe({ complete: resolve }));
    await expect(agent.respond('r', { type: 'permission-response', requestId: 'q', approved: true })).rejects.toMatchObject({ name: 'RunNotFoundError' });
    await expect(agent.cancel('r')).rejects.toMatchObject({ name: 'RunNotFoundError' });
  });

  it('keeps a finished run for retainMs: finished (a resume is refused with RunFinishedError), then unknown', async () => {
    const store = memoryStore({ scheduler, retainMs: 5000 });
    const { agent } = agentOn(store, ['hi'], payTool([]));
    const infos: Array<Promise<RunInfo | undefined>> = [];
    const errors: unknown[] = [];
    scheduler.run(({ cold }) => {
      agent.run('hi', { runId: 'r' }).subscribe();
      cold('4999ms x').subscribe(() => {
        infos.push(agent.runs.get('r'));
        agent.resume('r').subscribe((e) => e.type === 'error' && errors.push(e.error));
      });
      cold('5000ms x').subscribe(() => infos.push(agent.runs.get('r')));
    });
    const [kept, dropped] = await Promise.all(infos);
    expect(kept).toEqual(expect.objectContaining({ status: 'finished', reason: 'completed', seq: 5 }));
    expect(dropped).toBeUndefined();
    expect(errors).toEqual([expect.objectContaining({ name: 'RunFinishedError', message: "Run 'r' has finished (reason 'completed'); it cannot be resumed" })]);
  });
});

describe('events() of a finished run', () => {
  it('completes for a reader that has its run-end already (after its seq), as for one that reads up to it', () => {
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const { agent } = agentOn(store, ['hi'], payTool([]));
    scheduler.run(({ cold, expectObservable }) => {
      agent.run('hi', { runId: 'r' }).subscribe();
      // At 1 ms the run has ended (seq 5: its run-end); the journal is kept for a minute.
      expectObservable(cold('1ms (x|)').pipe(switchMap(() => agent.events('r', { after: 5 }).pipe(map((e) => e.type))))).toBe('1ms |');
      expectObservable(cold('1ms (x|)').pipe(switchMap(() => agent.events('r', { after: 4 }).pipe(map((e) => e.type))))).toBe('1ms (a|)', { a: 'run-end' });
    });
  });
});

describe('bad input', () => {
  it('reports an unknown run id clearly on every method', async () => {
    const { agent } = agentOn(memoryStore({ scheduler }), [], payTool([]));
    const events: AgentEvent[] = [];
    agent.resume('nope').subscribe((e) => events.push(e));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(events[1]).toEqual(expect.objectContaining({ error: { name: 'RunNotFoundError', message: expect.stringContaining("No run 'nope'") } }));
    await expect(agent.respond('nope', approve)).rejects.toThrow("No run 'nope'");
    await expect(agent.cancel('nope')).rejects.toThrow("No run 'nope'");
    expect(await agent.runs.get('nope')).toBeUndefined();
    await expect(new Promise((resolve, reject) => agent.events('nope').subscribe({ complete: () => resolve(undefined), error: reject }))).rejects.toThrow(
      "No run 'nope'",
    );
  });

  it('refuses a journal written by a newer format version', async () => {
    const store = memoryStore({ scheduler });
    store.append('r', 0, [
      { version: 1, kind: 'start', runId: 'r', agent: 'agent', input: [], onRequest: 'wait' },
      { version: 3, kind: 'event', event: { type: 'run-start', runId: 'r', seq: 1 } } as never,
    ]);
    const { agent } = agentOn(store, [], payTool([]));
    const events: AgentEvent[] = [];
    agent.resume('r').subscribe((e) => events.push(e));
    expect(events[1]).toEqual(
      expect.objectContaining({
        error: { name: 'JournalFormatError', message: expect.stringContaining('written by journal format version 3; this version of rx-agent reads up to 2') },
      }),
    );
    await expect(agent.runs.get('r')).rejects.toThrow("Run 'r', journal entry 2: written by journal format version 3");
  });

  it("refuses a resume when the store's received() answers something else than { answers, cancelled }", () => {
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const a = agentOn(store, [payCall], payTool([]));
    a.agent.run('pay', { runId: 'r' }).subscribe();
    const odd: AgentStore = Object.assign(Object.create(store) as AgentStore, { received: () => ({ answers: 'none' }) });
    const events: AgentEvent[] = [];
    createAgent({ model: scriptedModel([]), tools: [payTool([])], store: odd, scheduler })
      .resume('r')
      .subscribe((e) => events.push(e));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(events[1]).toMatchObject({
      error: { name: 'TypeError', message: expect.stringContaining("store.received('r') must answer { answers, cancelled }") },
    });
    expect(store.getLease('r')).toBeUndefined(); // let go
  });

  it('refuses a run id that exists already, without touching its journal', async () => {
    const store = memoryStore({ scheduler, retainMs: 1000 });
    const { agent } = agentOn(store, ['one', 'two'], payTool([]));
    const events: AgentEvent[] = [];
    agent.run('hi', { runId: 'r' }).subscribe();
    const before = store.read('r');
    agent.run('again', { runId: 'r' }).subscribe((e) => events.push(e));
    expect(events.map((e) => [e.type, e.seq])).toEqual([
      ['run-start', undefined],
      ['error', undefined],
      ['run-end', undefined],
    ]);
    expect(events[1]).toEqual(expect.objectContaining({ error: expect.objectContaining({ message: "run: a run with id 'r' exists in the store already" }) }));
    expect(store.read('r')).toEqual(before);
  });

  it('says clearly that the methods by id need a store', async () => {
    const agent = createAgent({ model: scriptedModel([]) });
    const events: AgentEvent[] = [];
    agent.resume('r').subscribe((e) => events.push(e));
    expect(events[1]).toEqual(
      expect.objectContaining({
        error: expect.objectContaining({ name: 'StoreRequiredError', message: expect.stringContaining('agent.resume() needs a store') }),
      }),
    );
    await expect(agent.respond('r', approve)).rejects.toThrow('agent.respond() needs a store');
    await expect(agent.cancel('r')).rejects.toThrow('agent.cancel() needs a store');
    await expect(agent.runs.get('r')).rejects.toThrow('agent.runs.get() needs a store');
    await expect(new Promise((resolve, reject) => agent.events('r').subscribe({ complete: () => resolve(undefined), error: reject }))).rejects.toThrow(
      'agent.events() needs a store',
    );
    const run: AgentEvent[] = [];
    agent.run('hi', { sessionId: 's' }).subscribe((e) => run.push(e));
    expect(run[1]).toEqual(expect.objectContaining({ error: expect.objectContaining({ message: expect.stringContaining("'sessionId' needs a store") }) }));
  });

  it('fails a run clearly when the store fails mid-write, keeping what was written and no part of the failed append', async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    let appends = 0;
    const store: AgentStore = Object.assign(Object.create(inner) as AgentStore, {
      append(runId: string, expected: number, records: Parameters<AgentStore['append']>[2]) {
        if (++appends === 4) throw new Error('connection reset');
        return inner.append(runId, expected, records);
      },
    });
    const ran: string[] = [];
    const { agent } = agentOn(store, [payCall, 'never'], payTool(ran), 'wait', false);
    const events: AgentEvent[] = [];
    agent.run('pay', { runId: 'r', sessionId: 's' }).subscribe((e) => events.push(e));
    // Appends: the start record; the turn; the model's answer and the tool's start (then the tool
    // runs); the fourth, with the tool's outcome and the checkpoint, fails.
    expect(events.map((e) => e.type).slice(-2)).toEqual(['error', 'run-end']);
    expect(events.at(-2)).toEqual(expect.objectContaining({ error: { name: 'Error', message: 'connection reset' }, source: 'run' }));
    expect(events.at(-1)).toEqual(expect.objectContaining({ reason: 'error' }));
    const journal = inner.read('r') ?? [];
    expect(journal.map((e) => e.position)).toEqual(journal.map((_, i) => i + 1));
    expect(journal.some((e) => e.record.kind === 'end')).toBe(false);
    // Nothing lost: the run is interrupted, and a resume on a healthy store finishes it, once.
    expect(await agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'interrupted' }));
    const healthy = agentOn(inner, ['after'], payTool(ran), 'wait', false);
    const resumed: AgentEvent[] = [];
    healthy.agent.resume('r').subscribe((e) => resumed.push(e));
    expect(resumed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed' }));
    expect(resumed.find((e) => e.type === 'tool-result')).toEqual(expect.objectContaining({ result: "Tool 'pay' was interrupted; its outcome is unknown." }));
    expect(ran).toEqual(['pay 1']);
    const history = inner.load('s')?.messages ?? [];
    expect(history.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expectValidHistory(history);
  });
});

describe('a session store that fails while a journaled run takes its session', () => {
  const outage = () => new Error('session store unreachable');
  /** `inner` with some of its methods replaced while `down.now` is set. */
  function failingWhile(down: { now: boolean }, inner: AgentStore, methods: Partial<AgentStore>): AgentStore {
    const store = Object.create(inner) as AgentStore;
    for (const [name, method] of Object.entries(methods) as Array<[keyof AgentStore, (...args: unknown[]) => unknown]>) {
      const healthy = (inner[name] as (...args: unknown[]) => unknown).bind(inner);
      Object.defineProperty(store, name, { value: (...args: unknown[]) => (down.now ? method(...args) : healthy(...args)) });
    }
    return store;
  }
  const failures: Array<[string, Partial<AgentStore>]> = [
    [
      'acquireSession throws',
      {
        acquireSession: () => {
          throw outage();
        },
      },
    ],
    ['acquireSession rejects', { acquireSession: () => Promise.reject(outage()) }],
    ['sessionReleases errors', { sessionReleases: () => throwError(outage) }],
    [
      'load throws',
      {
        load: () => {
          throw outage();
        },
      },
    ],
    ['load rejects', { load: () => Promise.reject(outage()) }],
  ];

  it.each(failures)('%s: an error event and run-end error, the run left interrupted; a resume once the store answers runs the turn', async (_, methods) => {
    const inner = memoryStore({ scheduler });
    const down = { now: true };
    const store = failingWhile(down, inner, methods);
    const { agent } = agentOn(store, [], payTool([]));
    const events = await lastValueFrom(agent.run('hi', { runId: 'r', sessionId: 's' }).pipe(toArray()));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(events[1]).toEqual(expect.objectContaining({ source: 'run', error: { name: 'Error', message: 'session store unreachable' } }));
    expect(events[2]).toEqual(expect.objectContaining({ reason: 'error' }));
    expect(inner.read('r')?.some((entry) => entry.record.kind === 'end')).toBe(false);
    expect(await agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'interrupted', sessionId: 's' }));
    // A resume while the store is still down is left interrupted the same way.
    const again = await lastValueFrom(agentOn(store, [], payTool([])).agent.resume('r').pipe(toArray()));
    expect(again.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(await agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'interrupted' }));
    expect(inner.getLease('r')).toBeUndefined();
    expect(inner.load('s')).toBeUndefined();
    // Once it answers, a resume runs the turn from its start: one model call, the turn appended once.
    down.now = false;
    const healthy = agentOn(store, ['Hello'], payTool([]));
    const resumed = await lastValueFrom(healthy.agent.resume('r').pipe(toArray()));
    expect(resumed[0]).toEqual(expect.objectContaining({ type: 'run-start', resumed: true }));
    expect(resumed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed', text: 'Hello' }));
    expect(healthy.model.calls).toBe(1);
    expect(inner.load('s')).toEqual(expect.objectContaining({ revision: 1, lastRunId: 'r' }));
    expect(inner.load('s')?.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
  });

  it('revision() failing for a Session object that ran before: left interrupted the same way', async () => {
    const inner = memoryStore({ scheduler });
    const down = { now: false };
    const revision = () => {
      throw outage();
    };
    const store = failingWhile(down, inner, { revision });
    const session = createSession({ id: 's', store });
    const agent = agentOn(store, ['one', 'two', 'three'], payTool([])).agent;
    await lastValueFrom(agent.run('first', { session, runId: 'r1' }).pipe(toArray()));
    down.now = true;
    const events = await lastValueFrom(agent.run('second', { session, runId: 'r2' }).pipe(toArray()));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(await agent.runs.get('r2')).toEqual(expect.objectContaining({ status: 'interrupted' }));
    down.now = false;
    expect((await lastValueFrom(agent.resume('r2').pipe(toArray()))).at(-1)).toEqual(expect.objectContaining({ reason: 'completed', text: 'two' }));
    expect(inner.load('s')?.messages.map((m) => (m.content[0] as { text: string }).text)).toEqual(['first', 'one', 'second', 'two']);
  });

  it('renewSession failing while the run holds its session changes nothing: the run goes on and appends its turn', () => {
    const inner = memoryStore({ scheduler });
    let renewals = 0;
    const store = Object.assign(Object.create(inner) as AgentStore, {
      renewSession: () => {
        renewals++;
        throw outage();
      },
    });
    const events: AgentEvent[] = [];
    scheduler.run(() => {
      agentOn(store, [{ text: 'slow', delay: 25_000 }], payTool([]))
        .agent.run('hi', { runId: 'r', sessionId: 's' })
        .subscribe((e) => events.push(e));
    });
    expect(renewals).toBeGreaterThan(0);
    expect(events.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed', text: 'slow' }));
    expect(inner.load('s')).toEqual(expect.objectContaining({ revision: 1, lastRunId: 'r' }));
  });

  it('what is wrong with the session rather than the store stays a finished error: a stored session that does not parse, a session busy past sessionWaitMs', async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const corrupt = Object.assign(Object.create(inner) as AgentStore, {
      load: (id: string) => ({ version: 1, id, messages: [{ role: 'robot' }], state: {}, revision: 1 }),
    });
    const broken = await lastValueFrom(agentOn(corrupt, [], payTool([])).agent.run('hi', { runId: 'r1', sessionId: 's' }).pipe(toArray()));
    expect(broken.at(-2)).toEqual(
      expect.objectContaining({ type: 'error', error: expect.objectContaining({ message: expect.stringContaining("Invalid session 's' in the store") }) }),
    );
    inner.acquireSession('busy', 'run-elsewhere', 60_000);
    const agent = agentOn(inner, [], payTool([])).agent;
    const busy = await lastValueFrom(agent.run('hi', { runId: 'r2', sessionId: 'busy', sessionWaitMs: 0 }).pipe(toArray()));
    expect(busy.at(-2)).toEqual(expect.objectContaining({ type: 'error', error: expect.objectContaining({ name: 'SessionBusyError' }) }));
    for (const runId of ['r1', 'r2']) expect(await agent.runs.get(runId)).toEqual(expect.objectContaining({ status: 'finished', reason: 'error' }));
  });

  it("appendTurn failing at the turn's save (an outage): left interrupted, and a resume saves the turn once, without calling the model again", async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const down = { now: true };
    const store = failingWhile(down, inner, { appendTurn: () => Promise.reject(outage()) });
    const first = agentOn(store, ['Hello'], payTool([]));
    const events = await lastValueFrom(first.agent.run('hi', { runId: 'r', sessionId: 's' }).pipe(toArray()));
    expect(events.slice(-2)).toEqual([
      expect.objectContaining({ type: 'error', source: 'run', error: { name: 'Error', message: 'session store unreachable' } }),
      expect.objectContaining({ type: 'run-end', reason: 'error' }),
    ]);
    expect(await first.agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'interrupted', sessionId: 's' }));
    expect(inner.load('s')).toBeUndefined();
    down.now = false;
    const healthy = agentOn(store, ['never'], payTool([]));
    const resumed = await lastValueFrom(healthy.agent.resume('r').pipe(toArray()));
    expect(resumed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed', text: 'Hello' }));
    expect(healthy.model.calls).toBe(0); // the journal holds the answer
    expect(inner.load('s')?.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(await healthy.agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'finished', reason: 'completed' }));
  });

  it('a save that landed though its answer was lost: the resume finds the turn saved and does not append it twice', async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const store = Object.assign(Object.create(inner) as AgentStore, {
      appendTurn: (...args: Parameters<AgentStore['appendTurn']>) => {
        inner.appendTurn(...args);
        return Promise.reject(outage());
      },
    });
    const events = await lastValueFrom(agentOn(store, ['Hello'], payTool([])).agent.run('hi', { runId: 'r', sessionId: 's' }).pipe(toArray()));
    expect(events.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'error' }));
    expect(inner.load('s')?.revision).toBe(1);
    const resumed = await lastValueFrom(agentOn(inner, [], payTool([])).agent.resume('r').pipe(toArray()));
    expect(resumed.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed', text: 'Hello' }));
    expect(inner.load('s')).toEqual(expect.objectContaining({ revision: 1 }));
    expect(inner.load('s')?.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
  });

  it('a save that conflicts ends the run for good; a store failing with a TypeError (fetch failed) is an outage', async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const conflict = failingWhile({ now: true }, inner, { appendTurn: () => Promise.reject(new SessionConflictError('s-c', 0, 1)) });
    const network = failingWhile({ now: true }, inner, { appendTurn: () => Promise.reject(new TypeError('fetch failed')) });
    const cases: Array<[string, AgentStore, string, string]> = [
      ['c', conflict, 'SessionConflictError', 'finished'],
      ['n', network, 'TypeError', 'interrupted'],
    ];
    for (const [id, store, name, status] of cases) {
      const { agent } = agentOn(store, ['Hello'], payTool([]));
      const events = await lastValueFrom(agent.run('hi', { runId: `r-${id}`, sessionId: `s-${id}` }).pipe(toArray()));
      expect(events.slice(-2)).toEqual([
        expect.objectContaining({ type: 'error', error: expect.objectContaining({ name }) }),
        expect.objectContaining({ type: 'run-end', reason: 'error' }),
      ]);
      expect(await agent.runs.get(`r-${id}`)).toEqual(expect.objectContaining({ status }));
    }
  });

  it('a cancelled run whose save meets an outage is not left to a resume (it would go on with what was stopped)', async () => {
    const inner = memoryStore({ retainMs: 60_000 });
    const store = failingWhile({ now: true }, inner, { appendTurn: () => Promise.reject(outage()) });
    const controller = new AbortController();
    const agent = createAgent({ model: scriptedModel([{ text: 'slow', delay: 60_000 }]), store });
    const events = lastValueFrom(agent.run('hi', { runId: 'r', sessionId: 's', signal: controller.signal }).pipe(toArray()));
    setTimeout(() => controller.abort(), 20);
    expect((await events).slice(-2)).toEqual([
      expect.objectContaining({ type: 'error', error: expect.objectContaining({ message: 'session store unreachable' }) }),
      expect.objectContaining({ type: 'run-end', reason: 'error' }),
    ]);
    expect(await agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'finished' }));
  });

  it("a session of another store than the agent's: its outage ends the run for good (a resume reads the agent's store)", async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const elsewhere = new InMemorySessionStore();
    const down = Object.assign(Object.create(elsewhere) as InMemorySessionStore, { appendTurn: () => Promise.reject(outage()) });
    const { agent } = agentOn(inner, ['Hello'], payTool([]));
    const events = await lastValueFrom(agent.run('hi', { runId: 'r', session: createSession({ id: 's', store: down }) }).pipe(toArray()));
    expect(events.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'error' }));
    expect(await agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'finished' }));
  });

  it('a Session object whose save was left to the resume forgets the turn: its next run reads the store, and the turn is saved once, in order', async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const down = { now: true };
    const store = failingWhile(down, inner, { appendTurn: () => Promise.reject(outage()) });
    const session = createSession({ id: 's', store });
    const first = await lastValueFrom(agentOn(store, ['one'], payTool([])).agent.run('first', { runId: 'r1', session }).pipe(toArray()));
    expect(first.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'error' }));
    expect(session.messages).toEqual([]);
    down.now = false;
    expect((await lastValueFrom(agentOn(store, [], payTool([])).agent.resume('r1').pipe(toArray()))).at(-1)).toEqual(
      expect.objectContaining({ reason: 'completed', text: 'one' }),
    );
    await lastValueFrom(agentOn(store, ['two'], payTool([])).agent.run('second', { runId: 'r2', session }).pipe(toArray()));
    expect(inner.load('s')?.messages.map((m) => (m.content[0] as { text: string }).text)).toEqual(['first', 'one', 'second', 'two']);
  });

  it('a Session object made from a snapshot keeps its whole copy when its save fails: nothing handed over, nothing lost', async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const down = { now: true };
    const store = failingWhile(down, inner, { appendTurn: () => Promise.reject(outage()) });
    const snapshot = {
      version: 1,
      id: 's',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'old-q' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'old-a' }] },
      ],
      state: {},
    };
    const session = createSession({ store, snapshot });
    const { agent } = agentOn(store, ['a1'], payTool([]));
    await lastValueFrom(agent.run('q1', { runId: 'r1', session }).pipe(toArray()));
    expect(await agent.runs.get('r1')).toEqual(expect.objectContaining({ status: 'finished', reason: 'error' }));
    down.now = false;
    await lastValueFrom(agentOn(store, ['a2'], payTool([])).agent.run('q2', { runId: 'r2', session }).pipe(toArray()));
    expect(inner.load('s')?.messages.map((m) => (m.content[0] as { text: string }).text)).toEqual(['old-q', 'old-a', 'q1', 'a1', 'q2', 'a2']);
  });

  it('a store whose load throws a SyntaxError (it parses JSON itself) ends the run for good', async () => {
    const inner = memoryStore({ scheduler, retainMs: 60_000 });
    const store = failingWhile({ now: true }, inner, {
      load: () => {
        JSON.parse('{"broken');
      },
    } as Partial<AgentStore>);
    const { agent } = agentOn(store, ['never'], payTool([]));
    const events = await lastValueFrom(agent.run('hi', { runId: 'r', sessionId: 's' }).pipe(toArray()));
    expect(events.at(-2)).toEqual(expect.objectContaining({ type: 'error', error: expect.objectContaining({ name: 'SyntaxError' }) }));
    expect(await agent.runs.get('r')).toEqual(expect.objectContaining({ status: 'finished', reason: 'error' }));
  });

  it('a run without a journal (no store on the agent) ends with the error as before', async () => {
    const sessions = new InMemorySessionStore();
    const store = Object.assign(Object.create(sessions) as InMemorySessionStore, {
      acquireSession: () => {
        throw outage();
      },
    });
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['never']) })
        .run('hi', { session: createSession({ id: 's', store }) })
        .pipe(toArray()),
    );
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(events.at(-1)).toEqual(expect.objectContaining({ reason: 'error' }));
  });
});

describe('resume options', () => {
  it('refuses an option it does not know (a resumed run keeps its id and session), in its events', async () => {
    const { agent } = agentOn(memoryStore({ scheduler }), [], payTool([]));
    const events = await lastValueFrom(agent.resume('r', { sessionId: 's' } as never).pipe(toArray()));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(events[1]).toEqual(
      expect.objectContaining({ error: { name: 'TypeError', message: "resume: unknown option(s) 'sessionId' (known: responses, signal, onRequest)" } }),
    );
  });

  it('refuses options that are not an object, in the words of every factory', async () => {
    const { agent } = agentOn(memoryStore({ scheduler }), [], payTool([]));
    for (const [options, shown] of [
      [null, 'null'],
      [['suspend'], '["suspend"]'],
    ] as const) {
      const events = await lastValueFrom(agent.resume('r', options as never).pipe(toArray()));
      expect(events[1]).toEqual(expect.objectContaining({ error: { name: 'TypeError', message: `resume: options must be an object, got ${shown}` } }));
    }
  });
});

describe('the journal as a record of the run', () => {
  it('replays to another agent exactly the events the live run streamed, seq included', async () => {
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const a = agentOn(store, [payCall, { text: ['pa', 'id'] }], payTool([]), 'wait');
    const b = agentOn(store, [], payTool([]));
    const live: AgentEvent[] = [];
    const replayed: AgentEvent[] = [];
    scheduler.run(({ cold }) => {
      a.agent.run('pay', { runId: 'r' }).subscribe((e) => live.push(e));
      cold('10ms x').subscribe(() => void a.agent.respond('r', approve));
      cold('20ms x').subscribe(() => b.agent.events('r').subscribe((e) => replayed.push(e)));
    });
    expect(live.map((e) => e.seq)).toEqual(live.map((_, i) => i + 1));
    expect(replayed).toEqual(live);
  });

  it('restores run- and session-scoped middleware state from the journal on resume', () => {
    const Count = defineState({ key: 'test.iterations', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'run', version: 1 });
    const Visits = defineState({ key: 'test.visits', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session', version: 1 });
    const seen: number[] = [];
    const counter: AgentMiddleware = {
      name: 'counter',
      beforeIteration: tap((ctx) => seen.push(ctx.state(Count).n)),
      afterIteration: map((ctx) => ctx.updateState(Count, (c) => ({ n: c.n + 1 })).updateState(Visits, (v) => ({ n: v.n + 1 }))),
    };
    const look = defineTool({ name: 'look', description: 'Looks', parameters: z.object({}), execute: () => 'seen' });
    const store = memoryStore({ scheduler });
    const make = (turns: ScriptedTurn[]) =>
      createAgent({
        model: scriptedModel(turns, { scheduler }),
        tools: [look, payTool([])],
        middleware: [counter, permissions({ timeout: 1000 })],
        store,
        scheduler,
        onRequest: 'suspend',
      });
    const a = make([{ toolCalls: [{ name: 'look', args: {}, callId: 'c0' }] }, payCall]);
    const b = make(['done']);
    scheduler.run(({ cold }) => {
      a.run('go', { runId: 'r', sessionId: 's' }).subscribe();
      cold('10ms x').subscribe(() => void b.respond('r', { ...approve, requestId: 'r.1.c1.permission-request' }));
      cold('20ms x').subscribe(() => b.resume('r').subscribe());
    });
    // a: iterations 0 and 1 (suspended in 1); b: iteration 1 again from its checkpoint, then 2.
    expect(seen).toEqual([0, 1, 1, 2]);
    expect(store.load('s')?.state['test.visits']).toEqual({ version: 1, value: { n: 3 } });
  });

  it('restores the state afterFunction hooks wrote for calls whose outcome is journaled, as if the run had not stopped', () => {
    const Calls = defineState({ key: 'test.calls', schema: z.array(z.string()), initial: () => [], scope: 'run', version: 1 });
    const Seen = defineState({
      key: 'test.seen',
      schema: z.object({ before: z.number(), after: z.number() }),
      initial: () => ({ before: 0, after: 0 }),
      scope: 'session',
      version: 1,
    });
    const finalCalls: string[][] = [];
    const tracker: AgentMiddleware = {
      name: 'tracker',
      beforeFunction: map((ctx) => ctx.updateState(Seen, (s) => ({ ...s, before: s.before + 1 }))),
      afterFunction: map((ctx) =>
        ctx.updateState(Calls, (c) => [...c, `${ctx.callId}:${String(ctx.result)}`]).updateState(Seen, (s) => ({ ...s, after: s.after + 1 })),
      ),
      afterMessageTurn: tap((ctx) => finalCalls.push(ctx.state(Calls))),
    };
    const quick = defineTool({ name: 'quick', description: 'Quick', parameters: z.object({}), execute: () => timer(10, scheduler).pipe(map(() => 'q')) });
    const slow = defineTool({
      name: 'slow',
      description: 'Slow',
      parameters: z.object({}),
      idempotent: true,
      execute: () => timer(100, scheduler).pipe(map(() => 's')),
    });
    const batch: ScriptedTurn = {
      toolCalls: [
        { name: 'quick', args: {}, callId: 'c1' },
        { name: 'slow', args: {}, callId: 'c2' },
      ],
    };
    const make = (store: AgentStore, turns: ScriptedTurn[]) =>
      createAgent({ model: scriptedModel(turns, { scheduler }), tools: [quick, slow], middleware: [tracker], store, scheduler });
    // The same run, once without a stop and once stopped at 50 ms (c1 done, c2 running) and resumed.
    const whole = memoryStore({ scheduler });
    const stopped = memoryStore({ scheduler });
    scheduler.run(() =>
      runProcesses(scheduler, [
        { start: () => make(whole, [batch, 'done']).run('go', { runId: 'r', sessionId: 's' }) },
        { start: () => make(stopped, [batch]).run('go', { runId: 'r', sessionId: 's' }), stopAt: 50 },
        { start: () => make(stopped, ['done']).resume('r'), at: 60 },
      ]),
    );
    expect(finalCalls).toEqual([
      ['c1:q', 'c2:s'],
      ['c1:q', 'c2:s'],
    ]);
    expect(stopped.load('s')?.state).toEqual(whole.load('s')?.state);
    expect(stopped.load('s')?.state['test.seen']).toEqual({ version: 1, value: { before: 2, after: 2 } });
  });

  it('keeps the arguments of a call that were not JSON as the model wrote them, for a resume and a replay', () => {
    const quick = defineTool({ name: 'quick', description: 'Quick', parameters: z.object({ n: z.number() }), execute: () => 'q' });
    const slow = defineTool({
      name: 'slow',
      description: 'Slow',
      parameters: z.object({}),
      idempotent: true,
      execute: () => timer(100, scheduler).pipe(map(() => 's')),
    });
    const batch: ScriptedTurn = {
      toolCalls: [
        { name: 'quick', args: '{"n": 1', callId: 'c1' },
        { name: 'slow', args: {}, callId: 'c2' },
      ],
    };
    const make = (store: AgentStore, turns: ScriptedTurn[]) => {
      const model = scriptedModel(turns, { scheduler });
      return { model, agent: createAgent({ model, tools: [quick, slow], store, scheduler }) };
    };
    const whole = make(memoryStore({ scheduler }), [batch, 'done']);
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const first = make(store, [batch]);
    const second = make(store, ['done']);
    let processes: AgentEvent[][] = [];
    scheduler.run(() => {
      processes = runProcesses(scheduler, [
        { start: () => whole.agent.run('go', { runId: 'r' }) },
        { start: () => first.agent.run('go', { runId: 'r' }), stopAt: 50 },
        { start: () => second.agent.resume('r'), at: 60 },
        { start: () => second.agent.events('r'), at: 500 },
      ]);
    });
    const [, before, after, replayed] = processes;
    const live = [...before, ...after];
    // The resumed run asks the model exactly what the run that never stopped asked (each run makes
    // its own message ids), and keeps the ids the stopped process gave.
    const withoutIds = (messages: readonly Message[]) => messages.map(({ id: _id, ...rest }) => rest);
    expect(withoutIds(second.model.requests[0].messages)).toStrictEqual(withoutIds(whole.model.requests[1].messages));
    expect(second.model.requests[0].messages[0].id).toBe(first.model.requests[0].messages[0].id);
    const call = second.model.requests[0].messages[1].content[0] as { args: unknown };
    expect(call.args).toEqual(expect.any(UnparsedArguments));
    expect((call.args as UnparsedArguments).text).toBe('{"n": 1');
    // A replay carries the call as the live stream did.
    expect(replayed.find((e) => e.type === 'tool-call')).toStrictEqual(live.find((e) => e.type === 'tool-call'));
    expect(replayed.filter((e) => e.type === 'tool-result')).toEqual(live.filter((e) => e.type === 'tool-result'));
  });

  it('journals a run started with agent.start(), whose handle answers it', () => {
    const store = memoryStore({ scheduler });
    const { agent } = agentOn(store, [payCall, 'ok'], payTool([]), 'wait');
    const seqs: Array<number | undefined> = [];
    scheduler.run(({ cold }) => {
      const handle = agent.start('pay', { runId: 'r' });
      handle.events$.subscribe((e) => seqs.push(e.seq));
      cold('5ms x').subscribe(() => expect(handle.respond(approve)).toBe(true));
    });
    expect(seqs).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
  });
});

describe('without a store', () => {
  it('journals nothing: events carry no seq', () => {
    const agent = createAgent({ model: scriptedModel(['hi']) });
    const events: AgentEvent[] = [];
    agent.run('hi').subscribe((e) => events.push(e));
    expect(events.every((e) => !('seq' in e))).toBe(true);
  });
});

describe('a resume that raced another process', () => {
  /**
   * A run interrupted in a tool, and a resumer whose store has another process append `record`
   * while the resume waits for the lease. What the resume was refused with.
   */
  function raceWith(record: JournalRecord) {
    const store = memoryStore({ scheduler, retainMs: 60_000 });
    const a = agentOn(store, [payCall], payTool([]));
    const errors: unknown[] = [];
    a.agent.run('pay', { runId: 'r' }).subscribe();
    const racing: AgentStore = Object.assign(Object.create(store) as AgentStore, {
      acquireLease: (runId: string, owner: string, ttl: number) => {
        store.append(runId, store.read(runId)?.length ?? 0, [record]);
        return store.acquireLease(runId, owner, ttl);
      },
    });
    const racer = createAgent({ model: scriptedModel(['done']), tools: [payTool([])], store: racing, scheduler });
    racer.resume('r').subscribe((e) => e.type === 'error' && errors.push(e.error));
    expect(store.getLease('r')).toBeUndefined(); // let go
    return errors;
  }

  it('is refused with JournalConflictError when the journal went on between its read and its lease', () => {
    const errors = raceWith({ version: 1, kind: 'tool-start', iteration: 0, callId: 'cX', name: 'pay' });
    expect(errors).toEqual([{ name: 'JournalConflictError', message: new JournalConflictError('r', 13, 14).message }]);
  });

  it('is refused with RunFinishedError when the other process finished the run in between', () => {
    const errors = raceWith({ version: 1, kind: 'end', reason: 'completed' });
    expect(errors).toEqual([{ name: 'RunFinishedError', message: "Run 'r' has finished (reason 'completed'); it cannot be resumed" }]);
  });
});
