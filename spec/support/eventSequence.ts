import type { AgentEvent } from '../../src/index';
import { eventLabel } from '../../src/testing/index';

/** What {@link eventSequence} found in a run's events. */
export interface EventSequence {
  /** Breaches of the order rules, as sentences. */
  readonly violations: string[];
  /** Every tool-call, by callId. */
  readonly calls: ReadonlyMap<string, Extract<AgentEvent, { type: 'tool-call' }>>;
  /** How many tool-results each callId got. */
  readonly results: ReadonlyMap<string, number>;
  /** The iteration still open at the end (no iteration-end), if any. */
  readonly open: number | undefined;
}

/**
 * Checks the order of a run's events: iterations start in turn from 0 and end before the next
 * starts; text, tool and retry events fall inside their own iteration; a tool-call comes once and
 * each tool-result after its call, under its name, at most once.
 */
export function eventSequence(events: readonly AgentEvent[]): EventSequence {
  const violations: string[] = [];
  const calls = new Map<string, Extract<AgentEvent, { type: 'tool-call' }>>();
  const results = new Map<string, number>();
  let open: number | undefined;
  let next = 0;
  for (const e of events) {
    if (e.type === 'iteration-start') {
      if (open !== undefined) violations.push(`iteration-start ${e.iteration} while iteration ${open} is open`);
      if (e.iteration !== next) violations.push(`iteration-start ${e.iteration}, expected ${next}`);
      open = e.iteration;
      next = e.iteration + 1;
    } else if (e.type === 'iteration-end') {
      if (open !== e.iteration) violations.push(`iteration-end ${e.iteration} while ${open ?? 'none'} is open`);
      open = undefined;
    } else if (e.type === 'tool-call' || e.type === 'tool-result' || e.type === 'text-delta' || e.type === 'model-retry') {
      if (e.iteration !== open) violations.push(`${eventLabel(e)} of iteration ${e.iteration} while ${open ?? 'none'} is open`);
    }
    if (e.type === 'tool-call') {
      if (calls.has(e.callId)) violations.push(`tool-call ${e.callId} emitted twice`);
      calls.set(e.callId, e);
    }
    if (e.type === 'tool-result') {
      const call = calls.get(e.callId);
      if (!call) violations.push(`tool-result ${e.callId} without a tool-call before it`);
      else if (call.name !== e.name) violations.push(`tool-result ${e.callId} names ${e.name}, its call ${call.name}`);
      results.set(e.callId, (results.get(e.callId) ?? 0) + 1);
    }
  }
  for (const [callId, n] of results) if (n > 1) violations.push(`${n} tool-results for ${callId}`);
  return { violations, calls, results, open };
}
