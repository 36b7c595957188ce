import { Observable } from 'rxjs';

/** What {@link fromAsyncIterable} reads: an async iterable, or a factory given the subscription's abort signal. */
export type AsyncIterableSource<T> =
  | AsyncIterable<T>
  | ((signal: AbortSignal) => AsyncIterable<T> | PromiseLike<AsyncIterable<T>>);

/**
 * A cold Observable over an async iterable, with a real teardown.
 *
 * Each subscription creates an `AbortController`, calls the factory with its signal (when given a
 * factory), and pulls values with the iterator's `next()`, one at a time. Unsubscribing aborts the
 * controller (so a pending read, e.g. an HTTP body, is cancelled at once) and calls the iterator's
 * `return()`. Anything that fails after the subscriber is gone (typically the abort itself) is
 * swallowed: nobody is listening any more.
 *
 * Unlike rxjs `from(asyncIterable)`, which cannot stop while it waits for the next value, this
 * releases the underlying resource as soon as the subscriber unsubscribes.
 *
 * @example
 * const chunks$ = fromAsyncIterable(signal =>
 *   client.chat.completions.create({ model, messages, stream: true }, { signal }),
 * );
 * const sub = chunks$.subscribe(chunk => console.log(chunk));
 * sub.unsubscribe(); // aborts the HTTP request
 */
export function fromAsyncIterable<T>(source: AsyncIterableSource<T>): Observable<T> {
  return new Observable<T>((subscriber) => {
    // Only a source that is a function gets a signal; an iterable is stopped with return().
    const controller = typeof source === 'function' ? new AbortController() : undefined;
    let iterator: AsyncIterator<T> | undefined;
    let finished = false;

    const run = async (): Promise<void> => {
      try {
        const iterable = typeof source === 'function' ? await source((controller as AbortController).signal) : source;
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
      controller?.abort();
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
