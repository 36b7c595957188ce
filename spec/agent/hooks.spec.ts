import { EMPTY, Observable, catchError, map, tap, of, Subject, type MonoTypeOperatorFunction } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineState,
  defineTool,
  textMessage,
  textOf,
  type AgentMiddleware,
  type AgentResponse,
  type ModelUpdate,
  type ToolOutcome,
} from '../../src/index';
import { collectEvents, eventLabels, eventsOfType, scriptedModel } from '../../src/testing/index';
import { withoutToolInput } from '../support/withoutToolInput';
import { signalTool } from '../support/signalTool';
import { textLike } from '../support/textLike';

const echo = defineTool({ name: 'echo', description: 'echo', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });

function newScheduler() {
  return new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
}

/** A middleware that records every hook it sees, in order. */
function recorder(name: string, log: string[]): AgentMiddleware {
  const mark = <T>(hook: string): MonoTypeOperatorFunction<T> => tap(() => log.push(`${name}.${hook}`));
  return {
    name,
    beforeMessageTurn: mark('beforeMessageTurn'),
    beforeIteration: mark('beforeIteration'),
    wrapModel: () => (source) => (log.push(`${name}.wrapModel`), source.pipe(mark('model'))),
    beforeToolExecution: mark('beforeToolExecution'),
    beforeFunction: mark('beforeFunction'),
    wrapFunction: () => (source) => (log.push(`${name}.wrapFunction`), source),
    afterFunction: mark('afterFunction'),
    afterIteration: mark('afterIteration'),
    afterMessageTurn: mark('afterMessageTurn'),
  };
}

describe('hook order', () => {
  it('before hooks in registration order, after hooks reversed, wrappers first-outermost', () => {
    const log: string[] = [];
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }, 'done']);
    const agent = createAgent({ model, tools: [echo], middleware: [recorder('A', log), recorder('B', log)] });
    agent.run('go').subscribe();
    const firstIteration = log.slice(0, log.indexOf('A.afterIteration', 0) + 1);
    expect(log[0]).toBe('A.beforeMessageTurn');
    expect(firstIteration).toEqual([
      'A.beforeMessageTurn',
      'B.beforeMessageTurn',
      'A.beforeIteration',
      'B.beforeIteration',
      // Wrappers are built inside out (B then A), so A is outermost and sees the updates last.
      'B.wrapModel',
      'A.wrapModel',
      ...['B.model', 'A.model'], // tool-call delta 1
      ...['B.model', 'A.model'], // tool-call delta 2
      ...['B.model', 'A.model'], // finish
      'A.beforeToolExecution',
      'B.beforeToolExecution',
      'A.beforeFunction',
      'B.beforeFunction',
      'B.wrapFunction',
      'A.wrapFunction',
      'B.afterFunction',
      'A.afterFunction',
      'B.afterIteration',
      'A.afterIteration',
    ]);
    expect(log.slice(-2)).toEqual(['B.afterMessageTurn', 'A.afterMessageTurn']);
  });

  it('is the same in virtual time, with a slow model (marbles)', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable }) => {
      const model = scriptedModel([{ text: ['Hel', 'lo'], delay: 10 }], { scheduler: testScheduler });
      const agent = createAgent({ model, scheduler: testScheduler });
      expectObservable(agent.run('hi').pipe(withoutToolInput(), eventLabels())).toBe('(ab) 6ms c 9ms d 9ms (ef|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:Hel',
        d: 'text-delta:lo',
        e: 'iteration-end',
        f: 'run-end:completed',
      });
    });
  });
});

