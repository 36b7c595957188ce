import { Observable, lastValueFrom, map, toArray, type SchedulerLike } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, ToolError, type AgentEvent, type AgentMiddleware } from '../../src/index';
import { eventLabel, scriptedModel } from '../../src/testing/index';
import { withoutToolInput } from '../support/withoutToolInput';
import { toolTimeout, ToolTimeoutError } from '../../operators/toolTimeout';

const newScheduler = () => new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
const labels = (...whole: string[]) => map((e: AgentEvent) => (whole.includes(e.type) ? e : eventLabel(e)));

/** A tool that answers after `ms` of scheduler time and records when its AbortSignal fired. */
function slowTool(name: string, ms: number, scheduler: SchedulerLike) {
  const aborts: number[] = [];
  const tool = defineTool({
    name,
    description: `${name} (slow)`,
    parameters: z.object({}),
    execute: (_args, ctx) =>
      new Observable<string>((subscriber) => {
        ctx.signal.addEventListener('abort', () => aborts.push(scheduler.now()));
        return scheduler.schedule(() => {
          subscriber.next(`${name} done`);
          subscriber.complete();
        }, ms);
      }),
  });
  return { tool, aborts };
}

function agentWith(ts: TestScheduler, tools: ReturnType<typeof slowTool>[], middleware: AgentMiddleware[]) {
  const model = scriptedModel([{ toolCalls: tools.map(({ tool }, i) => ({ name: tool.name, args: {}, callId: `c${i}` })) }, 'Done'], { scheduler: ts });
  return { model, agent: createAgent({ model, tools: tools.map((t) => t.tool), middleware, scheduler: ts }) };
}

function collect(ts: TestScheduler, build: () => ReturnType<typeof agentWith>) {
  const events: Array<AgentEvent & { frame: number }> = [];
  let built!: ReturnType<typeof agentWith>;
  ts.run(() => {
    built = build();
    built.agent.run('hi', { runId: 'r' }).subscribe((e) => events.push({ ...e, frame: ts.now() }));
  });
  return { events, ...built, results: events.filter((e) => e.type === 'tool-result') };
}

describe('toolTimeout', () => {
  it('times the call out at exactly ms, fires its AbortSignal, and the model reads the message', () => {
    const ts = newScheduler();
    let slow!: ReturnType<typeof slowTool>;
    let model!: ReturnType<typeof scriptedModel>;
    ts.run(({ expectObservable }) => {
      slow = slowTool('slow', 101, ts);
      const built = agentWith(ts, [slow], [toolTimeout({ ms: 100 })]);
      model = built.model;
      expectObservable(built.agent.run('hi', { runId: 'r' }).pipe(withoutToolInput(), labels('tool-result'))).toBe('(abc) 95ms (defghi|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-call:slow',
        d: {
          type: 'tool-result',
          runId: 'r',
          iteration: 0,
          callId: 'c0',
          name: 'slow',
          result: "Tool 'slow' timed out after 100 ms",
          isError: true,
        },
        e: 'iteration-end',
        f: 'iteration-start',
        g: 'text-delta:Done',
        h: 'iteration-end',
        i: 'run-end:completed',
      });
    });
    expect(slow.aborts).toEqual([100]);
    expect(model.requests[1].messages.at(-1)?.content).toEqual([
      { type: 'tool-result', callId: 'c0', name: 'slow', result: "Tool 'slow' timed out after 100 ms", isError: true },
    ]);
  });

  it('a call finishing exactly at ms is in time', () => {
    const ts = newScheduler();
    let slow!: ReturnType<typeof slowTool>;
    const { results } = collect(ts, () => {
      slow = slowTool('edge', 100, ts);
      return agentWith(ts, [slow], [toolTimeout({ ms: 100 })]);
    });
    expect(results[0]).toMatchObject({ result: 'edge done', isError: false, frame: 100 });
    expect(slow.aborts).toEqual([]); // a call that settled in time is not aborted
  });

  it('defaults to 30000 ms', () => {
    const ts = newScheduler();
    const ok = collect(ts, () => agentWith(ts, [slowTool('t', 30000, ts)], [toolTimeout()]));
    expect(ok.results[0]).toMatchObject({ result: 't done', frame: 30000 });
    const ts2 = newScheduler();
    const late = collect(ts2, () => agentWith(ts2, [slowTool('t', 30001, ts2)], [toolTimeout()]));
    expect(late.results[0]).toMatchObject({ result: "Tool 't' timed out after 30000 ms", isError: true, frame: 30000 });
  });

  it('limits only the tools listed in `tools`', () => {
    const ts = newScheduler();
    let a!: ReturnType<typeof slowTool>;
    let b!: ReturnType<typeof slowTool>;
    const { results } = collect(ts, () => {
      a = slowTool('a', 500, ts);
      b = slowTool('b', 500, ts);
      return agentWith(ts, [a, b], [toolTimeout({ ms: 100, tools: ['a'] })]);
    });
    expect(results.map((e) => [e.name, e.result, e.frame])).toEqual([
      ['a', "Tool 'a' timed out after 100 ms", 100],
      ['b', 'b done', 500],
    ]);
  });

  it('raises a ToolTimeoutError, a ToolError', () => {
    const error = new ToolTimeoutError('search', 250);
    expect(error).toBeInstanceOf(ToolError);
    expect(error).toMatchObject({ name: 'ToolTimeoutError', message: "Tool 'search' timed out after 250 ms", toolName: 'search', ms: 250 });
  });

  it('aborts a Promise-based tool through its signal (real timers)', async () => {
    let aborted: unknown;
    const sleepy = defineTool({
      name: 'sleepy',
      description: 'sleeps',
      parameters: z.object({}),
      execute: (_args, { signal }) =>
        new Promise<string>((resolve, reject) => {
          const handle = setTimeout(() => resolve('woke up'), 5000);
          signal.addEventListener('abort', () => {
            aborted = signal.reason;
            clearTimeout(handle);
            reject(signal.reason);
          });
        }),
    });
    const agent = createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'sleepy', args: {} }] }, 'Done']),
      tools: [sleepy],
      middleware: [toolTimeout({ ms: 20 })],
    });
    const started = Date.now();
    const events = await lastValueFrom(agent.run('hi').pipe(toArray()));
    expect(Date.now() - started).toBeLessThan(1000);
    expect(aborted).toBeInstanceOf(Error);
    expect(events.find((e) => e.type === 'tool-result')).toMatchObject({ result: "Tool 'sleepy' timed out after 20 ms", isError: true });
  });

  it('validates its options with TypeErrors naming the option', () => {
    expect(() => toolTimeout({ ms: 0 })).toThrow(
      new TypeError('toolTimeout: ms must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got 0'),
    );
    // A longer timer would fire at once (Node and browsers), timing every call out at the start.
    expect(() => toolTimeout({ ms: 3e9 })).toThrow(/toolTimeout: ms must be a number of milliseconds > 0 and at most 2147483647/);
    expect(() => toolTimeout({ ms: Infinity })).not.toThrow();
    expect(() => toolTimeout({ ms: null } as never)).toThrow(new TypeError('toolTimeout: ms must not be null (leave it out for the default)'));
    expect(() => toolTimeout({ ms: Number.NaN })).toThrow(/ms/);
    expect(() => toolTimeout({ tools: [3 as unknown as string] })).toThrow(/toolTimeout: tools/);
    expect(() => toolTimeout({ scheduler: {} as never })).toThrow(/scheduler/);
    expect(toolTimeout().name).toBe('toolTimeout');
  });
});
