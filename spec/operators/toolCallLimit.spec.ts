import { filter, map, merge } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, createSession, defineTool, type AgentEvent, type Message } from '../../src/index';
import { scriptedModel, collectEvents, eventsOfType } from '../../src/testing/index';
import { ToolCallLimitExceededError, toolCallLimit } from '../../operators/toolCallLimit';

const collect = collectEvents;
const runEnd = (events: AgentEvent[]) => events.at(-1) as Extract<AgentEvent, { type: 'run-end' }>;
const ofType = eventsOfType;

function tools() {
  const ran: string[] = [];
  const mk = (name: string) =>
    defineTool({
      name,
      description: name,
      parameters: z.object({ q: z.string() }),
      execute: ({ q }) => {
        ran.push(`${name}:${q}`);
        return `${name} ${q}`;
      },
    });
  return { ran, search: mk('search'), echo: mk('echo') };
}
const calls = (...names: string[]) => ({ toolCalls: names.map((name, i) => ({ name, args: { q: String(i + 1) }, callId: `${name}${i + 1}` })) });
const resultsOf = (m: Message) => m.content.map((p) => (p.type === 'tool-result' ? [p.callId, p.result, p.isError] : p.type));

const SEARCH_BLOCKED = "Tool call limit exceeded. Do not call 'search' again.";
const ALL_BLOCKED = 'Tool call limit exceeded. Do not make additional tool calls.';