describe('IterationContext.final in afterIteration: this iteration ends the turn', () => {
  const finals = (
    agentOptions: { maxIterations?: number; before?: AgentMiddleware['beforeIteration'] },
    turns: Parameters<typeof scriptedModel>[0],
    loop = false,
  ) => {
    const seen: boolean[] = [];
    const watcher: AgentMiddleware = { name: 'watcher', beforeIteration: agentOptions.before, afterIteration: tap((ctx) => seen.push(ctx.final)) };
    const events = collectEvents(
      createAgent({ model: scriptedModel(turns, { loop }), tools: [echo], maxIterations: agentOptions.maxIterations, middleware: [watcher] }).run('go'),
    );
    return { seen, end: events.at(-1) };
  };

  it('true for the answer without tool calls, false before it', () => {
    expect(finals({}, [{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }, 'done'])).toMatchObject({ seen: [false, true], end: { reason: 'completed' } });
  });

  it('true for an iteration terminated in beforeIteration', () => {
    expect(finals({ before: map((ctx) => ctx.terminate('Budget exhausted')) }, ['never'])).toMatchObject({ seen: [true], end: { reason: 'terminated' } });
  });

  it('true for the afterIteration hooks after one that terminated (after-hooks run last-registered first)', () => {
    const seen: boolean[] = [];
    const watcher: AgentMiddleware = { name: 'watcher', afterIteration: tap((ctx) => seen.push(ctx.final)) };
    const stopper: AgentMiddleware = { name: 'stopper', afterIteration: map((ctx) => ctx.terminate('enough')) };
    const events = collectEvents(
      createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }]), tools: [echo], middleware: [watcher, stopper] }).run('go'),
    );
    expect(seen).toEqual([true]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'terminated' });
  });

  it('true for the last iteration maxIterations allows (and the run still ends with reason max-iterations)', () => {
    expect(finals({ maxIterations: 2 }, [{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }], true)).toMatchObject({
      seen: [false, true],
      end: { reason: 'max-iterations' },
    });
  });
});

describe('a batch a hook narrows and then skips', () => {
  it('answers every call the model made with the skipped result (the history keeps the pairing)', () => {
    const narrowThenSkip: AgentMiddleware = {
      name: 'narrow',
      beforeToolExecution: map((ctx) => ctx.with({ toolCalls: ctx.toolCalls.slice(0, 1) }).skipTools()),
    };
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'echo', args: { text: 'a' }, callId: 'c1' },
          { name: 'echo', args: { text: 'b' }, callId: 'c2' },
        ],
      },
      'done',
    ]);
    collectEvents(createAgent({ model, tools: [echo], middleware: [narrowThenSkip] }).run('go'));
    const results = model.requests[1].messages.flatMap((m) => m.content).filter((p) => p.type === 'tool-result');
    expect(results.map((p) => (p as { callId: string }).callId)).toEqual(['c1', 'c2']);
  });
});

