import type { Observable } from 'rxjs';

/**
 * Consumes an Observable with `for await`. Values that arrive while the loop body runs are
 * buffered; leaving the loop early (break, return, throw) unsubscribes, which cancels a run.
 *
 * @example
 * for await (const event of toAsyncIterable(agent.run('Hi'))) console.log(event.type);
 */
export function toAsyncIterable<T>(source: Observable<T>): AsyncIterableIterator<T> {
  const buffer: T[] = [];
  let head = 0;
  let done = false;
  let failure: { error: unknown } | undefined;
  let waiting: { resolve(r: IteratorResult<T>): void; reject(e: unknown): void } | undefined;
  let subscription: { unsubscribe(): void } | undefined;

  const start = () => {
    subscription = source.subscribe({
      next(value) {
        if (waiting) {
          const w = waiting;
          waiting = undefined;
          w.resolve({ value, done: false });
        } else buffer.push(value);
      },
      error(error) {
        failure = { error };
        done = true;
        if (waiting) waiting.reject(error);
        waiting = undefined;
      },
      complete() {
        done = true;
        if (waiting) waiting.resolve({ value: undefined, done: true });
        waiting = undefined;
      },
    });
  };

  const iterator: AsyncIterableIterator<T> = {
    next(): Promise<IteratorResult<T>> {
      if (!subscription) start();
      if (head < buffer.length) {
        const value = buffer[head++];
        if (head > 1024 && head * 2 > buffer.length) {
          buffer.splice(0, head);
          head = 0;
        }
        return Promise.resolve({ value, done: false });
      }
      if (failure) return Promise.reject(failure.error);
      if (done) return Promise.resolve({ value: undefined, done: true });
      return new Promise((resolve, reject) => (waiting = { resolve, reject }));
    },
    return(): Promise<IteratorResult<T>> {
      done = true;
      subscription?.unsubscribe();
      buffer.length = 0;
      return Promise.resolve({ value: undefined, done: true });
    },
    [Symbol.asyncIterator]() {
      return iterator;
    },
  };
  return iterator;
}