describe('toolCallLimit', () => {
  it('checks its options at construction', () => {
    expect(() => toolCallLimit()).toThrow(new TypeError("toolCallLimit: give at least one of 'threadLimit' and 'runLimit'"));
    expect(() => toolCallLimit({ threadLimit: 2, runLimit: 3 })).toThrow(new TypeError("toolCallLimit: 'runLimit' (3) cannot exceed 'threadLimit' (2)"));
    expect(() => toolCallLimit({ runLimit: -1 })).toThrow(/'runLimit' must be a non-negative integer/);
    expect(() => toolCallLimit({ runLimit: 1, exitBehavior: 'stop' as 'end' })).toThrow(/'exitBehavior' must be 'continue', 'end' or 'error'/);
    expect(() => toolCallLimit({ runLimit: 1, toolName: '' })).toThrow(/'toolName' must be a non-empty string/);
    expect(() => toolCallLimit({ threadLimit: 3, runLimit: 3 })).not.toThrow();
  });

  it("'continue' (default) blocks the calls over the limit in the model's order; the others run", () => {
    const { ran, search, echo } = tools();
    const model = scriptedModel([calls('search', 'echo', 'search', 'search'), 'Done']);
    const agent = createAgent({ model, tools: [search, echo], middleware: [toolCallLimit({ toolName: 'search', runLimit: 2 })] });
    const events = collect(agent.run('go', { runId: 'r' }));
    expect(ran.sort()).toEqual(['echo:2', 'search:1', 'search:3']);
    expect(resultsOf(model.requests[1].messages[2])).toEqual([
      ['search1', 'search 1', false],
      ['echo2', 'echo 2', false],
      ['search3', 'search 3', false],
      ['search4', SEARCH_BLOCKED, true],
    ]);
    expect(ofType(events, 'tool-call-limit-exceeded')).toEqual([
      { type: 'tool-call-limit-exceeded', runId: 'r', toolName: 'search', scope: 'run', count: 3, limit: 2 },
    ]);
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'Done' });
  });

  it('run counts include blocked calls, so a later batch reports the growing count', () => {
    const { echo, search } = tools();
    const model = scriptedModel([calls('echo', 'search', 'echo'), calls('echo'), 'Done']);
    const agent = createAgent({ model, tools: [search, echo], middleware: [toolCallLimit({ runLimit: 2 })] });
    const events = collect(agent.run('go', { runId: 'r' }));
    expect(ofType(events, 'tool-call-limit-exceeded').map((e) => [e.scope, e.count, e.limit, 'toolName' in e])).toEqual([
      ['run', 3, 2, false],
      ['run', 4, 2, false],
    ]);
    expect(ofType(events, 'tool-result').map((e) => e.result)).toEqual(['echo 1', 'search 2', ALL_BLOCKED, ALL_BLOCKED]);
  });

  it("'end': exactly at the limit every call runs; one past, no tool of the batch runs and the run terminates (4/3)", () => {
    const atLimit = tools();
    const ok = createAgent({
      model: scriptedModel([calls('search', 'search', 'search'), 'Done']),
      tools: [atLimit.search],
      middleware: [toolCallLimit({ toolName: 'search', threadLimit: 3, exitBehavior: 'end' })],
    });
    const okEvents = collect(ok.run('go'));
    expect(atLimit.ran).toHaveLength(3);
    expect(ofType(okEvents, 'tool-call-limit-exceeded')).toEqual([]);
    expect(runEnd(okEvents).reason).toBe('completed');

    const past = tools();
    const model = scriptedModel([calls('search', 'echo', 'search', 'search', 'search'), 'never']);
    const agent = createAgent({
      model,
      tools: [past.search, past.echo],
      middleware: [toolCallLimit({ toolName: 'search', threadLimit: 3, exitBehavior: 'end' })],
    });
    const session = createSession();
    const events = collect(agent.run('go', { runId: 'r', session }));
    const text = "'search' tool call limit reached: thread limit exceeded (4/3 calls).";
    expect(past.ran).toEqual([]);
    expect(model.calls).toBe(1);
    expect(ofType(events, 'tool-call-limit-exceeded')).toEqual([
      { type: 'tool-call-limit-exceeded', runId: 'r', toolName: 'search', scope: 'thread', count: 4, limit: 3 },
    ]);
    // The runtime gives every call of the terminated batch the skipped result (no tool-result events for them).
    expect(session.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(resultsOf(session.messages[2]).map((r) => r[1])).toEqual(Array(5).fill('Tool execution was skipped.'));
    expect(session.messages[3]).toMatchObject({ role: 'assistant', content: [{ type: 'text', text }] });
    expect(runEnd(events)).toEqual({ type: 'run-end', runId: 'r', reason: 'terminated', text, terminationReason: text, usage: expect.anything() });
  });

  it("'error' fails the run with a ToolCallLimitExceededError carrying the text (no toolName)", async () => {
    const { search, ran } = tools();
    const agent = createAgent({
      model: scriptedModel([calls('search', 'search', 'search')]),
      tools: [search],
      middleware: [toolCallLimit({ runLimit: 2, exitBehavior: 'error' })],
    });
    const events = collect(agent.run('go', { runId: 'r' }));
    expect(ran).toEqual([]);
    expect(ofType(events, 'tool-call-limit-exceeded')).toEqual([{ type: 'tool-call-limit-exceeded', runId: 'r', scope: 'run', count: 3, limit: 2 }]);
    expect(ofType(events, 'error')).toEqual([
      {
        type: 'error',
        runId: 'r',
        source: 'middleware',
        middleware: 'toolCallLimit',
        hook: 'beforeToolExecution',
        error: { name: 'ToolCallLimitExceededError', message: 'Tool call limit reached: run limit exceeded (3/2 calls).' },
      },
    ]);
    expect(runEnd(events).reason).toBe('error');

    const again = createAgent({
      model: scriptedModel([calls('search', 'search', 'search')]),
      tools: [search],
      middleware: [toolCallLimit({ runLimit: 2, exitBehavior: 'error' })],
    });
    const error = await again.invoke('go').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ToolCallLimitExceededError);
    expect(error).toMatchObject({ threadCount: 3, runCount: 3, threadLimit: undefined, runLimit: 2, toolName: undefined });
  });

  it('counts the thread across the runs of a session (allowed calls only); the run count starts again', () => {
    const session = createSession();
    const { search, ran } = tools();
    const model = scriptedModel([calls('search', 'search'), 'First', calls('search', 'search', 'search'), 'never']);
    const agent = createAgent({
      model,
      tools: [search],
      middleware: [toolCallLimit({ toolName: 'search', threadLimit: 3, runLimit: 2, exitBehavior: 'end' })],
    });
    expect(runEnd(collect(agent.run('one', { session }))).text).toBe('First');
    const events = collect(agent.run('two', { session, runId: 'r2' }));
    // Second run: call 1 allowed (thread 3, run 1), calls 2 and 3 blocked by the thread limit (run 2, 3).
    expect(ofType(events, 'tool-call-limit-exceeded').map((e) => [e.scope, e.count, e.limit])).toEqual([
      ['thread', 4, 3],
      ['thread', 5, 3],
    ]);
    const text = "'search' tool call limit reached: thread limit exceeded (5/3 calls) and run limit exceeded (3/2 calls).";
    expect(runEnd(events)).toMatchObject({ reason: 'terminated', terminationReason: text, text });
    expect(ran).toEqual(['search:1', 'search:2']);
    expect(session.snapshot().state['rx-agent.toolCallLimit.threadCounts']).toEqual({ version: 1, value: { search: 3 } });
    expect(session.snapshot().state['rx-agent.toolCallLimit.runCounts']).toBeUndefined();
  });

  it("in 'continue' mode a thread-blocked call does not count in the thread", () => {
    const session = createSession();
    const { search } = tools();
    const model = scriptedModel([calls('search', 'search'), 'a', calls('search'), 'b']);
    const agent = createAgent({ model, tools: [search], middleware: [toolCallLimit({ threadLimit: 1 })] });
    const first = collect(agent.run('one', { session }));
    const second = collect(agent.run('two', { session }));
    expect(ofType(first, 'tool-call-limit-exceeded').map((e) => [e.scope, e.count])).toEqual([['thread', 2]]);
    expect(ofType(second, 'tool-call-limit-exceeded').map((e) => [e.scope, e.count])).toEqual([['thread', 2]]);
    expect(ofType(second, 'tool-result').map((e) => e.result)).toEqual([ALL_BLOCKED]);
    expect(session.snapshot().state['rx-agent.toolCallLimit.threadCounts']).toEqual({ version: 1, value: { __all__: 1 } });
  });

  it('a per-tool and a global limit work side by side', () => {
    const { search, echo } = tools();
    const model = scriptedModel([calls('search', 'search', 'echo', 'echo'), 'Done']);
    const agent = createAgent({
      model,
      tools: [search, echo],
      middleware: [toolCallLimit({ toolName: 'search', runLimit: 1 }), toolCallLimit({ runLimit: 3 })],
    });
    const events = collect(agent.run('go'));
    expect(ofType(events, 'tool-result').map((e) => e.result)).toEqual(['search 1', SEARCH_BLOCKED, 'echo 3', ALL_BLOCKED]);
  });

  it('keeps two concurrent runs of one instance apart', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const { search } = tools();
      const agent = createAgent({
        model: scriptedModel([{ ...calls('search'), delay: 1 }], { scheduler: testScheduler, loop: true }),
        tools: [search],
        middleware: [toolCallLimit({ runLimit: 2, exitBehavior: 'end' })],
        scheduler: testScheduler,
      });
      const ends = merge(agent.run('a', { runId: 'a' }), agent.run('b', { runId: 'b' })).pipe(
        filter((e) => e.type === 'run-end'),
        map((e) => `${e.runId}:${e.terminationReason}`),
      );
      const reason = 'Tool call limit reached: run limit exceeded (3/2 calls).';
      // Each model call takes 3 virtual ms; each run is stopped at its own third call.
      expectObservable(ends).toBe('---------(ab|)', { a: `a:${reason}`, b: `b:${reason}` });
    });
  });
});

