import { asyncScheduler, lastValueFrom, toArray, type SchedulerLike } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type EventOf } from '../../src';
import { permissions } from '../../operators';
import { SuspendedRuns, questionId } from '../../src/bindings/suspendedRuns';
import { scriptedModel } from '../../src/testing';

/** The asyncScheduler's timers, with a clock of its own that starts at 0 (as a virtual clock does). */
function clockScheduler(): SchedulerLike & { time: number } {
  const scheduler = Object.create(asyncScheduler) as SchedulerLike & { time: number };
  scheduler.time = 0;
  scheduler.now = () => scheduler.time;
  return scheduler;
}

/** An agent without a store whose model asks to delete a file, then answers; questions expire after a minute. */
function deletingAgent(scheduler: SchedulerLike) {
  const rm = defineTool({
    name: 'rm',
    description: 'Deletes a file',
    parameters: z.object({ path: z.string() }),
    needsApproval: true,
    execute: () => 'deleted',
  });
  const model = scriptedModel([{ toolCalls: [{ name: 'rm', args: { path: '/tmp/x' } }] }, 'Deleted.'], { loop: true });
  return createAgent({ model, tools: [rm], scheduler, middleware: [permissions({ timeout: 60_000 })] });
}

const settle = (events$: Parameters<typeof lastValueFrom<AgentEvent>>[0]) => lastValueFrom(events$.pipe(toArray()));

describe('SuspendedRuns', () => {
  it("reads question deadlines on the agent's scheduler's clock: a question with time left survives another run's start", async () => {
    const scheduler = clockScheduler();
    const agent = deletingAgent(scheduler);
    const runs = new SuspendedRuns(agent);
    const first = await settle(runs.start('Clean up /tmp', {}));
    const end = first.at(-1) as EventOf<'run-end'>;
    expect(end).toMatchObject({ reason: 'suspended', pendingRequests: [{ deadline: 60_000 }] });
    const request = first.find((e): e is EventOf<'permission-request'> => e.type === 'permission-request')!;

    scheduler.time = 59_999; // a millisecond left on the agent's clock, whatever Date.now() says
    await settle(runs.start('Something else', {}));
    await settle(new SuspendedRuns(agent).start('Something else', {})); // another over the same agent: same runs, same clock
    expect(await runs.agent.runs.get(end.runId)).toMatchObject({ status: 'suspended' });
    const rest = await settle(await runs.resume([{ id: questionId(end.runId, request.requestId), approved: true }]));
    expect(rest.find((e) => e.type === 'tool-result')).toMatchObject({ name: 'rm', result: 'deleted', isError: false });
  });

  it("cancels, at the next start, a suspended run whose questions expired on the agent's clock", async () => {
    const scheduler = clockScheduler();
    const runs = new SuspendedRuns(deletingAgent(scheduler));
    const end = (await settle(runs.start('Clean up /tmp', {}))).at(-1) as EventOf<'run-end'>;
    scheduler.time = 60_000;
    await settle(runs.start('Something else', {}));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await runs.agent.runs.get(end.runId)).toBeUndefined(); // cancelled: memoryStore keeps no finished journal
  });

  it('onlyWaiting leaves out answers the run took already (a UI sends back all it holds); without it, or with none left, they are refused', async () => {
    const rm = defineTool({ name: 'rm', description: 'Deletes', parameters: z.object({ path: z.string() }), needsApproval: true, execute: () => 'deleted' });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'rm', args: { path: '/a' }, callId: 'a' },
          { name: 'rm', args: { path: '/b' }, callId: 'b' },
        ],
      },
      'Deleted.',
    ]);
    const runs = new SuspendedRuns(createAgent({ model, tools: [rm], middleware: [permissions()] }));
    const askedOf = (events: AgentEvent[]) => events.find((e): e is EventOf<'permission-request'> => e.type === 'permission-request')!;
    const first = await settle(runs.start('Delete both', {}));
    const a = questionId(first[0].runId, askedOf(first).requestId);
    const second = await settle(await runs.resume([{ id: a, approved: true }]));
    const b = questionId(first[0].runId, askedOf(second).requestId);
    expect([second.at(-1)?.type, askedOf(second).callId]).toEqual(['run-end', 'b']);

    await expect(
      runs.resume([
        { id: a, approved: true },
        { id: b, approved: true },
      ]),
    ).rejects.toThrow(`No run waits for an answer to '${a}'`);
    await expect(runs.resume([{ id: a, approved: true }], { onlyWaiting: true })).rejects.toThrow(`No run waits for an answer to '${a}'`);
    const rest = await settle(
      await runs.resume(
        [
          { id: a, approved: true },
          { id: b, approved: false },
        ],
        { onlyWaiting: true },
      ),
    );
    expect(rest.filter((e) => e.type === 'tool-result').map((e) => [e.callId, e.isError])).toEqual([
      ['a', false],
      ['b', true],
    ]);
    expect(rest.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Deleted.' });
  });
});
