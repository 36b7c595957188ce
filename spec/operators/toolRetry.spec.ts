import { Observable, map, timer, type SchedulerLike } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, ToolError, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { eventLabel, scriptedModel } from '../../src/testing/index';
import { withoutToolInput } from '../support/withoutToolInput';
import { toolRetry } from '../../operators/toolRetry';
import { toolTimeout } from '../../operators/toolTimeout';

const newScheduler = () => new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
const labels = (...whole: string[]) => map((e: AgentEvent) => (whole.includes(e.type) ? e : eventLabel(e)));

interface Attempt {
  /** Virtual ms the attempt takes. */
  ms?: number;
  /** Fail with this error (after `ms`), else succeed with `ok #n`. */
  error?: unknown;
}

/**
 * A tool whose n-th execution follows `attempts[n]` (the last one repeats), in scheduler time; it
 * records each execution's start frame and AbortSignal.
 */
function flakyTool(name: string, attempts: Attempt[], scheduler: SchedulerLike) {
  const runs: Array<{ at: number; signal: AbortSignal }> = [];
  const tool = defineTool({
    name,
    description: `${name} (flaky)`,
    parameters: z.object({}),
    execute: (_args, ctx) =>
      new Observable<string>((subscriber) => {
        const n = runs.length;
        runs.push({ at: scheduler.now(), signal: ctx.signal });
        const attempt = attempts[Math.min(n, attempts.length - 1)];
        return scheduler.schedule(() => {
          if (attempt.error !== undefined) subscriber.error(attempt.error);
          else {
            subscriber.next(`ok #${n + 1}`);
            subscriber.complete();
          }
        }, attempt.ms ?? 0);
      }),
  });
  return { tool, runs };
}

function agentWith(ts: TestScheduler, tools: ReturnType<typeof flakyTool>[], middleware: AgentMiddleware[]) {
  const model = scriptedModel([{ toolCalls: tools.map(({ tool }, i) => ({ name: tool.name, args: {}, callId: `c${i}` })) }, 'Done'], { scheduler: ts });
  return { model, agent: createAgent({ model, tools: tools.map((t) => t.tool), middleware, scheduler: ts }) };
}

const boom = new Error('boom');

type Framed = AgentEvent & { frame: number };
function toolResults(events: Framed[]) {
  return events.filter((e): e is Extract<AgentEvent, { type: 'tool-result' }> & { frame: number } => e.type === 'tool-result');
}

function collect(ts: TestScheduler, build: () => ReturnType<typeof agentWith>) {
  const events: Framed[] = [];
  let built!: ReturnType<typeof agentWith>;
  ts.run(() => {
    built = build();
    built.agent.run('hi', { runId: 'r' }).subscribe((e) => events.push({ ...e, frame: ts.now() }));
  });
  return { events, ...built };
}

