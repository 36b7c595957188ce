import { filter, lastValueFrom, map, toArray } from 'rxjs';
import { createAgent, defineTool, type AgentMiddleware, type Message } from '../../src/index';
import { loadFiveOperators } from '../../bench/lib/operators';
import { rxjsLoop } from '../../bench/lib/rxjsLoop';
import { s2Model } from '../../bench/lib/fakeModel';
import { s1Agent, s1RxjsPipeline } from '../../bench/workloads/s1';
import { rxjsLoopRun, s2Run } from '../../bench/workloads/s2';
import { z } from 'zod';

// The bench's workloads at small sizes: they pass with the five operators and fail loudly when the
// agent gets something wrong (the issue asks every workload to check its own result).
describe('bench workloads', () => {
  it('S1 and S2 pass with the five operators', async () => {
    const five = loadFiveOperators().map((o) => o.middleware);
    await expect(s1Agent(five, 1000)()).resolves.toBeUndefined();
    await expect(s2Run(five, 20)()).resolves.toBeUndefined();
  });

  it('S1 fails when a delta goes missing', async () => {
    const dropOne: AgentMiddleware = {
      name: 'dropOne',
      wrapModel: () => (updates) => {
        let seen = 0;
        return updates.pipe(filter((u) => u.type !== 'text-delta' || ++seen !== 10));
      },
    };
    await expect(s1Agent([dropOne], 1000)()).rejects.toThrow(/CHECK FAILED: S1 final text differs from the 1000 deltas sent/);
  });

  it('S1 fails when a delta is rewritten (same count, same length)', async () => {
    const rewrite: AgentMiddleware = {
      name: 'rewrite',
      wrapModel: () => (updates) => {
        let seen = 0;
        return updates.pipe(map((u) => (u.type === 'text-delta' && ++seen > 2 ? { ...u, text: 'XXXX' } : u)));
      },
    };
    await expect(s1Agent([rewrite], 1000)()).rejects.toThrow(/CHECK FAILED: S1 final text differs from the 1000 deltas sent/);
  });

  it('S1 fails when the usage or the cost event goes missing', async () => {
    const noUsage: AgentMiddleware = { name: 'noUsage', wrapModel: () => (updates) => updates.pipe(filter((u) => u.type !== 'usage')) };
    await expect(s1Agent([noUsage], 1000)()).rejects.toThrow(/CHECK FAILED: S1 usage .*expected 1000 output tokens/);
    const five = loadFiveOperators().map((o) => o.middleware);
    const costless: AgentMiddleware = { ...five[4], name: 'costBudget', afterIteration: undefined };
    await expect(s1Agent([...five.slice(0, 4), costless], 1000)()).rejects.toThrow(/CHECK FAILED: S1: 0 cost-recorded events, expected 1/);
  });

  it('S2 fails when a tool result is wrong', async () => {
    const tamper: AgentMiddleware = { name: 'tamper', afterFunction: map((ctx) => (ctx.iteration === 3 ? ctx.with({ result: { i: -1 } }) : ctx)) };
    await expect(s2Run([tamper], 10)()).rejects.toThrow(/CHECK FAILED: S2 K=10 wrong tool result: iteration 3/);
  });

  it("S2 keeps the model's reading time of every run", async () => {
    const run = s2Run([], 20);
    await run();
    await run();
    expect(run.readingMs).toHaveLength(2);
    for (const ms of run.readingMs) expect(ms).toBeGreaterThan(0);
  });

  it('the floors pass the same checks: the hand-written rxjs loop (S2) and the minimal pipeline (S1)', async () => {
    const loop = rxjsLoopRun(20);
    await expect(loop()).resolves.toBeUndefined();
    expect(loop.readingMs).toHaveLength(1);
    await expect(s1RxjsPipeline(1000)()).resolves.toBeUndefined();
  });

  it("the rxjs loop emits what an agent run emits per iteration, and its history reads as the agent's", async () => {
    const model = s2Model(2);
    const tool = { spec: { name: 'echo', description: '', parameters: {} }, schema: z.object({ i: z.number() }), execute: (args: unknown) => args };
    const events: string[] = [];
    await new Promise<void>((resolve, reject) =>
      rxjsLoop(model, tool, 'q', 3).subscribe({ next: (e) => events.push(e.type), error: reject, complete: resolve }),
    );
    const iteration = ['iteration-start', 'tool-input-start', 'tool-input-delta', 'tool-call', 'tool-result', 'cost-recorded', 'iteration-end'];
    expect(events).toEqual(['run-start', ...iteration, ...iteration, 'iteration-start', 'text-delta', 'cost-recorded', 'iteration-end', 'run-end']);
    expect(model.last()?.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant', 'tool', 'assistant']);

    // The same run through the agent with the five operators: the same events, the same history.
    const agentModel = s2Model(2);
    const echo = defineTool({ name: 'echo', description: '', parameters: z.object({ i: z.number() }), execute: (args) => args });
    const agent = createAgent({ model: agentModel, tools: [echo], middleware: loadFiveOperators().map((o) => o.middleware), maxIterations: 3 });
    const agentEvents = await lastValueFrom(
      agent.run('q').pipe(
        map((e) => e.type),
        toArray(),
      ),
    );
    expect(events).toEqual(agentEvents);
    // The agent's request keeps the messages of its call; the loop's is its live history, which
    // has the final answer appended since: compare what the last call saw.
    const shape = (messages: readonly Message[]) => messages.map((m) => [m.role, m.content.map((p) => p.type)]);
    const seenByAgent = agentModel.last()?.messages ?? [];
    expect(seenByAgent).toHaveLength(5);
    expect(shape(model.last()?.messages.slice(0, 5) ?? [])).toEqual(shape(seenByAgent));
  });
});
