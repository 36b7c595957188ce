import { Observable, lastValueFrom, mergeMap, of, toArray, type Subscriber } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentMiddleware } from '../../src/index';
import { toolTimeout } from '../../operators/index';
import { collectEvents, eventsOfType, scriptedModel } from '../../src/testing/index';

const tick = (ms = 5) => new Promise((resolve) => setTimeout(resolve, ms));

/** A tool that awaits `gate` (fetching a token, say) before it first reads `ctx.signal`. */
function lateReader() {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const seen: { aborted?: boolean; reason?: string } = {};
  const tool = defineTool({
    name: 'late',
    description: 'Awaits, then reads its signal',
    parameters: z.object({}),
    execute: async (_args, ctx) => {
      await gate;
      seen.aborted = ctx.signal.aborted;
      seen.reason = (ctx.signal.reason as Error | undefined)?.message;
      return 'done';
    },
  });
  return { tool, seen, release: () => release() };
}

describe('ctx.signal of a tool call', () => {
  it('is already aborted when first read after the run was cancelled', async () => {
    const { tool, seen, release } = lateReader();
    const handle = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'late', args: {} }] }]), tools: [tool] }).start('go');
    await tick();
    handle.cancel();
    release();
    await tick();
    expect(seen).toEqual({ aborted: true, reason: "Tool 'late' was cancelled" });
  });

  it('is already aborted when first read after toolTimeout gave up on the call', async () => {
    const { tool, seen, release } = lateReader();
    const agent = createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'late', args: {} }] }, 'ok']),
      tools: [tool],
      middleware: [toolTimeout({ ms: 5 })],
    });
    expect((await agent.invoke('go')).text).toBe('ok');
    release();
    await tick();
    expect(seen.aborted).toBe(true);
  });
});

describe('a tool Observable whose teardown throws', () => {
  /** Answers 'ok', completes through `complete` (at once, or later), and its teardown throws. */
  const flaky = (complete: (subscriber: Subscriber<string>) => void) =>
    defineTool({
      name: 'flaky',
      description: 'answers, completes, then its teardown throws',
      parameters: z.object({}),
      execute: () =>
        new Observable<string>((subscriber) => {
          subscriber.next('ok');
          complete(subscriber);
          return () => {
            throw new Error('tool teardown failed');
          };
        }),
    });

  /** Runs the tool in a turn; returns what the model read of it and the errors that escaped. */
  async function runFlaky(complete: (subscriber: Subscriber<string>) => void) {
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      const model = scriptedModel([{ toolCalls: [{ name: 'flaky', args: {} }] }, 'done']);
      const result = await createAgent({ model, tools: [flaky(complete)] }).invoke('go');
      await new Promise((resolve) => setTimeout(resolve, 20)); // rxjs reports a stray teardown error on a timer
      return { reason: result.reason, read: model.requests[1].messages[2].content[0], uncaught };
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  }

  it('when it completes later: the model reads the error, the run goes on, nothing escapes', async () => {
    const { reason, read, uncaught } = await runFlaky((subscriber) => setTimeout(() => subscriber.complete(), 1));
    expect(reason).toBe('completed');
    expect(read).toMatchObject({ type: 'tool-result', isError: true, result: expect.stringContaining('tool teardown failed') });
    expect(uncaught).toEqual([]);
  });

  it('when it completed during subscribe (the teardown comes after): it keeps its answer; the teardown error does not escape', async () => {
    const { reason, read, uncaught } = await runFlaky((subscriber) => subscriber.complete());
    expect(reason).toBe('completed');
    expect(read).toMatchObject({ type: 'tool-result', isError: false, result: 'ok' });
    expect(uncaught).toEqual([]);
  });
});

