import { Observable, Subject, Subscription, UnsubscriptionError, type MonoTypeOperatorFunction } from 'rxjs';
import { LinkedSubscriber } from '../../src/index';

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
    const inner = new Subscription();
    subscriber.add(inner);
    expect(finalizersOf(subscriber)).toBeNull();
    subscriber.unsubscribe();
    subscriber.unsubscribe();
    expect(inner.closed).toBe(true);
  });

  it('adds further teardowns as rxjs does, and runs all of them', () => {
    const ran: string[] = [];
    const subscriber = new Forward<number>();
    subscriber.add(() => ran.push('first'));
    subscriber.add(() => ran.push('second'));
    subscriber.add(new Subscription(() => ran.push('third')));
    subscriber.unsubscribe();
    expect(ran.sort()).toEqual(['first', 'second', 'third']);
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
});
