import { Observable, Subject, Subscriber, Subscription, UnsubscriptionError, type MonoTypeOperatorFunction } from 'rxjs';
import { LinkedSubscriber } from '../../src/internal/linkedSubscriber';

/** A pass-through operator built on LinkedSubscriber, as the built-in model wrappers are. */
class Forward<T> extends LinkedSubscriber<T> {
  override next(value: T): void {
    this.destination.next(value);
  }
}
const forward =
  <T>(): MonoTypeOperatorFunction<T> =>
  (source) =>
    new Observable<T>((subscriber) => {
      source.subscribe(new Forward(subscriber));
    });

/** rxjs's finalizer list of a Subscription (internal; what LinkedSubscriber keeps its first teardown out of). */
const finalizersOf = (s: Subscription): unknown[] | null => (s as unknown as { _finalizers: unknown[] | null })._finalizers;

describe('LinkedSubscriber', () => {
  it('forwards values, errors and completion like a Subscriber, through a chain of them', () => {
    const source = new Subject<number>();
    const seen: string[] = [];
    source.pipe(forward(), forward(), forward()).subscribe({
      next: (v) => seen.push(`next ${v}`),
      complete: () => seen.push('complete'),
    });
    source.next(1);
    source.next(2);
    source.complete();
    expect(seen).toEqual(['next 1', 'next 2', 'complete']);

    const failing = new Subject<number>();
    const errors: unknown[] = [];
    failing.pipe(forward(), forward()).subscribe({ error: (e) => errors.push(e) });
    failing.error(new Error('x'));
    expect(errors).toEqual([new Error('x')]);
  });

  it('unsubscribing downstream tears the chain down to the source', () => {
    let tornDown = 0;
    const source = new Observable<number>(() => () => tornDown++);
    const subscription = source.pipe(forward(), forward()).subscribe();
    expect(tornDown).toBe(0);
    subscription.unsubscribe();
    expect(tornDown).toBe(1);
  });

  it('keeps its first teardown in a field, not in rxjs finalizer array, and runs it once on unsubscribe', () => {
    const subscriber = new Forward<number>();
    let ran = 0;
    subscriber.add(() => ran++);
    expect(finalizersOf(subscriber)).toBeNull();
    subscriber.unsubscribe();
    subscriber.unsubscribe();
    expect(ran).toBe(1);
  });

  it('runs every teardown in the order they were added, as rxjs does', () => {
    const order = (subscriber: Subscriber<number>) => {
      const ran: string[] = [];
      subscriber.add(() => ran.push('first'));
      subscriber.add(() => ran.push('second'));
      subscriber.add(new Subscription(() => ran.push('third')));
      subscriber.remove(subscriber); // no-op
      subscriber.unsubscribe();
      return ran;
    };
    expect(order(new Forward<number>())).toEqual(order(new Subscriber<number>()));
    expect(order(new Forward<number>())).toEqual(['first', 'second', 'third']);
  });

  it('keeps the order when the linked teardown was removed and others come after', () => {
    const ran: string[] = [];
    const subscriber = new Forward<number>();
    const first = () => ran.push('first');
    subscriber.add(first);
    subscriber.add(() => ran.push('second'));
    subscriber.remove(first);
    subscriber.add(() => ran.push('third'));
    subscriber.unsubscribe();
    expect(ran).toEqual(['second', 'third']);
  });

  it('holds a Subscription added twice once: one remove() detaches it', () => {
    const afterAddTwiceRemoveOnce = (parent: Subscriber<unknown>) => {
      const child = new Subscription();
      parent.add(child);
      parent.add(child);
      parent.remove(child);
      parent.unsubscribe();
      return child.closed;
    };
    expect(afterAddTwiceRemoveOnce(new Subscriber())).toBe(false);
    expect(afterAddTwiceRemoveOnce(new Forward())).toBe(false);
  });

  it('subscribed to `new Observable((s) => source.subscribe(new X(s)))` it still needs no finalizer array', () => {
    // X is added to s twice: by Subscriber's constructor and as the teardown the function returns.
    const source = new Subject<number>();
    const wrapped = new Observable<number>((subscriber) => source.subscribe(new Forward(subscriber)));
    const sink = new Forward<number>();
    wrapped.subscribe(sink);
    expect(finalizersOf(sink)).toBeNull();
    sink.unsubscribe();
    expect(source.observed).toBe(false);
  });

  it('remove() forgets the linked teardown, like rxjs forgets a removed one', () => {
    const ran: string[] = [];
    const first = () => ran.push('first');
    const second = () => ran.push('second');
    const subscriber = new Forward<number>();
    subscriber.add(first);
    subscriber.add(second);
    subscriber.remove(first);
    subscriber.remove(second);
    subscriber.unsubscribe();
    expect(ran).toEqual([]);
  });

  it('runs a teardown added after it closed at once, and ignores a closed Subscription, itself and nothing', () => {
    const subscriber = new Forward<number>();
    const closed = new Subscription();
    closed.unsubscribe();
    subscriber.add(closed);
    subscriber.add(subscriber);
    subscriber.add(undefined);
    let ran = 0;
    subscriber.add(() => ran++);
    expect(finalizersOf(subscriber)).toBeNull(); // none of those took the field
    expect(ran).toBe(0);
    subscriber.unsubscribe();
    expect(ran).toBe(1);
    subscriber.add(() => ran++);
    expect(ran).toBe(2);
  });

  it('a throwing teardown surfaces as rxjs UnsubscriptionError after the subscriber closed', () => {
    const subscriber = new Forward<number>();
    subscriber.add(() => {
      throw new Error('teardown failed');
    });
    expect(() => subscriber.unsubscribe()).toThrow(UnsubscriptionError);
    expect(subscriber.closed).toBe(true);
  });

  it('gathers the errors of every failing teardown, in order, as rxjs does', () => {
    const errorsOf = (subscriber: Subscriber<unknown>): unknown[] => {
      subscriber.add(() => {
        throw new Error('first');
      });
      subscriber.add(() => {
        throw new Error('second');
      });
      try {
        subscriber.unsubscribe();
      } catch (error) {
        return (error as UnsubscriptionError).errors;
      }
      return [];
    };
    expect(errorsOf(new Subscriber())).toEqual([new Error('first'), new Error('second')]);
    expect(errorsOf(new Forward())).toEqual([new Error('first'), new Error('second')]);
  });
});