describe('a wrapFunction that breaks the contract is named', () => {
  const ok = defineTool({ name: 'ok', description: 'ok', parameters: z.object({}), execute: () => 'fine' });
  const pass: AgentMiddleware = { name: 'pass', wrapFunction: () => (source) => source };
  const errorOf = (middleware: AgentMiddleware[]) => {
    const model = scriptedModel([{ toolCalls: [{ name: 'ok', args: {} }] }, 'done']);
    return eventsOfType(collectEvents(createAgent({ model, tools: [ok], middleware }).run('go')), 'error')[0];
  };

  it.each<[string, () => unknown, string]>([
    ['returns no operator', () => 42, "Middleware 'bad' wrapFunction is not an operator: it returned 42"],
    ['has an operator that returns no Observable', () => () => 'nope', `Middleware 'bad' wrapFunction's operator returned "nope", not an Observable`],
    [
      'has an operator that throws',
      () => () => {
        throw new Error('boom');
      },
      'boom',
    ],
  ])('one that %s, outermost or inside another wrapper', (_label, wrapFunction, message) => {
    const bad = { name: 'bad', wrapFunction } as unknown as AgentMiddleware;
    for (const middleware of [[bad], [pass, bad]]) {
      expect(errorOf(middleware)).toMatchObject({ source: 'middleware', middleware: 'bad', error: { message } });
    }
  });

  it('one that emits two outcomes: a MiddlewareError naming it and the hook, and no result for the call', () => {
    const twice: AgentMiddleware = { name: 'twice', wrapFunction: () => mergeMap((outcome) => of(outcome, { result: 'second', isError: false })) };
    for (const middleware of [[twice], [pass, twice]]) {
      const model = scriptedModel([{ toolCalls: [{ name: 'ok', args: {} }] }, 'done']);
      const events = collectEvents(createAgent({ model, tools: [ok], middleware }).run('go'));
      expect(eventsOfType(events, 'error')).toEqual([
        expect.objectContaining({
          source: 'middleware',
          middleware: 'twice',
          error: {
            name: 'MiddlewareError',
            message:
              "Middleware 'twice' wrapFunction emitted 2 values, not one tool outcome ({ result, isError }: pass the call's own stream on, or map to one)",
          },
        }),
      ]);
      expect(eventsOfType(events, 'tool-result')).toEqual([]);
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
    }
  });
});

describe('ctx.progress of a tool call', () => {
  const progressOf = (events: readonly { type: string }[]) =>
    events
      .filter((e) => e.type === 'tool-progress' || e.type === 'tool-call' || e.type === 'tool-result')
      .map((e) => (e.type === 'tool-progress' ? (e as unknown as { value: unknown }).value : e.type));

  it('emits tool-progress { iteration, callId, value } between the call and its result (destructured too)', async () => {
    const tool = defineTool({
      name: 'steps',
      description: 'Reports two steps',
      parameters: z.object({}),
      execute: async (_args, { progress }) => {
        progress({ step: 1 });
        await tick(1);
        progress({ step: 2 });
        return 'done';
      },
    });
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'steps', args: {}, callId: 'c9' }] }, 'ok']), tools: [tool] })
        .run('go', { runId: 'r' })
        .pipe(toArray()),
    );
    expect(progressOf(events)).toEqual(['tool-call', { step: 1 }, { step: 2 }, 'tool-result']);
    expect(eventsOfType(events, 'tool-progress')[0]).toEqual({ type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c9', value: { step: 1 } });
  });

  it('works under wrapFunction operators, and is ignored once the call settled', async () => {
    let late: ((value: unknown) => void) | undefined;
    const tool = defineTool({
      name: 'steps',
      description: 'Reports, returns, then reports again',
      parameters: z.object({}),
      execute: (_args, ctx) => {
        ctx.progress('working');
        late = ctx.progress;
        return 'done';
      },
    });
    const agent = createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'steps', args: {} }] }, 'ok']),
      tools: [tool],
      middleware: [toolTimeout({ ms: 1000 })],
    });
    const handle = agent.start('go');
    const events = collectEvents(handle.events$);
    late!('too late');
    expect(progressOf(events)).toEqual(['tool-call', 'working', 'tool-result']);
  });
});