describe('control methods', () => {
  it('skipModelCall stands in for the model, and its tool calls run', async () => {
    const model = scriptedModel(['from the model']);
    const skipper: AgentMiddleware = {
      name: 'skipper',
      beforeIteration: map((ctx) =>
        ctx.iteration === 0
          ? ctx.skipModelCall({ role: 'assistant', content: [{ type: 'tool-call', callId: 'k1', name: 'echo', args: { text: 'cached' } }] })
          : ctx,
      ),
    };
    const result = await createAgent({ model, tools: [echo], middleware: [skipper] }).invoke('go');
    expect(model.calls).toBe(1);
    expect(result.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(result.text).toBe('from the model');
  });

  it('skipTools() gives each call the skipped result and the loop goes on', () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'echo', args: { text: 'a' } },
          { name: 'echo', args: { text: 'b' } },
        ],
      },
      'ok',
    ]);
    const skipper: AgentMiddleware = { name: 'skipper', beforeToolExecution: map((ctx) => ctx.skipTools()) };
    const session = createSession();
    const events = collectEvents(createAgent({ model, tools: [echo], middleware: [skipper] }).run('go', { session }));
    // Each skipped call is still answered, in the events and in the history the model reads next.
    expect(eventsOfType(events, 'tool-result').map((e) => [e.callId, e.result, e.isError])).toEqual([
      ['call_0_0', 'Tool execution was skipped.', true],
      ['call_0_1', 'Tool execution was skipped.', true],
    ]);
    expect(session.messages.find((m) => m.role === 'tool')?.content).toEqual([
      { type: 'tool-result', callId: 'call_0_0', name: 'echo', result: 'Tool execution was skipped.', isError: true },
      { type: 'tool-result', callId: 'call_0_1', name: 'echo', result: 'Tool execution was skipped.', isError: true },
    ]);
    expect(model.requests[1].messages.at(-1)?.role).toBe('tool');
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'ok' });
  });

  it('skipTools(response) ends the turn with that response', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }, 'never']);
    const skipper: AgentMiddleware = { name: 'skipper', beforeToolExecution: map((ctx) => ctx.skipTools(textMessage('assistant', 'I will not do that.'))) };
    const result = await createAgent({ model, tools: [echo], middleware: [skipper] }).invoke('go');
    expect(model.calls).toBe(1);
    expect(result).toMatchObject({ reason: 'completed', text: 'I will not do that.' });
  });

  it('block(result) replaces one function; the rest of the batch runs', async () => {
    const executed: string[] = [];
    const tracked = defineTool({
      name: 'echo',
      description: '',
      parameters: z.object({ text: z.string() }),
      execute: ({ text }) => (executed.push(text), text),
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'echo', args: { text: 'a' } },
          { name: 'echo', args: { text: 'b' } },
        ],
      },
      'ok',
    ]);
    const blocker: AgentMiddleware = {
      name: 'blocker',
      beforeFunction: map((ctx) => ((ctx.args as { text: string }).text === 'a' ? ctx.block('blocked a') : ctx)),
    };
    const result = await createAgent({ model, tools: [tracked], middleware: [blocker] }).invoke('go');
    expect(executed).toEqual(['b']);
    expect(result.messages[2].content.map((p) => (p.type === 'tool-result' ? p.result : undefined))).toEqual(['blocked a', 'b']);
  });

  it('block(result) with no options is not an error (isError: false); block(result, { isError: true }) is one', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'echo', args: { text: 'plain' } },
          { name: 'echo', args: { text: 'error' } },
        ],
      },
      'ok',
    ]);
    const seenAfter: Array<[unknown, boolean, boolean]> = [];
    const blocker: AgentMiddleware = {
      name: 'blocker',
      beforeFunction: map((ctx) => ((ctx.args as { text: string }).text === 'plain' ? ctx.block('from the cache') : ctx.block('refused', { isError: true }))),
      afterFunction: tap((ctx) => seenAfter.push([ctx.result, ctx.isError, ctx.blocked])),
    };
    const events = collectEvents(createAgent({ model, tools: [echo], middleware: [blocker] }).run('go'));
    expect(eventsOfType(events, 'tool-result').map((e) => [e.result, e.isError])).toEqual([
      ['from the cache', false],
      ['refused', true],
    ]);
    const toolMessage = (model.requests[1].messages.at(-1) as unknown as { content: Array<{ result: unknown; isError: unknown }> }).content;
    expect(toolMessage.map((p) => [p.result, p.isError])).toEqual([
      ['from the cache', false],
      ['refused', true],
    ]);
    expect(seenAfter).toEqual([
      ['from the cache', false, true],
      ['refused', true, true],
    ]);
  });

  it.each(['beforeMessageTurn', 'beforeIteration', 'beforeToolExecution', 'afterIteration', 'afterMessageTurn'] as const)(
    'terminate(reason) in %s ends the run with reason terminated',
    async (phase) => {
      const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }, 'ok']);
      const stopper: AgentMiddleware = { name: 'stopper', [phase]: map((ctx: { terminate(r: string): unknown }) => ctx.terminate('Stopped by policy.')) };
      const agent = createAgent({ model, tools: [echo], middleware: [stopper] });
      const events: Array<{ type: string }> = [];
      await new Promise<void>((resolve) => agent.run('go').subscribe({ next: (e) => events.push(e), complete: resolve }));
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'terminated', terminationReason: 'Stopped by policy.', text: 'Stopped by policy.' });
      const expectedCalls = { beforeMessageTurn: 0, beforeIteration: 0, beforeToolExecution: 1, afterIteration: 1, afterMessageTurn: 2 }[phase];
      expect(model.calls).toBe(expectedCalls);
      // Every tool call is answered: by its result, or (a stopped batch) by the skipped result.
      expect(events.filter((e) => e.type === 'tool-result')).toHaveLength(phase === 'beforeMessageTurn' || phase === 'beforeIteration' ? 0 : 1);
    },
  );

  it('with() rewrites instructions for one call; messages persist', async () => {
    const model = scriptedModel(['a', 'b']);
    const guide: AgentMiddleware = {
      name: 'guide',
      beforeIteration: map((ctx) => ctx.with({ instructions: `${ctx.instructions} (iteration ${ctx.iteration})` })),
    };
    const agent = createAgent({ model, instructions: 'Be brief.', middleware: [guide] });
    await agent.invoke('x');
    expect(model.requests[0].instructions).toBe('Be brief. (iteration 0)');
  });

  it('afterFunction may rewrite the result the model reads', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'secret' } }] }, 'ok']);
    const redact: AgentMiddleware = { name: 'redact', afterFunction: map((ctx) => ctx.with({ result: '[hidden]' })) };
    await createAgent({ model, tools: [echo], middleware: [redact] }).invoke('go');
    expect(model.requests[1].messages[2].content[0]).toMatchObject({ result: '[hidden]' });
  });

  /** A tool that throws a RangeError. */
  const failing = signalTool('fail', () => {
    throw new RangeError('out of range');
  }).tool;

  it('afterFunction sees what the tool threw (ctx.error); a result that is not an error has none', async () => {
    const seen: Array<[string, unknown, unknown]> = [];
    const observe: AgentMiddleware = { name: 'observe', afterFunction: tap((ctx) => seen.push([ctx.toolName, ctx.result, ctx.error])) };
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'fail', args: {} },
          { name: 'echo', args: { text: 'hi' } },
        ],
      },
      'ok',
    ]);
    await createAgent({ model, tools: [failing, echo], middleware: [observe] }).invoke('go');
    expect(seen).toEqual([
      ['fail', 'Error: out of range', expect.any(RangeError)],
      ['echo', 'hi', undefined],
    ]);
  });

  it('a result rewritten into a success has no error; one rewritten as an error keeps it', async () => {
    const seen: unknown[] = [];
    const observe: AgentMiddleware = { name: 'observe', afterFunction: tap((ctx) => seen.push(ctx.error)) };
    const soften: AgentMiddleware = {
      name: 'soften',
      afterFunction: map((ctx) => (ctx.iteration === 0 ? ctx.with({ result: 'n/a', isError: false }) : ctx.with({ result: 'still bad' }))),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'fail', args: {} }] }, { toolCalls: [{ name: 'fail', args: {} }] }, 'ok']);
    // after-hooks run last-registered first: soften, then observe.
    await createAgent({ model, tools: [failing], middleware: [observe, soften] }).invoke('go');
    expect(seen).toEqual([undefined, expect.any(RangeError)]);
  });

  it("every context names the agent (ctx.agentName; 'agent' by default)", async () => {
    const names: string[] = [];
    const note: AgentMiddleware = {
      name: 'note',
      beforeMessageTurn: tap((ctx) => names.push(`turn:${ctx.agentName}`)),
      beforeIteration: tap((ctx) => names.push(`iteration:${ctx.agentName}`)),
      wrapModel: (ctx) => tap({ complete: () => names.push(`model:${ctx.agentName}`) }),
      beforeFunction: tap((ctx) => names.push(`function:${ctx.agentName}`)),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'hi' } }] }, 'ok', 'ok']);
    const agent = createAgent({ name: 'MyAgent', model, tools: [echo], middleware: [note] });
    await agent.invoke('go');
    expect(names).toEqual(['turn:MyAgent', 'iteration:MyAgent', 'model:MyAgent', 'function:MyAgent', 'iteration:MyAgent', 'model:MyAgent']);
    names.length = 0;
    await createAgent({ model, middleware: [note] }).invoke('again');
    expect(names[0]).toBe('turn:agent');
  });

  it('wrapModel may rewrite the request through ctx.call', async () => {
    const model = scriptedModel(['ok']);
    const rewrite: AgentMiddleware = {
      name: 'rewrite',
      wrapModel: (ctx) => () => ctx.call({ ...ctx.request, settings: { ...ctx.request.settings, temperature: 0 } }),
    };
    await createAgent({ model, middleware: [rewrite] }).invoke('go');
    expect(model.requests[0].settings).toEqual({ temperature: 0 });
  });

  it('wrapFunction sees a tool error as an Observable error, so retry re-runs the tool', async () => {
    let attempts = 0;
    const flaky = defineTool({
      name: 'flaky',
      description: '',
      parameters: z.object({}),
      execute: () => {
        attempts++;
        if (attempts < 3) throw new Error(`attempt ${attempts} failed`);
        return 'third time lucky';
      },
    });
    const { retry } = await import('rxjs');
    const model = scriptedModel([{ toolCalls: [{ name: 'flaky', args: {} }] }, 'ok']);
    const retrying: AgentMiddleware = { name: 'retrying', wrapFunction: () => retry(2) };
    await createAgent({ model, tools: [flaky], middleware: [retrying] }).invoke('go');
    expect(attempts).toBe(3);
    expect(model.requests[1].messages[2].content[0]).toMatchObject({ result: 'third time lucky', isError: false });
  });

  it('emit adds the runId; updateState is typed and per run', async () => {
    const Seen = defineState({ key: 'test.seen', schema: z.array(z.number()), initial: () => [] as number[] });
    const tracker: AgentMiddleware = {
      name: 'tracker',
      afterIteration: map((ctx) => {
        const next = ctx.updateState(Seen, (s) => [...s, ctx.iteration]);
        next.emit({ type: 'skill-activated', skill: `seen ${next.state(Seen).join(',')}` });
        return next;
      }),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }, 'ok']);
    const events: Array<{ type: string; runId: string; skill?: string }> = [];
    await new Promise<void>((resolve) =>
      createAgent({ model, tools: [echo], middleware: [tracker] })
        .run('go', { runId: 'r9' })
        .subscribe({ next: (e) => events.push(e), complete: resolve }),
    );
    expect(events.filter((e) => e.type === 'skill-activated')).toEqual([
      { type: 'skill-activated', runId: 'r9', skill: 'seen 0' },
      { type: 'skill-activated', runId: 'r9', skill: 'seen 0,1' },
    ]);
  });
});

