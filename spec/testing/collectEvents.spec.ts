import { Observable, of, throwError } from 'rxjs';
import type { AgentEvent } from '../../src/index';
import { collectEvents } from '../../src/testing/index';

describe('collectEvents', () => {
  it('returns the events of a run that completes at once', () => {
    const events: AgentEvent[] = [{ type: 'run-start', runId: 'r' }];
    expect(collectEvents(of(...events))).toEqual(events);
  });

  it('throws the stream’s own error', () => {
    expect(() => collectEvents(throwError(() => new Error('boom')))).toThrow('boom');
  });

  it('unsubscribes a run that did not complete at once before it throws', () => {
    let tornDown = false;
    const pending = new Observable<AgentEvent>(() => () => (tornDown = true));
    expect(() => collectEvents(pending)).toThrow(/did not complete synchronously/);
    expect(tornDown).toBe(true);
  });
});
