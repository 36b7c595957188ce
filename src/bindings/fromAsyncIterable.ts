import { Observable, Subscriber, noop } from 'rxjs';
import { keepShape } from '../internal/keepShape';
import { isPromiseLike } from '../internal/isPromiseLike';
import { ownGetter } from '../internal/ownGetter';
import { show } from '../internal/show';

/**
 * What a {@link fromAsyncIterable} factory receives, shaped like the `openai` SDK's request
 * options so it can be passed on as it is. `signal` is an own, enumerable getter: the
 * AbortController behind it is created on first read (so spreading the object, as SDKs do,
 * creates it too), and a factory that never reads it pays nothing for one.
 */
export interface SubscriptionOptions {
  /** Aborted when the subscriber unsubscribes before the iterable finished. */
  readonly signal: AbortSignal;
}

/** What {@link fromAsyncIterable} reads: an async iterable, or a factory called once per subscription. */
export type AsyncIterableSource<T> = AsyncIterable<T> | ((options: SubscriptionOptions) => AsyncIterable<T> | PromiseLike<AsyncIterable<T>>);

/**
 * A cold Observable over an async iterable, with a real teardown.
 *
 * Each subscription calls the factory (when given one) with `{ signal }`, and pulls values with
 * the iterator's `next()`, one at a time. Unsubscribing aborts the signal (so a pending read, e.g.
 * an HTTP body, is cancelled at once) and calls the iterator's `return()`. The signal's
 * `AbortController` exists only once the factory read `signal`: creating one costs more than a
 * short stream's whole pass through the agent, and a local model or a test double rarely needs
 * it. Anything that fails after the subscriber is gone (typically the abort itself) is swallowed:
 * nobody is listening any more. A source, or a factory's result, that is not an async iterable is
 * an Observable error that says what it got.
 *
 * Unlike rxjs `from(asyncIterable)`, which cannot stop while it waits for the next value, this
 * releases the underlying resource as soon as the subscriber unsubscribes.
 *
 * @example
 * const chunks$ = fromAsyncIterable(({ signal }) =>
 *   client.chat.completions.create({ model, messages, stream: true }, { signal }),
 * );
 * const sub = chunks$.subscribe(chunk => console.log(chunk));
 * sub.unsubscribe(); // aborts the HTTP request
 */
export function fromAsyncIterable<T>(source: AsyncIterableSource<T>): Observable<T> {
  return new Observable<T>((subscriber) => {
    const pull = new AsyncPull(source, subscriber);
    pull.start();
    return pull;
  });
}

/**
 * One subscription's reads: `next()`, then `.then` with two handlers made once, per value. This
 * is the per-delta path of every model stream; it measured about 15% faster per value than an
 * `async` function looping on `await iterator.next()` (and than `for await`).
 */
let pullKept = false;

class AsyncPull<T> {
  private readonly lazy: LazyAbort | undefined;
  private iterator: AsyncIterator<T> | undefined = undefined;
  /** Ended (done, failed) or torn down: nothing more to read or to return. */
  private finished = false;
  private readonly onResult = (result: IteratorResult<T>): void => {
    const subscriber = this.subscriber;
    if (subscriber.closed) return;
    try {
      if (result.done) {
        this.finished = true;
        subscriber.complete();
        return;
      }
      subscriber.next(result.value);
    } catch (error) {
      // The consumer threw: the stream errors, and its teardown still stops the source.
      if (!subscriber.closed) subscriber.error(error);
      return;
    }
    if (!subscriber.closed) this.pull();
  };
  private readonly onError = (error: unknown): void => this.fail(error);

  constructor(
    private readonly source: AsyncIterableSource<T>,
    private readonly subscriber: Subscriber<T>,
  ) {
    // Only a factory gets a signal (made when first read); an iterable is stopped with return().
    this.lazy = typeof source === 'function' ? new LazyAbort() : undefined;
    if (!pullKept) {
      pullKept = true; // before: the kept one's own constructor comes here too
      keepShape(new AsyncPull<T>(noop as unknown as AsyncIterableSource<T>, new Subscriber<T>()));
    }
  }