describe('request / response', () => {
  const asker = (timeout?: number): AgentMiddleware => ({
    name: 'asker',
    beforeIteration: (source) =>
      source.pipe(
        (s) =>
          new Observable<import('../../src/index').IterationContext>((sub) =>
            s.subscribe({
              next: (ctx: import('../../src/index').IterationContext) =>
                ctx
                  .request({ type: 'continuation-request', iteration: ctx.iteration, limit: 0, requestId: 'q1' }, { timeout, onTimeout: 'expired' as const })
                  .subscribe({
                    next: (answer) => sub.next(answer === 'expired' || !(answer as { approved: boolean }).approved ? ctx.terminate('denied') : ctx),
                    error: (e) => sub.error(e),
                    complete: () => sub.complete(),
                  }),
            }),
          ),
      ),
  });

  it('waits for the matching response (marbles)', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable, cold }) => {
      const responses = cold<AgentResponse>('5ms a 4ms b', {
        a: { type: 'continuation-response', requestId: 'other', approved: false },
        b: { type: 'continuation-response', requestId: 'q1', approved: true },
      });
      const agent = createAgent({ model: scriptedModel(['ok']), middleware: [asker(1000)], scheduler: testScheduler });
      expectObservable(agent.run('go', { responses }).pipe(withoutToolInput(), eventLabels())).toBe('(abc) 5ms (def|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'continuation-request',
        d: 'text-delta:ok',
        e: 'iteration-end',
        f: 'run-end:completed',
      });
    });
  });

  it('takes the safe default on timeout and says so (marbles)', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable }) => {
      const agent = createAgent({ model: scriptedModel(['ok']), middleware: [asker(1000)], scheduler: testScheduler });
      expectObservable(agent.run('go').pipe(withoutToolInput(), eventLabels())).toBe('(abc) 995ms (def|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'continuation-request',
        d: 'request-expired:timeout',
        e: 'iteration-end',
        f: 'run-end:terminated',
      });
    });
  });

  it('cancellation expires the open request before run-end (marbles)', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable, cold }) => {
      const agent = createAgent({ model: scriptedModel(['ok']), middleware: [asker()], scheduler: testScheduler });
      const controller = new AbortController();
      cold('50ms a').subscribe(() => controller.abort());
      expectObservable(agent.run('go', { signal: controller.signal }).pipe(withoutToolInput(), eventLabels())).toBe('(abc) 45ms (de|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'continuation-request',
        d: 'request-expired:cancelled',
        e: 'run-end:cancelled',
      });
    });
  });

  it('respond() returns true once, then false for duplicate, unknown and late ids', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ flush }) => {
      const agent = createAgent({ model: scriptedModel(['ok', 'ok']), middleware: [asker(100)], scheduler: testScheduler });
      const handle = agent.start('go');
      const answer = { type: 'continuation-response', requestId: 'q1', approved: true } as const;
      expect(handle.respond({ ...answer, requestId: 'nope' })).toBe(false);
      expect(handle.respond(answer)).toBe(true);
      expect(handle.respond(answer)).toBe(false);
      flush();
      const late = agent.start('again');
      testScheduler.schedule(() => expect(late.respond(answer)).toBe(false), 200);
      flush();
    });
  });

  it('subscribes to responses before emitting, so a synchronous answer is not lost', async () => {
    const responses = new Subject<AgentResponse>();
    const agent = createAgent({ model: scriptedModel(['ok']), middleware: [asker()] });
    const labels: string[] = [];
    await new Promise<void>((resolve) =>
      agent.run('go', { responses }).subscribe({
        next: (e) => {
          labels.push(e.type);
          if (e.type === 'continuation-request') responses.next({ type: 'continuation-response', requestId: e.requestId, approved: true });
        },
        complete: resolve,
      }),
    );
    expect(labels.at(-1)).toBe('run-end');
    expect(labels).not.toContain('request-expired');
  });
});

