import { filter, type MonoTypeOperatorFunction } from 'rxjs';
import type { AgentEvent } from '../../src/index';

/**
 * Drops the `tool-input-start` / `tool-input-delta` events, for specs about something else whose
 * expected sequences predate them (the events themselves are checked in spec/agent/callModel.spec.ts).
 */
export function withoutToolInput(): MonoTypeOperatorFunction<AgentEvent> {
  return filter((e) => e.type !== 'tool-input-start' && e.type !== 'tool-input-delta');
}

/** The same filter over an array of events. */
export function dropToolInput(events: readonly AgentEvent[]): AgentEvent[] {
  return events.filter((e) => e.type !== 'tool-input-start' && e.type !== 'tool-input-delta');
}
