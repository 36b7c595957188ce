import { EMPTY, Observable, of, timeout } from 'rxjs';
import type { AgentResponse, EmittedEvent } from './types';
import type { RunScope } from '../middleware/runScope';

/** Options of a request to a person (or any other responder). */
export interface RequestOptions<D> {
  /** How long to wait, in ms on the run's scheduler; default: no limit. */
  timeout?: number;
  /** What the request yields when it times out: the safe default. */
  onTimeout?: D;
}

/**
 * Emits a request event and waits for the response with the same `requestId`. The response
 * stream is subscribed before the event is emitted, so an answer given synchronously in
 * reaction to the event is not lost. On timeout it emits `request-expired` (reason `timeout`)
 * and yields `onTimeout`. When the run is cancelled, the run itself expires every open request
 * (reason `cancelled`) before `run-end`.
 *
 * @example
 * awaitResponse(run, { type: 'permission-request', requestId, callId, toolName, args }, { timeout: 60000, onTimeout: undefined })
 */
export function awaitResponse<D>(
  run: RunScope,
  event: EmittedEvent & { requestId: string },
  options: RequestOptions<D> = {},
): Observable<AgentResponse | D> {
  return new Observable<AgentResponse | D>((subscriber) => {
    const { requestId } = event;
    let settled = false;
    const answer$ = new Observable<AgentResponse>((inner) =>
      run.responses$.subscribe({
        next: (response) => {
          if (response.requestId === requestId && !settled && run.requests.settle(requestId)) {
            settled = true;
            inner.next(response);
            inner.complete();
          }
        },
        error: (error) => inner.error(error),
      }),
    );
    const expire = (): Observable<D> => {
      settled = true;
      run.requests.settle(requestId);
      run.emit({ type: 'request-expired', requestId, reason: 'timeout' });
      return 'onTimeout' in options ? of(options.onTimeout as D) : EMPTY;
    };
    const timed$ =
      options.timeout === undefined || options.timeout === Infinity
        ? answer$
        : answer$.pipe(timeout({ first: options.timeout, with: expire, scheduler: run.scheduler }));
    const subscription = timed$.subscribe(subscriber);
    run.requests.add(requestId);
    run.emit(event);
    return () => {
      subscription.unsubscribe();
      // A cancelled run expires its open requests itself, so it can say so in an event.
      if (!settled && !run.isCancelling()) run.requests.settle(requestId);
    };
  });
}
