import { Observable, type SchedulerLike, type Subscription } from 'rxjs';
import type { AgentResponse, EmittedEvent } from './types';
import type { RunScope } from '../middleware/runScope';

/** Options of a request to a person (or any other responder). */
export interface RequestOptions<D> {
  /** How long to wait, in ms (default: no limit). */
  timeout?: number;
  /** What the request yields when it times out: the safe default. */
  onTimeout?: D;
  /** Runs the timeout (default: the run's scheduler). */
  scheduler?: SchedulerLike;
}

/**
 * Emits a request event and waits for the response with the same `requestId`. The response
 * stream is subscribed before the event is emitted, so an answer given synchronously in
 * reaction to the event is not lost. On timeout it emits `request-expired` (reason `timeout`)
 * and yields `onTimeout`. When the run is cancelled, the run itself expires every open request
 * (reason `cancelled`) before `run-end`. A waiting request holds one subscription and one timer.
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
    let timer: Subscription | undefined;
    const answers = run.responses$.subscribe({
      next: (response) => {
        if (settled || response.requestId !== requestId || !run.requests.settle(requestId)) return;
        settled = true;
        timer?.unsubscribe();
        subscriber.next(response);
        subscriber.complete();
      },
      error: (error) => subscriber.error(error),
    });
    const { timeout } = options;
    if (timeout !== undefined && timeout !== Infinity) {
      timer = (options.scheduler ?? run.scheduler).schedule(() => {
        if (settled) return;
        settled = true;
        answers.unsubscribe();
        run.requests.settle(requestId);
        run.emit({ type: 'request-expired', requestId, reason: 'timeout' });
        if ('onTimeout' in options) subscriber.next(options.onTimeout as D);
        subscriber.complete();
      }, timeout);
    }
    run.requests.add(requestId);
    run.emit(event);
    return () => {
      answers.unsubscribe();
      timer?.unsubscribe();
      // A cancelled run expires its open requests itself, so it can say so in an event.
      if (!settled && !run.isCancelling()) run.requests.settle(requestId);
    };
  });
}
