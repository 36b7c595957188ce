// Processes of a durable run in virtual time: each subscribes to its run (a new run, a resume…)
// at `at` ms and, if `stopAt` is given, unsubscribes then, as a process that dies leaves the run
// (journaled so far, lease let go). Call it inside `scheduler.run()`.
import type { Observable, SchedulerLike } from 'rxjs';
import type { AgentEvent } from '../../src/index';

export interface RunProcess {
  /** The run this process subscribes to: `agent.run(…)`, `agent.resume(runId)`… */
  readonly start: () => Observable<AgentEvent>;
  /** When it starts, in virtual ms (default 0). */
  readonly at?: number;
  /** When it stops, in virtual ms (default: it runs to the run's end). */
  readonly stopAt?: number;
}

/** Schedules `processes`; answers the events each receives (filled as the scheduler runs). */
export function runProcesses(scheduler: SchedulerLike, processes: readonly RunProcess[]): AgentEvent[][] {
  return processes.map(({ start, at = 0, stopAt }) => {
    const events: AgentEvent[] = [];
    scheduler.schedule(() => {
      const subscription = start().subscribe((event) => events.push(event));
      if (stopAt !== undefined) scheduler.schedule(() => subscription.unsubscribe(), stopAt - at);
    }, at);
    return events;
  });
}