describe('cancellation', () => {
  it('cancel() during the model stream ends the run with reason cancelled and keeps the input (marbles)', () => {
    const testScheduler = newScheduler();
    testScheduler.run(({ expectObservable, cold }) => {
      const model = scriptedModel([{ text: ['a', 'b', 'c'], delay: 10 }], { scheduler: testScheduler });
      const agent = createAgent({ model, scheduler: testScheduler });
      const controller = new AbortController();
      cold('15ms x').subscribe(() => controller.abort());
      expectObservable(agent.run('go', { signal: controller.signal }).pipe(withoutToolInput(), eventLabels())).toBe('(ab) 6ms c 4ms (d|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:a',
        d: 'run-end:cancelled',
      });
    });
  });

  it('cancel() during a tool that returns an Observable unsubscribes it and aborts its signal', async () => {
    let tornDown = false;
    const watch = signalTool('watch', () => new Observable<string>(() => () => (tornDown = true)));
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'watch', args: {} }] }]), tools: [watch.tool] });
    const handle = agent.start('go');
    await new Promise((r) => setTimeout(r, 5));
    expect([tornDown, watch.signal()?.aborted]).toEqual([false, false]);
    handle.cancel();
    expect([tornDown, watch.signal()?.aborted]).toEqual([true, true]);
  });

  it('cancel() during a tool aborts its signal; events$ replays and completes', async () => {
    const hang = signalTool('hang', () => new Promise(() => undefined));
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'hang', args: {} }] }]), tools: [hang.tool] });
    const handle = agent.start('go');
    await new Promise((r) => setTimeout(r, 5));
    expect(hang.signal()?.aborted).toBe(false);
    handle.cancel();
    expect(hang.signal()?.aborted).toBe(true);
    const types: string[] = [];
    await new Promise<void>((resolve) => handle.events$.subscribe({ next: (e) => types.push(e.type), complete: resolve }));
    expect(types).toEqual(['run-start', 'iteration-start', 'tool-input-start', 'tool-input-delta', 'tool-input-delta', 'tool-call', 'run-end']);
  });

  it('invoke resolves a cancelled run with reason cancelled', async () => {
    const controller = new AbortController();
    const agent = createAgent({ model: () => new Observable<never>(() => undefined) });
    const result = agent.invoke('go', { signal: controller.signal });
    controller.abort();
    await expect(result).resolves.toMatchObject({ reason: 'cancelled', text: '', messages: [textLike('user', 'go')] });
  });
});

