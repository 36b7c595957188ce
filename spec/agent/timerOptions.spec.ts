import { TestScheduler } from 'rxjs/testing';
import { createAgent, memoryStore, type AgentEvent, type AgentStore } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';

// setTimeout runs a delay above 2^31-1 ms at once (Node: TimeoutOverflowWarning, then every 1 ms):
// a timer option past it is refused, naming the option and the maximum.
const MAX = 2 ** 31 - 1;

describe("createAgent's 'leaseMs' (renewed every third of it, on a timer)", () => {
  it.each([1e10, MAX + 1, Infinity, NaN, 0, 0.5, -1, '30000'])('refuses %p with a TypeError naming the option and the range', (leaseMs) => {
    expect(() => createAgent({ model: scriptedModel([]), store: memoryStore(), leaseMs: leaseMs as number })).toThrow(
      new TypeError(
        `createAgent: 'leaseMs' must be a number of ms from 1 to 2147483647, got ${typeof leaseMs === 'string' ? `"${leaseMs}"` : String(leaseMs)}`,
      ),
    );
  });

  it("takes setTimeout's longest delay: the lease is renewed every third of it, not every ms", () => {
    const scheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    const inner = memoryStore({ scheduler });
    const renewals: number[] = [];
    const store: AgentStore = Object.assign(Object.create(inner) as AgentStore, {
      renewLease: (runId: string, owner: string, ttlMs: number) => {
        renewals.push(scheduler.now());
        return inner.renewLease(runId, owner, ttlMs);
      },
    });
    const agent = createAgent({ model: scriptedModel([{ text: 'slow', delay: 1000 }], { scheduler }), store, scheduler, leaseMs: MAX });
    const events: AgentEvent[] = [];
    scheduler.run(() => {
      agent.run('hi').subscribe((e) => events.push(e));
    });
    expect(events.at(-1)).toEqual(expect.objectContaining({ type: 'run-end', reason: 'completed' }));
    expect(renewals).toEqual([]);
  });
});