describe('toolRetry', () => {
  it('runs a failing tool again after 1000 then 2000 ms, each time with a fresh AbortSignal', () => {
    const ts = newScheduler();
    let flaky!: ReturnType<typeof flakyTool>;
    ts.run(({ expectObservable }) => {
      flaky = flakyTool('flaky', [{ error: boom }, { error: boom, ms: 10 }, { ms: 5 }], ts);
      const { agent } = agentWith(ts, [flaky], [toolRetry({ jitter: 0 })]);
      expectObservable(agent.run('hi', { runId: 'r' }).pipe(withoutToolInput(), labels('tool-result'))).toBe('(abc) 3010ms (defghi|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:flaky',
        d: { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c0', name: 'flaky', result: 'ok #3', isError: false },
        e: 'iteration-end',
        f: 'iteration-start',
        g: 'text-delta:Done',
        h: 'iteration-end',
        i: 'run-end:completed',
      });
    });
    expect(flaky.runs.map((r) => r.at)).toEqual([0, 1000, 3010]);
    expect(new Set(flaky.runs.map((r) => r.signal)).size).toBe(3);
    expect(flaky.runs.map((r) => r.signal.aborted)).toEqual([false, false, false]); // each settled by itself: none is aborted
  });

  it("afterFunction's ctx.error after the last attempt is toolRetry's ToolError, the tool's error its cause", () => {
    const ts = newScheduler();
    const seen: unknown[] = [];
    const observe: AgentMiddleware = { name: 'observe', afterFunction: map((ctx) => (seen.push(ctx.error), ctx)) };
    collect(ts, () => agentWith(ts, [flakyTool('flaky', [{ error: boom }], ts)], [observe, toolRetry({ maxRetries: 1, jitter: 0 })]));
    expect(seen).toHaveLength(1);
    expect(seen[0]).toBeInstanceOf(ToolError);
    expect((seen[0] as ToolError).message).toBe("Tool 'flaky' failed after 2 attempts: boom");
    expect((seen[0] as ToolError).cause).toBe(boom);
  });

  it("after the last attempt the model reads `Tool '<name>' failed after N attempts: <message>`", () => {
    const ts = newScheduler();
    const { events, model } = collect(ts, () => agentWith(ts, [flakyTool('flaky', [{ error: boom }], ts)], [toolRetry({ jitter: 0 })]));
    expect(toolResults(events)).toEqual([
      {
        type: 'tool-result',
        runId: 'r',
        iteration: 0,
        callId: 'c0',
        name: 'flaky',
        result: "Tool 'flaky' failed after 3 attempts: boom",
        isError: true,
        frame: 3000,
      },
    ]);
    const toolMessage = model.requests[1].messages.at(-1);
    expect(toolMessage).toMatchObject({
      role: 'tool',
      content: [{ type: 'tool-result', callId: 'c0', name: 'flaky', result: "Tool 'flaky' failed after 3 attempts: boom", isError: true }],
    });
  });

  it('exactly maxRetries failures recover, one more does not', () => {
    const ts = newScheduler();
    const ok = collect(ts, () => agentWith(ts, [flakyTool('t', [{ error: boom }, {}], ts)], [toolRetry({ maxRetries: 1, jitter: 0 })]));
    expect(toolResults(ok.events)[0]).toMatchObject({ result: 'ok #2', isError: false, frame: 1000 });
    const ts2 = newScheduler();
    const ko = collect(ts2, () =>
      agentWith(ts2, [flakyTool('t', [{ error: boom }, { error: new Error('again') }, {}], ts2)], [toolRetry({ maxRetries: 1, jitter: 0 })]),
    );
    expect(toolResults(ko.events)[0]).toMatchObject({ result: "Tool 't' failed after 2 attempts: again", isError: true, frame: 1000 });
  });

  it('maxRetries: 0 reports after 1 attempt', () => {
    const ts = newScheduler();
    const { events } = collect(ts, () => agentWith(ts, [flakyTool('t', [{ error: boom }, {}], ts)], [toolRetry({ maxRetries: 0 })]));
    expect(toolResults(events)[0]).toMatchObject({ result: "Tool 't' failed after 1 attempts: boom", isError: true, frame: 0 });
  });

  it('retries only the tools listed in `tools`', () => {
    const ts = newScheduler();
    let a!: ReturnType<typeof flakyTool>;
    let b!: ReturnType<typeof flakyTool>;
    const { events } = collect(ts, () => {
      a = flakyTool('a', [{ error: boom }, {}], ts);
      b = flakyTool('b', [{ error: boom }, {}], ts);
      return agentWith(ts, [a, b], [toolRetry({ tools: ['a'], jitter: 0 })]);
    });
    // b's error result comes at once, a's after the 1000 ms retry.
    expect(toolResults(events).map((e) => [e.name, e.result, e.isError, e.frame])).toEqual([
      ['b', 'Error: boom', true, 0],
      ['a', 'ok #2', false, 1000],
    ]);
    expect(a.runs).toHaveLength(2);
    expect(b.runs).toHaveLength(1);
  });

  it('retryOn decides; a non-retryable error is reported after the attempts made', () => {
    const ts = newScheduler();
    const fatal = new ToolError('City not found');
    const retryOn = (error: unknown) => error !== fatal;
    const { events } = collect(ts, () => agentWith(ts, [flakyTool('t', [{ error: boom }, { error: fatal }, {}], ts)], [toolRetry({ retryOn, jitter: 0 })]));
    expect(toolResults(events)[0]).toMatchObject({ result: "Tool 't' failed after 2 attempts: City not found", isError: true, frame: 1000 });
  });

  it("uses the error's retryAfterMs (capped, no jitter) and the injected jitter randomness", () => {
    const ts = newScheduler();
    const limited = Object.assign(new Error('busy'), { retryAfterMs: 250 });
    const { events: advised } = collect(ts, () => agentWith(ts, [flakyTool('t', [{ error: limited }, {}], ts)], [toolRetry({ random: () => 0 })]));
    expect(toolResults(advised)[0]).toMatchObject({ result: 'ok #2', frame: 250 });
    const ts2 = newScheduler();
    const { events: jittered } = collect(ts2, () =>
      agentWith(ts2, [flakyTool('t', [{ error: boom }, { error: boom }, {}], ts2)], [toolRetry({ random: () => 0 })]),
    );
    expect(toolResults(jittered)[0]).toMatchObject({ result: 'ok #3', frame: 750 + 1500 });
  });

  it('retries a toolTimeout registered after it', () => {
    const ts = newScheduler();
    let slow!: ReturnType<typeof flakyTool>;
    const { events } = collect(ts, () => {
      slow = flakyTool('slow', [{ ms: 500 }, { ms: 50 }], ts);
      return agentWith(ts, [slow], [toolRetry({ jitter: 0 }), toolTimeout({ ms: 100 })]);
    });
    expect(toolResults(events)[0]).toMatchObject({ result: 'ok #2', isError: false, frame: 100 + 1000 + 50 });
    expect(slow.runs.map((r) => r.at)).toEqual([0, 1100]);
  });

  it('keeps no state between calls (each call has its own budget)', () => {
    const ts = newScheduler();
    const retry = toolRetry({ maxRetries: 1, jitter: 0 });
    const { events } = collect(ts, () => agentWith(ts, [flakyTool('a', [{ error: boom }, {}], ts), flakyTool('b', [{ error: boom }, {}], ts)], [retry]));
    expect(toolResults(events).map((e) => [e.name, e.result])).toEqual([
      ['a', 'ok #2'],
      ['b', 'ok #2'],
    ]);
  });

  it('validates its options with TypeErrors naming the option', () => {
    expect(() => toolRetry({ maxRetries: -1 })).toThrow(new TypeError('toolRetry: maxRetries must be an integer >= 0, got -1'));
    expect(() => toolRetry({ tools: 'a' as unknown as string[] })).toThrow(/toolRetry: tools/);
    expect(() => toolRetry({ tools: [1 as unknown as string] })).toThrow(/tools/);
    expect(() => toolRetry({ jitter: -0.1 })).toThrow(/jitter/);
    expect(() => toolRetry({ initialDelayMs: Infinity })).toThrow(/initialDelayMs/);
    expect(() => toolRetry({ retryOn: 1 as never })).toThrow(/retryOn/);
    expect(toolRetry().name).toBe('toolRetry');
  });

  it('the delays run on the agent scheduler by default (timer-based tools too)', () => {
    const ts = newScheduler();
    ts.run(({ expectObservable }) => {
      let calls = 0;
      const tool = defineTool({
        name: 'tick',
        description: 'tick',
        parameters: z.object({}),
        execute: () =>
          timer(10, ts).pipe(
            map(() => {
              if (++calls < 2) throw boom;
              return 'tock';
            }),
          ),
      });
      const model = scriptedModel([{ toolCalls: [{ name: 'tick', args: {} }] }, 'Done'], { scheduler: ts });
      const agent = createAgent({ model, tools: [tool], middleware: [toolRetry({ jitter: 0, initialDelayMs: 100 })], scheduler: ts });
      expectObservable(
        agent.run('hi').pipe(
          withoutToolInput(),
          labels(),
          map((l) => (typeof l === 'string' ? l : l.type)),
        ),
      ).toBe('(abc) 115ms (defghi|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:tick',
        d: 'tool-result:tick',
        e: 'iteration-end',
        f: 'iteration-start',
        g: 'text-delta:Done',
        h: 'iteration-end',
        i: 'run-end:completed',
      });
    });
  });
});
