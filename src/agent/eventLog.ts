import { Observable, type Observer, type Subscriber, type TeardownLogic } from 'rxjs';

/**
 * The events of a started run (`agent.start()`'s `events$`), replayed to every subscriber, early
 * or late, each seeing all of them in the order they happened. Unlike a `ReplaySubject`:
 * - a subscriber that joins late gets the past events before any new one, even when its own
 *   reaction to a past event (a cancel, an answer) causes new ones during the replay;
 * - an event caused by a subscriber's reaction reaches the other subscribers after the event it
 *   reacted to (rxjs Subjects deliver it at once, ahead of that event, to the subscribers after
 *   the reacting one);
 * - consecutive `text-delta` (or `reasoning-delta`) events of one iteration are kept as one: a
 *   late subscriber gets the text they streamed in one delta, so a long answer costs one event
 *   to keep, not one per delta (subscribers already there get every delta as it comes).
 *
 * @example
 * const log = new EventLog<AgentEvent>();
 * runAgent(agent, input).subscribe(log);
 * log.subscribe(render); // every event, from `run-start` on
 */
export class EventLog<T> extends Observable<T> implements Observer<T> {
  /** The past, for late subscribers: a run of text (or reasoning) deltas is kept as one {@link Coalesced}. */
  private readonly events: Array<T | Coalesced> = [];
  /** Replaced, never changed in place: a delivery loops over the array it started with. */
  private observers: readonly Subscriber<T>[] = [];
  /** How many events every current observer has had. */
  private delivered = 0;
  private delivering = false;
  private end: { readonly error: unknown; readonly failed: boolean } | undefined;

  next(value: T): void {
    if (this.end) return;
    const { events } = this;
    const last = events.length > 0 && this.delivered === events.length && !this.delivering ? events[events.length - 1] : undefined;
    if (last !== undefined && continues(last, value)) {
      // Handed out at once, kept as part of the run of deltas before it: one object per run of text.
      if (last instanceof Coalesced) last.text += (value as unknown as TextDelta).text;
      else events[events.length - 1] = new Coalesced(last as unknown as TextDelta, (value as unknown as TextDelta).text);
      this.delivering = true;
      try {
        const observers = this.observers;
        for (let i = 0; i < observers.length; i++) observers[i].next(value);
      } finally {
        this.delivering = false;
      }
      this.deliver(); // what the observers' reactions caused
      return;
    }
    events.push(value);
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
        const value = this.events[this.delivered++] as T; // not yet delivered: never coalesced
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
      const event = this.events[i];
      subscriber.next(event instanceof Coalesced ? (event.toEvent() as T) : event);
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

interface TextDelta {
  readonly type: 'text-delta' | 'reasoning-delta';
  readonly runId: string;
  readonly iteration: number;
  readonly text: string;
  readonly seq?: number;
}

/** A run of deltas kept as its first event and the text of them all. */
class Coalesced {
  text: string;

  constructor(
    readonly first: TextDelta,
    next: string,
  ) {
    this.text = first.text + next;
  }

  toEvent(): TextDelta {
    return { ...this.first, text: this.text };
  }
}

/**
 * `value` is a delta that continues `last` (a delta, or a run of them): same type, run and
 * iteration, and no other field (a journaled event's `seq`, a field of a middleware's own) that
 * merging would lose.
 */
function continues(last: unknown, value: unknown): boolean {
  const next = value as Partial<TextDelta> | null;
  const type = next?.type;
  if ((type !== 'text-delta' && type !== 'reasoning-delta') || typeof next!.text !== 'string') return false;
  const run = last instanceof Coalesced;
  const previous = run ? last.first : (last as Partial<TextDelta> | null);
  if (previous?.type !== type || typeof previous.text !== 'string' || previous.runId !== next!.runId || previous.iteration !== next!.iteration) return false;
  return plainDelta(next!) && (run || plainDelta(previous)); // a run's first delta was checked when it began
}

/** Only `type`, `runId`, `iteration` and `text`, as the runtime makes a delta. */
function plainDelta(event: object): boolean {
  let fields = 0;
  for (const key in event) {
    if (key !== 'type' && key !== 'runId' && key !== 'iteration' && key !== 'text') return false;
    fields++;
  }
  return fields === 4;
}
