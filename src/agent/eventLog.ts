import { Observable, type Observer, type Subscriber, type TeardownLogic } from 'rxjs';

/**
 * The events of a started run (`agent.start()`'s `events$`), replayed to every subscriber, early
 * or late, each seeing all of them in the order they happened. Unlike a `ReplaySubject`:
 * - a subscriber that joins late gets the past events before any new one, even when its own
 *   reaction to a past event (a cancel, an answer) causes new ones during the replay;
 * - an event caused by a subscriber's reaction reaches the other subscribers after the event it
 *   reacted to (rxjs Subjects deliver it at once, ahead of that event, to the subscribers after
 *   the reacting one).
 *
 * @example
 * const log = new EventLog<AgentEvent>();
 * runAgent(agent, input).subscribe(log);
 * log.subscribe(render); // every event, from `run-start` on
 */
export class EventLog<T> extends Observable<T> implements Observer<T> {
  private readonly events: T[] = [];
  /** Replaced, never changed in place: a delivery loops over the array it started with. */
  private observers: readonly Subscriber<T>[] = [];
  /** How many events every current observer has had. */
  private delivered = 0;
  private delivering = false;
  private end: { readonly error: unknown; readonly failed: boolean } | undefined;

  next(value: T): void {
    if (this.end) return;
    this.events.push(value);
    this.deliver();
  }

  error(error: unknown): void {
    if (this.end) return;
    this.end = { error, failed: true };
    this.deliver();
  }

  complete(): void {
    if (this.end) return;
    this.end = { error: undefined, failed: false };
    this.deliver();
  }

  /** Hands out the events not delivered yet, one at a time to every observer; then the end. */
  private deliver(): void {
    if (this.delivering) return; // a reaction's event: the loop below picks it up in turn
    this.delivering = true;
    try {
      while (this.delivered < this.events.length) {
        const value = this.events[this.delivered++];
        const observers = this.observers;
        for (let i = 0; i < observers.length; i++) observers[i].next(value);
      }
      const end = this.end;
      if (end && this.observers.length > 0) {
        const observers = this.observers;
        this.observers = [];
        for (const observer of observers) {
          if (end.failed) observer.error(end.error);
          else observer.complete();
        }
      }
    } finally {
      this.delivering = false;
    }
  }

  /** @internal rxjs 7's subscribe calls `_subscribe`. */
  protected _subscribe(subscriber: Subscriber<T>): TeardownLogic {
    // The past first; `delivered` grows while a reaction here causes new events, which follow in order.
    for (let i = 0; i < this.delivered; i++) {
      if (subscriber.closed) return;
      subscriber.next(this.events[i]);
    }
    if (subscriber.closed) return;
    const { end } = this;
    // Ended, and every event handed out: nothing left to wait for (also during the end's delivery).
    if (end && this.delivered === this.events.length) {
      if (end.failed) subscriber.error(end.error);
      else subscriber.complete();
      return;
    }
    this.observers = [...this.observers, subscriber];
    return () => {
      this.observers = this.observers.filter((observer) => observer !== subscriber);
    };
  }
}