describe('isolation', () => {
  it('1,000 concurrent runs on one agent never see each other’s state or messages', async () => {
    const Mine = defineState({ key: 'test.mine', schema: z.string(), initial: () => '' });
    const stateful: AgentMiddleware = {
      name: 'stateful',
      beforeMessageTurn: map((ctx) => ctx.updateState(Mine, () => textOf(ctx.input[0]))),
      beforeIteration: map((ctx) => {
        if (ctx.state(Mine) !== textOf(ctx.messages[0])) throw new Error('state bled between runs');
        return ctx;
      }),
    };
    const delayed = defineTool({
      name: 'echo',
      description: '',
      parameters: z.object({ text: z.string() }),
      execute: ({ text }) => new Promise((resolve) => setTimeout(() => resolve(text), Math.random() * 5)),
    });
    // The model answers from what it is asked: each run gets its own script.
    const model = (request: import('../../src/index').ModelRequest) => {
      const who = textOf(request.messages[0]);
      const toolResults = request.messages.filter((m) => m.role === 'tool').length;
      const turn: ModelUpdate[] =
        toolResults === 0
          ? [
              { type: 'tool-call-delta', index: 0, callId: `c-${who}`, name: 'echo', argsDelta: JSON.stringify({ text: who }) },
              { type: 'finish', reason: 'tool-calls' },
            ]
          : [
              { type: 'text-delta', text: `answer for ${who}` },
              { type: 'finish', reason: 'stop' },
            ];
      return of(...turn);
    };
    const agent = createAgent({ model, tools: [delayed], middleware: [stateful] });
    const results = await Promise.all(Array.from({ length: 1000 }, (_, i) => agent.invoke(`user-${i}`)));
    results.forEach((result, i) => {
      expect(result).toMatchObject({ reason: 'completed', text: `answer for user-${i}` });
      expect(result.messages[2].content[0]).toMatchObject({ result: `user-${i}` });
    });
  });
});

