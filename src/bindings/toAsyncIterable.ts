import type { Observable, Subscription } from 'rxjs';
import { isSubscribable } from '../internal/isSubscribable';

/**
 * Consumes an Observable with `for await`. It subscribes on the first `next()`. Values that
 * arrive while the loop body runs are buffered; an error is thrown after the values that came
 * before it. Leaving the loop early (break, return, throw) unsubscribes, which cancels a run.
 * Calls to `next()` that overlap (without awaiting) are answered in order. Once left (or when the
 * subscription itself throws), every later `next()` answers `done` without subscribing again.
 *
 * @throws TypeError when `source` is not an Observable.
 *
 * @example
 * for await (const event of toAsyncIterable(agent.run('Hi'))) console.log(event.type);
 */
export function toAsyncIterable<T>(source: Observable<T>): AsyncIterableIterator<T> {
  if (!isSubscribable(source)) {
    throw new TypeError('toAsyncIterable: expected an Observable (e.g. agent.run(input))');
  }
  type Waiter = { resolve(r: IteratorResult<T>): void; reject(e: unknown): void };
  let buffer: T[] = [];
  let head = 0;
  let done = false;
  let failure: { error: unknown } | undefined;
  let waiters: Waiter[] = [];
  let subscription: Subscription | undefined;
  let started = false;

  const settleWaiters = () => {
    const pending = waiters;
    waiters = [];
    for (const w of pending) {
      if (failure) {
        w.reject(failure.error);
        failure = undefined; // thrown once; later calls report the end
      } else w.resolve({ value: undefined, done: true });
    }
  };

  const start = () => {
    started = true;
    subscription = source.subscribe({
      next(value) {
        if (done) return;
        const w = waiters.shift();
        if (w) w.resolve({ value, done: false });
        else buffer.push(value);
      },
      error(error) {
        if (done) return;
        done = true;
        failure = { error };
        if (waiters.length > 0) settleWaiters();
      },
      complete() {
        if (done) return;
        done = true;
        settleWaiters();
      },
    });
  };

  const end = () => {
    started = true; // a later next() must not start what was left
    done = true;
    failure = undefined;
    buffer = [];
    head = 0;
    const s = subscription;
    subscription = undefined;
    s?.unsubscribe();
    settleWaiters();
  };

  const iterator: AsyncIterableIterator<T> = {
    next(): Promise<IteratorResult<T>> {
      if (!started) {
        try {
          start();
        } catch (error) {
          // rxjs reports a failing subscribe as an error; a foreign Observable may throw instead.
          end();
          return Promise.reject(error);
        }
      }
      if (head < buffer.length) {
        const value = buffer[head++];
        if (head === buffer.length) {
          buffer = [];
          head = 0;
        } else if (head > 1024 && head * 2 > buffer.length) {
          buffer.splice(0, head);
          head = 0;
        }
        return Promise.resolve({ value, done: false });
      }
      if (failure) {
        const { error } = failure;
        failure = undefined;
        return Promise.reject(error);
      }
      if (done) return Promise.resolve({ value: undefined, done: true });
      return new Promise((resolve, reject) => waiters.push({ resolve, reject }));
    },
    return(): Promise<IteratorResult<T>> {
      end();
      return Promise.resolve({ value: undefined, done: true });
    },
    throw(error?: unknown): Promise<IteratorResult<T>> {
      end();
      return Promise.reject(error);
    },
    [Symbol.asyncIterator]() {
      return iterator;
    },
  };
  return iterator;
}
