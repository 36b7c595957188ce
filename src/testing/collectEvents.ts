import type { Observable } from 'rxjs';
import type { AgentEvent, AgentEventType, EventOf } from '../events/types';

/**
 * Runs a run that completes synchronously (a scripted model without delays, plain tools) and
 * returns its events; throws if it did not complete at once (then use marbles or await it),
 * after unsubscribing it, and throws the stream's own error if it has one.
 *
 * @example
 * const events = collectEvents(agent.run('hi'));
 * expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
 */
export function collectEvents(events$: Observable<AgentEvent>): AgentEvent[] {
  const events: AgentEvent[] = [];
  let done = false;
  let failure: { error: unknown } | undefined;
  const subscription = events$.subscribe({ next: (e) => events.push(e), error: (error) => (failure = { error }), complete: () => (done = true) });
  if (failure) throw failure.error;
  if (!done) {
    subscription.unsubscribe(); // its timers and requests go with it
    throw new Error('collectEvents: the run did not complete synchronously (a delayed model, a Promise-returning tool, or a pending request?)');
  }
  return events;
}

/**
 * The events of one type, narrowed.
 *
 * @example
 * eventsOfType(events, 'tool-result').map(e => e.result);
 */
export function eventsOfType<T extends AgentEventType>(events: readonly AgentEvent[], type: T): EventOf<T>[] {
  return events.filter((e) => e.type === type) as unknown as EventOf<T>[];
}