describe('what the tool hooks change is told in events', () => {
  it('a call a beforeToolExecution hook adds gets its tool-call event before its tool-result', () => {
    const adder: AgentMiddleware = {
      name: 'adder',
      beforeToolExecution: map((ctx) =>
        ctx.with({ toolCalls: [...ctx.toolCalls, { type: 'tool-call', callId: 'extra', name: 'echo', args: { text: 'added' } }] }),
      ),
    };
    const agent = createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' }, callId: 'c1' }] }, 'done']),
      tools: [echo],
      middleware: [adder],
    });
    const events = collectEvents(agent.run('go'));
    expect(eventsOfType(events, 'tool-call').map((e) => [e.callId, e.args])).toEqual([
      ['c1', { text: 'a' }],
      ['extra', { text: 'added' }],
    ]);
    const at = (type: string) => events.findIndex((e) => e.type === type && (e as { callId?: string }).callId === 'extra');
    expect(at('tool-call')).toBeGreaterThan(-1);
    expect(at('tool-call')).toBeLessThan(at('tool-result'));
    expect(eventsOfType(events, 'tool-result').map((e) => e.callId)).toEqual(['c1', 'extra']);
  });

  it('a wrapFunction whose output is not a { result, isError } outcome fails the run naming it', () => {
    const boom = defineTool({
      name: 'boom',
      description: 'Throws',
      parameters: z.object({}),
      execute: () => {
        throw new Error('kaput');
      },
    });
    const fallback: AgentMiddleware = { name: 'fallback', wrapFunction: () => catchError(() => of('fallback value' as unknown as ToolOutcome)) };
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'boom', args: {} }] }, 'done']), tools: [boom], middleware: [fallback] });
    const events = collectEvents(agent.run('go'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'middleware',
      middleware: 'fallback',
      error: {
        message: `Middleware 'fallback' wrapFunction emitted "fallback value", not a tool outcome ({ result, isError }: pass the call's own stream on, or map to one)`,
      },
    });
    const empty: AgentMiddleware = { name: 'empty', wrapFunction: () => () => EMPTY };
    const emptied = collectEvents(
      createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'a' } }] }, 'done']), tools: [echo], middleware: [empty] }).run('go'),
    );
    expect(eventsOfType(emptied, 'error')[0].error.message).toContain("Middleware 'empty' wrapFunction completed without a tool outcome");
  });
});

