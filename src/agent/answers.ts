import { Observable, type Subscriber, type TeardownLogic } from 'rxjs';
import type { AgentResponse } from '../events/types';

/**
 * The answers given with `start()`'s `respond()`, for the run's waits. A `Subject` as the waits
 * use one (`next` to every current subscriber), kept by every waiting started run: without the
 * Subscription and closure a `Subject` makes per subscriber, and with its subscribers in an array
 * of their number (a `Subject` pushes, reserving 17 slots).
 *
 * @example
 * const answers = new Answers();
 * answers.subscribe(pending); // a wait
 * answers.next({ type: 'permission-response', requestId, approved: true });
 */
export class Answers extends Observable<AgentResponse> {
  /** Replaced, never changed in place: a delivery loops over the array it started with. */
  private observers: readonly Subscriber<AgentResponse>[] = [];

  next(response: AgentResponse): void {
    const { observers } = this;
    for (let i = 0; i < observers.length; i++) observers[i].next(response);
  }

  /** @internal rxjs 7's subscribe calls `_subscribe`. */
  protected _subscribe(subscriber: Subscriber<AgentResponse>): TeardownLogic {
    const { observers } = this;
    this.observers = observers.length === 0 ? [subscriber] : observers.concat(subscriber);
    return new Leave(this, subscriber);
  }

  /** @internal {@link Leave}'s. */
  remove(subscriber: Subscriber<AgentResponse>): void {
    const { observers } = this;
    if (observers.length === 1 && observers[0] === subscriber) this.observers = [];
    else if (observers.includes(subscriber)) this.observers = observers.filter((observer) => observer !== subscriber);
  }
}

/** A subscriber's teardown: one small object rather than a Subscription, a closure and its context. */
class Leave {
  constructor(
    private readonly answers: Answers,
    private readonly subscriber: Subscriber<AgentResponse>,
  ) {}

  unsubscribe(): void {
    this.answers.remove(this.subscriber);
  }
}
