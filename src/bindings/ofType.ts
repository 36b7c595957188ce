import { filter, type OperatorFunction } from 'rxjs';
import type { AgentEvent, AgentEventType, EventOf } from '../events/types';

/**
 * Keeps the events of the given types, with the type narrowed.
 *
 * @throws TypeError when no type is given (the pipe would drop every event).
 *
 * @example
 * agent.run('Hi').pipe(ofType('text-delta')).subscribe(e => process.stdout.write(e.text));
 */
export function ofType<T extends AgentEventType>(...types: T[]): OperatorFunction<AgentEvent, EventOf<T>> {
  if (types.length === 0) throw new TypeError('ofType: give at least one event type');
  if (types.length === 1) {
    const only: string = types[0];
    return filter((event: AgentEvent) => event.type === only) as unknown as OperatorFunction<AgentEvent, EventOf<T>>;
  }
  const wanted = new Set<string>(types);
  return filter((event: AgentEvent) => wanted.has(event.type)) as unknown as OperatorFunction<AgentEvent, EventOf<T>>;
}
