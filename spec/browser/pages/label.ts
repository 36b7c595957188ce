import type { AgentEvent } from 'rx-agent';

/** An event as one line, as rx-agent/testing's `eventLabel` writes it (that entry needs Node). */
export function label(event: AgentEvent): string {
  switch (event.type) {
    case 'text-delta':
      return `text-delta:${event.text}`;
    case 'tool-call':
    case 'tool-result':
      return `${event.type}:${event.name}`;
    case 'run-end':
      return `run-end:${event.reason}`;
    case 'pii-detected':
      return `pii-detected:${event.piiType}`;
    default:
      return event.type;
  }
}