  start(): void {
    const { source } = this;
    try {
      if (typeof source !== 'function') return this.begin(source);
      const made = source(subscriptionOptions(this.lazy as LazyAbort));
      if (isPromiseLike(made)) made.then((iterable) => this.begin(iterable), this.onError);
      else this.begin(made);
    } catch (error) {
      this.fail(error);
    }
  }

  private begin(iterable: AsyncIterable<T>): void {
    if (this.subscriber.closed) {
      // The factory's Promise settled after the teardown (one that never read `signal`): the
      // iterable still holds its resource (an HTTP body, say), so it is released unread: by its
      // `controller` when it has one (the openai SDK's Stream, whose iterator only aborts once
      // started), else by its iterator's `return()`.
      try {
        const { controller } = iterable as { controller?: { abort?: () => void } };
        if (typeof controller?.abort === 'function') controller.abort();
        else returnQuietly(iterable[Symbol.asyncIterator]());
      } catch {
        // Not an async iterable after all: nothing to release, and nobody to tell.
      }
      return;
    }
    try {
      const open = (iterable as Partial<AsyncIterable<T>> | null | undefined)?.[Symbol.asyncIterator];
      if (typeof open !== 'function') return this.fail(notAsyncIterable(iterable));
      this.iterator = open.call(iterable);
    } catch (error) {
      return this.fail(error);
    }
    this.pull();
  }

  private pull(): void {
    let pending: Promise<IteratorResult<T>> | IteratorResult<T>;
    try {
      pending = (this.iterator as AsyncIterator<T>).next();
    } catch (error) {
      return this.fail(error);
    }
    // Always a microtask away, even for an iterator that answers synchronously: no recursion.
    (isPromiseLike(pending) ? pending : Promise.resolve(pending)).then(this.onResult, this.onError);
  }

  private fail(error: unknown): void {
    this.finished = true;
    // After unsubscribe the error is ours (the abort): the subscriber is gone, drop it.
    if (!this.subscriber.closed) this.subscriber.error(error);
  }

  /** Teardown: abort the signal and return the iterator, unless the stream already ended. */
  unsubscribe(): void {
    if (this.finished) return;
    this.finished = true;
    this.lazy?.abort();
    if (this.iterator) returnQuietly(this.iterator);
  }
}

/** The error for a source (or a factory's result) that is no async iterable, saying what it is. */
function notAsyncIterable(value: unknown): TypeError {
  const shown = show(value);
  const what = shown.length > 100 ? `${shown.slice(0, 100)}…` : shown;
  const hint = typeof (value as Partial<Iterable<unknown>> | null | undefined)?.[Symbol.iterator] === 'function' ? " (a sync iterable: use rxjs's from())" : '';
  return new TypeError(`fromAsyncIterable: expected an AsyncIterable, or a factory returning one (or a Promise of one), got ${what}${hint}`);
}

/** Calls the iterator's `return()`, if it has one; what it throws or rejects with is nobody's to hear. */
function returnQuietly(iterator: AsyncIterator<unknown>): void {
  if (typeof iterator?.return !== 'function') return;
  try {
    const pending = iterator.return();
    if (isPromiseLike(pending)) pending.then(undefined, noop);
  } catch {
    // A throwing return() has nothing left to tell anyone.
  }
}

/** The AbortController of one subscription, made only if its signal is read. */
class LazyAbort {
  private controller: AbortController | undefined = undefined;
  private aborted = false;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(); // read after the teardown: already aborted
    }
    return this.controller.signal;
  }

  abort(): void {
    this.aborted = true;
    this.controller?.abort();
  }
}

/**
 * `{ signal }` with `signal` an own, enumerable getter (see ownGetter), so that spreading the
 * object (as the `openai` SDK does with request options) still reads it.
 */
function subscriptionOptions(lazy: LazyAbort): SubscriptionOptions {
  const options = {} as SubscriptionOptions;
  defineSignal(options, lazy);
  return options;
}

const defineSignal = ownGetter('signal', (lazy: LazyAbort) => lazy.signal);
