import { Observable } from 'rxjs';
import { isPromiseLike } from '../internal/isPromiseLike';

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
export type AsyncIterableSource<T> =
  | AsyncIterable<T>
  | ((options: SubscriptionOptions) => AsyncIterable<T> | PromiseLike<AsyncIterable<T>>);

/**
 * A cold Observable over an async iterable, with a real teardown.
 *
 * Each subscription calls the factory (when given one) with `{ signal }`, and pulls values with
 * the iterator's `next()`, one at a time. Unsubscribing aborts the signal (so a pending read, e.g.
 * an HTTP body, is cancelled at once) and calls the iterator's `return()`. The signal's
 * `AbortController` exists only once the factory read `signal`: creating one costs more than a
 * short stream's whole pass through the agent, and a local model or a test double rarely needs it. Anything that fails after the subscriber is gone (typically the abort itself) is
 * swallowed: nobody is listening any more.
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
    // Only a factory gets a signal (made when first read); an iterable is stopped with return().
    const lazy = typeof source === 'function' ? new LazyAbort() : undefined;
    let iterator: AsyncIterator<T> | undefined;
    let finished = false;

    const run = async (): Promise<void> => {
      try {
        let iterable: AsyncIterable<T>;
        if (typeof source !== 'function') iterable = source;
        else {
          const made = source(subscriptionOptions(lazy as LazyAbort));
          iterable = isPromiseLike(made) ? await made : made;
        }
        if (subscriber.closed) return;
        iterator = iterable[Symbol.asyncIterator]();
        while (!subscriber.closed) {
          const result = await iterator.next();
          if (result.done) {
            finished = true;
            subscriber.complete();
            return;
          }
          subscriber.next(result.value);
        }
      } catch (error) {
        finished = true;
        // After unsubscribe the error is ours (the abort): the subscriber is gone, drop it.
        if (!subscriber.closed) subscriber.error(error);
      }
    };
    void run();

    return () => {
      if (finished) return;
      finished = true;
      lazy?.abort();
      const it = iterator;
      if (it && typeof it.return === 'function') {
        try {
          const pending = it.return();
          if (pending && typeof pending.then === 'function') pending.then(undefined, ignore);
        } catch {
          // A throwing return() has nothing left to tell anyone.
        }
      }
    };
  });
}

function ignore(): void {}

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

const LAZY = Symbol('lazyAbort');

/**
 * `{ signal }` with `signal` an own, enumerable getter, so that spreading the object (as the
 * `openai` SDK does with request options) still reads it. The getter is one shared function:
 * an object literal with a getter of its own would cost a closure and, in V8, a hidden class
 * per object, ten times the price, and would keep each subscription's garbage alive through
 * young-generation collections.
 */
function subscriptionOptions(lazy: LazyAbort): SubscriptionOptions {
  const options = { [LAZY]: lazy } as unknown as SubscriptionOptions;
  Object.defineProperty(options, 'signal', SIGNAL);
  return options;
}

const SIGNAL: PropertyDescriptor = {
  get(this: { [LAZY]: LazyAbort }): AbortSignal {
    return this[LAZY].signal;
  },
  enumerable: true,
  configurable: true,
};