describe('a failing hook is named in the error event', () => {
  const failingIn = (middleware: AgentMiddleware) => {
    const events = collectEvents(createAgent({ model: scriptedModel(['ok']), middleware: [middleware] }).run('go', { runId: 'r' }));
    return eventsOfType(events, 'error');
  };

  it('by its middleware and its hook: an operator that throws, a wrapModel that throws while it builds', () => {
    const boom = () => {
      throw new Error('boom');
    };
    expect(failingIn({ name: 'guard', beforeIteration: map(boom) })).toEqual([
      { type: 'error', runId: 'r', source: 'middleware', middleware: 'guard', hook: 'beforeIteration', error: { name: 'Error', message: 'boom' } },
    ]);
    expect(failingIn({ name: 'wrapper', wrapModel: boom })).toEqual([
      { type: 'error', runId: 'r', source: 'middleware', middleware: 'wrapper', hook: 'wrapModel', error: { name: 'Error', message: 'boom' } },
    ]);
  });

  it('an onError hook reads which middleware failed, and in which hook', () => {
    const seen: Array<[string | undefined, string | undefined]> = [];
    collectEvents(
      createAgent({
        model: scriptedModel(['ok']),
        middleware: [
          { name: 'reader', onError: tap((ctx) => seen.push([ctx.middleware, ctx.hook])) },
          {
            name: 'guard',
            afterIteration: map(() => {
              throw new Error('no');
            }),
          },
        ],
      }).run('go'),
    );
    expect(seen).toEqual([['guard', 'afterIteration']]);
  });

  it('an onError hook that fails is named with its own hook', () => {
    const failingModel = () => new Observable<ModelUpdate>((subscriber) => subscriber.error(new Error('model down')));
    const events = collectEvents(
      createAgent({
        model: failingModel,
        middleware: [
          {
            name: 'reporter',
            onError: map(() => {
              throw new Error('report failed');
            }),
          },
        ],
      }).run('go', { runId: 'r' }),
    );
    expect(eventsOfType(events, 'error')).toEqual([
      { type: 'error', runId: 'r', source: 'middleware', middleware: 'reporter', hook: 'onError', error: { name: 'Error', message: 'report failed' } },
    ]);
  });
});
