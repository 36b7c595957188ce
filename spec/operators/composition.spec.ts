import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, textOf, type AgentEvent, type ModelRequest, type RunHandle } from '../../src/index';
import { eventLabel, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { circuitBreaker } from '../../operators/circuitBreaker';
import { continuationPermission } from '../../operators/continuationPermission';
import { costBudget } from '../../operators/costBudget';
import { errorTracking } from '../../operators/errorTracking';
import { iterationGuidance } from '../../operators/iterationGuidance';
import { iterationLogging } from '../../operators/iterationLogging';
import { lifecycleEvents } from '../../operators/lifecycleEvents';
import { permissions } from '../../operators/permissions';
import { responseCache } from '../../operators/responseCache';
import { skills } from '../../operators/skills';
import { toolCallLimit } from '../../operators/toolCallLimit';
import { modelCallLimit } from '../../operators/modelCallLimit';
import { contextEditing } from '../../operators/contextEditing';
import { summarization } from '../../operators/summarization';
import { todoList } from '../../operators/todoList';
import { toolSelector } from '../../operators/toolSelector';

/** One agent with all ten seed operators, a scripted model keyed by the run's input, and a responder. */
function setup(testScheduler: TestScheduler) {
  const bought: string[] = [];
  const buyStock = defineTool({
    name: 'buy_stock',
    description: 'Buys a stock',
    parameters: z.object({ symbol: z.string() }),
    needsApproval: true,
    execute: ({ symbol }) => (bought.push(symbol), `bought ${symbol}`),
  });
  const flaky = defineTool({
    name: 'flaky',
    description: 'Fails',
    parameters: z.object({ attempt: z.number() }),
    execute: () => {
      throw new Error('boom');
    },
  });
  const lookup = defineTool({ name: 'lookup', description: 'Looks up', parameters: z.object({ q: z.string() }), execute: ({ q }) => `found ${q}` });
  const trading = { name: 'trading', description: 'Buy and sell stocks', instructions: 'Confirm the symbol before buying.', tools: [buyStock] };

  const scripts: Record<string, ScriptedTurn[]> = {
    trade: [
      { toolCalls: [{ name: 'activate_skill', args: { name: 'trading' }, callId: 't0' }], usage: { inputTokens: 16, outputTokens: 8 } },
      { toolCalls: [{ name: 'buy_stock', args: { symbol: 'AAPL' }, callId: 't1' }], usage: { inputTokens: 32, outputTokens: 8 } },
      { text: 'Bought AAPL.', usage: { inputTokens: 48, outputTokens: 16 } },
    ],
    fetch: [
      { toolCalls: [{ name: 'flaky', args: { attempt: 1 }, callId: 'f0' }], usage: { inputTokens: 16, outputTokens: 8 } },
      { toolCalls: [{ name: 'flaky', args: { attempt: 2 }, callId: 'f1' }], usage: { inputTokens: 16, outputTokens: 8 } },
      'never reached',
    ],
    loop: [
      { toolCalls: [{ name: 'lookup', args: { q: 'x' }, callId: 'l0' }], usage: { inputTokens: 16, outputTokens: 8 } },
      { toolCalls: [{ name: 'lookup', args: { q: 'x' }, callId: 'l1' }], usage: { inputTokens: 16, outputTokens: 8 } },
      'never reached',
    ],
  };
  const delays: Record<string, number> = { trade: 10, fetch: 7, loop: 5 };
  const model = scriptedModel(
    [
      (request: ModelRequest): ScriptedTurn => {
        const input = textOf(request.messages[0]);
        const step = request.messages.filter((m) => m.role === 'assistant').length;
        const turn = scripts[input][step];
        return typeof turn === 'string' ? { text: turn, delay: delays[input] } : { ...turn, delay: delays[input] };
      },
    ],
    { loop: true, scheduler: testScheduler },
  );
  const logLines: string[] = [];
  let n = 0;
  const agent = createAgent({
    model,
    instructions: 'You are a broker.',
    tools: [flaky, lookup],
    maxIterations: Infinity,
    scheduler: testScheduler,
    idGenerator: (prefix) => `${prefix}_${++n}`,
    middleware: [
      lifecycleEvents(),
      iterationLogging({ logger: { info: (line) => logLines.push(line) } }),
      iterationGuidance(),
      skills({ skills: [trading] }),
      continuationPermission({ maxIterations: 2 }),
      permissions(),
      circuitBreaker({ maxConsecutiveCalls: 2 }),
      errorTracking({ maxConsecutiveErrors: 2 }),
      costBudget({ maxCost: 100, pricing: { inputPerToken: 0.0625, outputPerToken: 0.125 } }),
      responseCache(),
    ],
  });

  const seen: Record<string, string[]> = {};
  const full: Record<string, AgentEvent[]> = {};
  type Answers = { permission?: boolean; continuation?: boolean };
  const start = (runId: string, input: string, answers: Answers = {}): RunHandle => {
    const handle = agent.start(input, { runId });
    seen[runId] = [];
    full[runId] = [];
    handle.events$.subscribe((e) => {
      if (e.type !== 'tool-input-start' && e.type !== 'tool-input-delta') seen[runId].push(`${testScheduler.now()} ${eventLabel(e)}`);
      full[runId].push(e);
      // A person answers after 100 ms (yes unless told otherwise).
      const { permission = true, continuation = true } = answers;
      if (e.type === 'permission-request')
        testScheduler.schedule(() => handle.respond({ type: 'permission-response', requestId: e.requestId, approved: permission }), 100);
      if (e.type === 'continuation-request')
        testScheduler.schedule(() => handle.respond({ type: 'continuation-response', requestId: e.requestId, approved: continuation }), 100);
    });
    return handle;
  };
  const of = <T extends AgentEvent['type']>(id: string, type: T) => full[id].filter((e): e is Extract<AgentEvent, { type: T }> => e.type === type);
  return { model, logLines, bought, seen, full, start, of };
}

describe('the ten seed operators composed on one agent', () => {
  /**
   * All ten seed operators on one agent, two runs at a time, in virtual time:
   * - run a ('trade'): activates the trading skill, buys a stock after a person's approval, is
   *   granted a continuation past 2 model calls, and answers;
   * - run b ('fetch'), at the same time: a flaky tool fails twice in a row → errorTracking ends it;
   * - then run c ('trade' again): every model answer comes from the cache (no model call, no cost);
   * - run d ('loop'), at the same time as c: the same lookup twice → circuitBreaker ends it.
   */
  it('runs two runs at a time with the expected events and no interference', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(() => {
      const { model, logLines, bought, seen, full, start, of } = setup(testScheduler);
      start('a', 'trade');
      start('b', 'fetch');
      testScheduler.schedule(() => {
        start('c', 'trade');
        start('d', 'loop');
      }, 1000);
      testScheduler.flush();

      // Timelines ("<virtual ms> <event>"): run a and run b interleave, as do c and d.
      expect(seen.a).toEqual([
        '0 run-start',
        '0 agent-run-started',
        '0 iteration-start',
        '40 tool-call:activate_skill',
        '40 tool-result:activate_skill',
        '40 cost-recorded',
        '40 skill-activated',
        '40 iteration-end',
        '40 iteration-start',
        '80 tool-call:buy_stock',
        '80 permission-request',
        '180 tool-result:buy_stock', // approved after 100 ms
        '180 cost-recorded',
        '180 iteration-end',
        '180 iteration-start',
        '180 continuation-request', // 2 model calls done
        '290 text-delta:Bought AAPL.', // approved after 100 ms, then the model streams
        '310 cost-recorded',
        '310 iteration-end',
        '310 agent-run-completed',
        '310 run-end:completed',
      ]);
      expect(seen.b).toEqual([
        '0 run-start',
        '0 agent-run-started',
        '0 iteration-start',
        '28 tool-call:flaky',
        '28 tool-result:flaky',
        '28 cost-recorded',
        '28 iteration-end',
        '28 iteration-start',
        '56 tool-call:flaky',
        '56 tool-result:flaky',
        '56 cost-recorded',
        '56 error-threshold-exceeded',
        '56 iteration-end',
        '56 agent-run-completed',
        '56 run-end:terminated',
      ]);
      // c: every model answer replayed from the cache (no model time, no cost); the person is asked again.
      expect(seen.c).toEqual([
        '1000 run-start',
        '1000 agent-run-started',
        '1000 iteration-start',
        '1000 tool-call:activate_skill',
        '1000 tool-result:activate_skill',
        '1000 skill-activated',
        '1000 iteration-end',
        '1000 iteration-start',
        '1000 tool-call:buy_stock',
        '1000 permission-request',
        '1100 tool-result:buy_stock',
        '1100 iteration-end',
        '1100 iteration-start',
        '1100 continuation-request',
        '1200 text-delta:Bought AAPL.',
        '1200 iteration-end',
        '1200 agent-run-completed',
        '1200 run-end:completed',
      ]);
      expect(seen.d).toEqual([
        '1000 run-start',
        '1000 agent-run-started',
        '1000 iteration-start',
        '1020 tool-call:lookup',
        '1020 tool-result:lookup',
        '1020 cost-recorded',
        '1020 iteration-end',
        '1020 iteration-start',
        '1040 tool-call:lookup',
        '1040 circuit-breaker-triggered',
        '1040 tool-result:lookup',
        '1040 cost-recorded',
        '1040 iteration-end',
        '1040 agent-run-completed',
        '1040 run-end:terminated',
      ]);

      // Every event carries its own run's id.
      for (const id of ['a', 'b', 'c', 'd']) expect(full[id].every((e) => e.runId === id)).toBe(true);

      // Run state is per run: costs, skills, limits, counters do not leak between concurrent runs.
      expect(of('a', 'cost-recorded').map((e) => [e.inputTokens, e.outputTokens, e.cost, e.totalCost])).toEqual([
        [16, 8, 2, 2],
        [32, 8, 3, 5],
        [48, 16, 5, 10],
      ]);
      expect(of('b', 'cost-recorded').map((e) => e.totalCost)).toEqual([2, 4]);
      expect(of('c', 'cost-recorded')).toEqual([]);
      expect(of('d', 'cost-recorded').map((e) => e.totalCost)).toEqual([2, 4]);
      expect(of('a', 'skill-activated')).toEqual([{ type: 'skill-activated', runId: 'a', skill: 'trading' }]);
      expect(of('c', 'skill-activated')).toEqual([{ type: 'skill-activated', runId: 'c', skill: 'trading' }]);
      expect(of('a', 'permission-request')).toEqual([
        {
          type: 'permission-request',
          runId: 'a',
          requestId: 'req_1',
          callId: 't1',
          toolName: 'buy_stock',
          args: { symbol: 'AAPL' },
          description: 'Buys a stock',
        },
      ]);
      expect(of('a', 'continuation-request')).toEqual([{ type: 'continuation-request', runId: 'a', requestId: 'req_2', iteration: 2, limit: 2 }]);
      expect(of('c', 'continuation-request')).toEqual([{ type: 'continuation-request', runId: 'c', requestId: 'req_4', iteration: 2, limit: 2 }]);
      expect(of('b', 'error-threshold-exceeded')).toEqual([
        { type: 'error-threshold-exceeded', runId: 'b', consecutiveErrors: 2, maxAllowed: 2, lastError: 'Error: boom' },
      ]);
      expect(of('d', 'circuit-breaker-triggered')).toEqual([{ type: 'circuit-breaker-triggered', runId: 'd', toolName: 'lookup', count: 2, iteration: 1 }]);

      const circuit = "Circuit breaker triggered: 'lookup' was called 2 times in a row with identical arguments.";
      const failures = 'Maximum consecutive failures (2) exceeded';
      expect(of('a', 'agent-run-completed')).toEqual([
        { type: 'agent-run-completed', runId: 'a', durationMs: 310, iterations: 3, functionCalls: 2, success: true },
      ]);
      expect(of('b', 'agent-run-completed')).toEqual([
        { type: 'agent-run-completed', runId: 'b', durationMs: 56, iterations: 2, functionCalls: 2, success: false, terminationReason: failures },
      ]);
      expect(of('c', 'agent-run-completed')).toEqual([
        { type: 'agent-run-completed', runId: 'c', durationMs: 200, iterations: 3, functionCalls: 2, success: true },
      ]);
      expect(of('d', 'agent-run-completed')).toEqual([
        { type: 'agent-run-completed', runId: 'd', durationMs: 40, iterations: 2, functionCalls: 1, success: false, terminationReason: circuit },
      ]);
      expect(of('a', 'run-end')).toEqual([
        { type: 'run-end', runId: 'a', reason: 'completed', text: 'Bought AAPL.', usage: { inputTokens: 96, outputTokens: 32 } },
      ]);
      expect(of('b', 'run-end')).toEqual([
        { type: 'run-end', runId: 'b', reason: 'terminated', text: failures, usage: { inputTokens: 32, outputTokens: 16 }, terminationReason: failures },
      ]);
      expect(of('c', 'run-end')).toEqual([
        { type: 'run-end', runId: 'c', reason: 'completed', text: 'Bought AAPL.', usage: { inputTokens: 0, outputTokens: 0 } },
      ]);
      expect(of('d', 'run-end')).toEqual([
        { type: 'run-end', runId: 'd', reason: 'terminated', text: circuit, usage: { inputTokens: 32, outputTokens: 16 }, terminationReason: circuit },
      ]);

      // What the model was sent: guidance for every call; the trading skill only in run a, from its
      // second call on (c never reached the model: 3 + 2 + 2 calls).
      const first = 'ITERATION GUIDANCE: This is your first turn. Identify what tools you need and call them to gather information.';
      const after = (k: number) => `ITERATION GUIDANCE: You have ${k} tool result(s). Analyze the data and synthesize your response.`;
      const skill = 'Confirm the symbol before buying.';
      expect(model.requests.map((r) => [textOf(r.messages[0]), r.instructions, r.tools.map((t) => t.name).join(',')])).toEqual([
        ['trade', `You are a broker.\n\n${first}`, 'flaky,lookup,activate_skill'],
        ['fetch', `You are a broker.\n\n${first}`, 'flaky,lookup,activate_skill'],
        ['fetch', `You are a broker.\n\n${after(1)}`, 'flaky,lookup,activate_skill'],
        ['trade', `You are a broker.\n\n${after(1)}\n\n${skill}`, 'flaky,lookup,activate_skill,buy_stock'],
        ['trade', `You are a broker.\n\n${after(2)}\n\n${skill}`, 'flaky,lookup,activate_skill,buy_stock'],
        ['loop', `You are a broker.\n\n${first}`, 'flaky,lookup,activate_skill'],
        ['loop', `You are a broker.\n\n${after(1)}`, 'flaky,lookup,activate_skill'],
      ]);
      expect(bought).toEqual(['AAPL', 'AAPL']);

      // Logging, on the scheduler's clock, per run.
      expect(logLines).toEqual(
        expect.arrayContaining([
          'Iteration 0 completed in 40ms (run a) - tool calls: 1, final: false',
          'Iteration 1 completed in 140ms (run a) - tool calls: 1, final: false',
          'Iteration 2 completed in 130ms (run a) - tool calls: 0, final: true',
          'Iteration 1 completed in 28ms (run b) - tool calls: 1, final: true',
          'Iteration 0 completed in 0ms (run c) - tool calls: 1, final: false',
          'Iteration 1 completed in 20ms (run d) - tool calls: 1, final: true',
        ]),
      );
      expect(logLines.filter((l) => l.includes('starting'))).toHaveLength(3 + 2 + 3 + 2);
    });
  });

  it('a denial and a cancellation while waiting, at the same time', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(() => {
      const { model, bought, seen, start, of } = setup(testScheduler);
      start('a', 'trade', { permission: false });
      const b = start('b', 'trade');
      testScheduler.schedule(() => b.cancel(), 120);
      testScheduler.flush();
      expect(seen.a).toEqual([
        '0 run-start',
        '0 agent-run-started',
        '0 iteration-start',
        '40 tool-call:activate_skill',
        '40 tool-result:activate_skill',
        '40 cost-recorded',
        '40 skill-activated',
        '40 iteration-end',
        '40 iteration-start',
        '80 tool-call:buy_stock',
        '80 permission-request',
        '180 tool-result:buy_stock', // denied after 100 ms
        '180 cost-recorded',
        '180 iteration-end',
        '180 iteration-start',
        '180 continuation-request',
        '290 text-delta:Bought AAPL.',
        '310 cost-recorded',
        '310 iteration-end',
        '310 agent-run-completed',
        '310 run-end:completed',
      ]);
      expect(of('a', 'tool-result')[1]).toMatchObject({ name: 'buy_stock', result: "Permission denied for 'buy_stock': denied by user", isError: true });
      // b waited for its permission when it was cancelled: nothing else of it ran.
      expect(seen.b).toEqual([
        '0 run-start',
        '0 agent-run-started',
        '0 iteration-start',
        '40 tool-call:activate_skill',
        '40 tool-result:activate_skill',
        '40 cost-recorded',
        '40 skill-activated',
        '40 iteration-end',
        '40 iteration-start',
        '80 tool-call:buy_stock',
        '80 permission-request',
        '120 request-expired:cancelled',
        '120 run-end:cancelled',
      ]);
      expect(of('b', 'request-expired')).toEqual([
        { type: 'request-expired', runId: 'b', requestId: of('b', 'permission-request')[0].requestId, reason: 'cancelled' },
      ]);
      expect(bought).toEqual([]);
      expect(model.calls).toBe(2 + 3);
    });
  });
});

describe('options set to null', () => {
  const model = scriptedModel(['{"tools":[]}']);
  it.each([
    ['toolCallLimit', () => toolCallLimit({ runLimit: 1, exitBehavior: null as never })],
    ['modelCallLimit', () => modelCallLimit({ runLimit: 1, exitBehavior: null as never })],
    ['contextEditing', () => contextEditing({ keep: null as never })],
    ['summarization', () => summarization({ model, trigger: { messages: 5 }, keep: null as never })],
    ['todoList', () => todoList({ systemPrompt: null as never })],
    ['toolSelector', () => toolSelector({ model, alwaysInclude: null as never })],
  ])('%s refuses one, naming it, instead of taking the default in silence', (name, make) => {
    expect(make).toThrow(new RegExp(`^${name}: \\w+ must not be null \\(leave it out for the default\\)$`));
  });
});
