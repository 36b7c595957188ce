import { map, type OperatorFunction } from 'rxjs';
import type { AgentEvent } from '../events/types';

/**
 * A short label for an event, for marble diagrams and snapshot-like assertions:
 * `text-delta:Hello`, `tool-call:get_weather`, `tool-result:get_weather`, `run-end:completed`,
 * `error:model`, `output-delta:{"city":"Par"}` (the partial as JSON), other events by their type.
 *
 * @example
 * eventLabel({ type: 'run-end', runId: 'r', reason: 'completed', text: '', usage }); // 'run-end:completed'
 */
export function eventLabel(event: AgentEvent): string {
  switch (event.type) {
    case 'text-delta':
    case 'reasoning-delta':
      return `${event.type}:${event.text}`;
    case 'tool-call':
    case 'tool-result':
      return `${event.type}:${event.name}`;
    case 'run-end':
      return `run-end:${event.reason}`;
    case 'error':
      return `error:${event.source}`;
    case 'request-expired':
      return `request-expired:${event.reason}`;
    case 'output-delta':
      return `output-delta:${JSON.stringify(event.partial)}`;
    default:
      return event.type;
  }
}

/**
 * Maps a run's events to labels (see {@link eventLabel}), to keep marble expectations short.
 *
 * @example
 * expectObservable(agent.run('Hi').pipe(eventLabels())).toBe('(abcde|)', { a: 'run-start', b: 'iteration-start', c: 'text-delta:Hi', d: 'iteration-end', e: 'run-end:completed' });
 */
export function eventLabels(): OperatorFunction<AgentEvent, string> {
  return map(eventLabel);
}