describe('toolCallLimit instances', () => {
  const echo = defineTool({ name: 'echo', description: 'Echo', parameters: z.object({ i: z.number() }), execute: ({ i }) => i });
  it('two instances counting the same calls fail the run with an error that says how to combine them', () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { i: 1 } }] }, 'Done']);
    const agent = createAgent({ model, tools: [echo], middleware: [toolCallLimit({ threadLimit: 3 }), toolCallLimit({ runLimit: 3 })] });
    const events = collectEvents(agent.run('go'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'middleware',
      middleware: 'toolCallLimit',
      error: { message: 'toolCallLimit: two instances count the calls of every tool; give one instance both threadLimit and runLimit' },
    });
  });

  it('instances for different tools, or one for a tool and one for all, keep their own counts', () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { i: 1 } }] }, { toolCalls: [{ name: 'echo', args: { i: 2 } }] }, 'Done']);
    const agent = createAgent({ model, tools: [echo], middleware: [toolCallLimit({ toolName: 'echo', runLimit: 3 }), toolCallLimit({ runLimit: 3 })] });
    const events = collectEvents(agent.run('go'));
    expect(eventsOfType(events, 'error')).toEqual([]);
    expect(eventsOfType(events, 'tool-result')).toHaveLength(2);
  });
});

describe('toolCallLimit registered twice', () => {
  it('counts each call once', () => {
    const tool = defineTool({ name: 't', description: 'T', parameters: z.object({}), execute: () => 'ok' });
    const limit = toolCallLimit({ runLimit: 2 });
    const model = scriptedModel([{ toolCalls: [{ name: 't', args: {} }] }, { toolCalls: [{ name: 't', args: {} }] }, 'done']);
    const events = collectEvents(createAgent({ model, tools: [tool], middleware: [limit, limit] }).run('go'));
    expect(eventsOfType(events, 'error')).toEqual([]);
    expect(eventsOfType(events, 'tool-call-limit-exceeded')).toEqual([]);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
  });
});
