// The fleet example, small: three instances of examples/fleetServer.ts as real processes on one
// Redis (runs in Redis, then in PostgreSQL), a few conversations of three turns sent to random
// instances (two cancel their last turn), one instance killed with SIGKILL halfway and started
// again. Nothing lost, nothing run twice, every history valid. Real BullMQ, real stores, real HTTP.
import { runFleet, type FleetOptions } from '../../bench/fleet';

/** Short, so that the killed instance's jobs stall and their leases lapse within seconds; a slow booking, to be killed in. */
const fast: Omit<FleetOptions, 'store'> = { conversations: 6, turns: 3, cancels: 2, killAt: 0.5, leaseMs: 2_000, lockMs: 2_000, stalledMs: 1_000, toolMs: 300 };

describe.each(['redis', 'postgres'] as const)('three fleet servers on %s', (store) => {
  it('drive conversations through random instances (two cancel their last turn) while one is killed and restarted: no answer lost, no booking twice, valid histories', async () => {
    const report = await runFleet({ store, ...fast });
    expect(report.problems).toEqual([]);
    expect(report.killed).toBe(true);
    expect(report.runsHandedOver).toBeGreaterThan(0); // the killed instance's runs went on elsewhere
    expect(report).toMatchObject({ runsCompleted: 16, runsCancelled: 2, answersLost: 0, toolRunsDuplicated: 0, invalidHistories: 0 });
    expect(report.ttftP50Ms).toBeGreaterThan(0);
    // Every instance ran runs (the restarted one counts its two processes).
    expect(report.runsPerSecondPerInstance.filter((n) => n > 0).length).toBeGreaterThanOrEqual(2);
  }, 60_000);
});
