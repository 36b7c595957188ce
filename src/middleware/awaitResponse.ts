import { Observable, Subscriber, type SchedulerAction, type SchedulerLike, type Subscription } from 'rxjs';
import type { AgentResponse, EmittedEvent } from '../events/types';
import { LinkedSubscriber } from '../internal/linkedSubscriber';
import { ownField } from '../internal/ownField';
import type { RunScope } from './runScope';
import { checkTimeoutMs } from '../internal/timers';

/** Options of a request to a person (or any other responder). */
export interface RequestOptions<D> {
  /** How long to wait, in ms, at most 2^31-1 (default and `Infinity`: no limit). */
  timeout?: number;
  /** What the request yields when it times out: the safe default (default `undefined`). */
  onTimeout?: D;
  /** Runs the timeout (default: the run's scheduler). */
  scheduler?: SchedulerLike;
}

/**
 * Emits a request event and waits for the response with the same `requestId`. The response
 * stream is subscribed before the event is emitted, so an answer given synchronously in
 * reaction to the event is not lost. On timeout it emits `request-expired` (reason `timeout`)
 * and yields `onTimeout`. When the run is cancelled, the run itself expires every open request
 * (reason `cancelled`) before `run-end`; so does a wait its asker leaves while the run goes on
 * (`race` with a timer, `takeUntil`). A waiting request is one small object and one timer.
 *
 * @example
 * awaitResponse(run, { type: 'permission-request', requestId, callId, toolName, args }, { timeout: 60000, onTimeout: undefined })
 */
export function awaitResponse<D>(run: RunScope, event: EmittedEvent & { requestId: string }, options: RequestOptions<D> = {}): Observable<AgentResponse | D> {
  return new Observable<AgentResponse | D>((subscriber) => {
    if (run.requests.isOpen(event.requestId)) {
      // Two waits on one id: an answer could settle only one of them.
      subscriber.error(new Error(`request '${event.requestId}' is already open`));
      return;
    }
    let { timeout } = options;
    try {
      if (timeout !== undefined) checkTimeoutMs('request', "'timeout'", timeout, true);
    } catch (error) {
      subscriber.error(error);
      return;
    }
    const journal = run.journal;
    // A journaled run keeps the request's absolute deadline: asked again after a resume, it waits for what is left.
    if (journal) timeout = journal.opened(event.requestId, event.type, timeout);
    const callId = ownField(event, 'callId');
    const pending = new PendingRequest(run, event.requestId, typeof callId === 'string' ? callId : undefined, subscriber, options);
    // Open before the responses are subscribed: a stream that replays an answer at once (a
    // ReplaySubject, ids known in advance) answers the request then, and there is nothing to ask.
    // Held first, so that whatever ends the wait during subscribe (that answer, responses that had
    // failed already, a subscribe that throws) tears it down, which closes the id.
    run.requests.add(event.requestId);
    subscriber.add(pending);
    run.responses$.subscribe(pending);
    if (subscriber.closed) return;
    pending.asked = true;
    run.emit(event);
    // After the event: a synchronous scheduler (or timeout 0 on one) then expires a request that
    // was asked, and an answer given during the emit leaves nothing to time.
    if (timeout !== undefined && timeout !== Infinity && run.requests.isOpen(event.requestId)) {
      // A deadline that passed while the run was not running: the safe default now, as it would have been then.
      if (journal && timeout === 0) return pending.expire();
      pending.timer = (options.scheduler ?? run.scheduler).schedule(expire, timeout, pending as PendingRequest<unknown>);
    }
    if (journal && !subscriber.closed && run.requests.isOpen(event.requestId)) journal.waiting(event.requestId);
  });
}

/** One waiting request: it listens to the run's responses (as a Subscriber of its own) and holds its timer. */
class PendingRequest<D> extends LinkedSubscriber<AgentResponse> {
  timer: Subscription | undefined;
  /** Its event is out: a consumer may be showing it. */
  asked = false;
  private settled = false;

  constructor(
    private readonly run: RunScope,
    private readonly requestId: string,
    /** The call the request is about, if any (its event may never be emitted: see awaitResponse). */
    private readonly callId: string | undefined,
    private readonly waiter: Subscriber<AgentResponse | D>,
    private readonly options: RequestOptions<D>,
  ) {
    super();
  }

  override next(response: AgentResponse): void {
    if (this.settled || ownField(response, 'requestId') !== this.requestId || !this.run.requests.settle(this.requestId)) return;
    this.settled = true;
    this.run.responded(response, this.callId);
    this.run.journal?.answered(this.requestId, response);
    this.waiter.next(response);
    this.waiter.complete();
  }

  override error(error: unknown): void {
    this.waiter.error(error);
  }

  override complete(): void {
    // The responses ending does not answer the request: it keeps waiting for its timeout.
  }

  /** The timeout: say so in `request-expired`, then yield the safe default. */
  expire(): void {
    if (this.settled) return;
    this.settled = true;
    this.run.requests.settle(this.requestId);
    this.expired('timeout');
    // Without `onTimeout`, `undefined`, as the type says: a hook that maps the answer still gets its one value.
    this.waiter.next(this.options.onTimeout as D);
    this.waiter.complete();
  }

  override unsubscribe(): void {
    if (this.closed) return;
    this.timer?.unsubscribe();
    // A cancelled run expires its open requests itself, so it can say so in an event.
    const left = !this.settled && !this.run.isCancelling();
    if (left) {
      this.settled = true;
      this.run.requests.settle(this.requestId);
    }
    super.unsubscribe();
    // The hook that asked stopped waiting (a race with a timer, a takeUntil) while the run goes
    // on: a UI showing the request, and the journal, learn that nobody waits for the answer.
    if (left && this.asked && !this.run.isStopping()) this.expired('cancelled');
  }

  /** Says that nobody waits for the answer any more, and has a journal store it at once (no process takes an answer then). */
  private expired(reason: 'timeout' | 'cancelled'): void {
    this.run.emit({ type: 'request-expired', requestId: this.requestId, reason });
    this.run.journal?.expired(this.requestId);
  }
}

function expire(this: SchedulerAction<PendingRequest<unknown>>, pending?: PendingRequest<unknown>): void {
  pending?.expire();
}
