import { filter, map } from 'rxjs';
import type { AgentMiddleware } from '../../src/index';
import { loadFiveOperators } from '../../bench/lib/operators';
import { s1Agent } from '../../bench/workloads/s1';
import { s2Run } from '../../bench/workloads/s2';

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
});
