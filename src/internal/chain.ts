import { isPromiseLike } from './isPromiseLike';

/**
 * `f(value)`, at once for a plain value (no Promise in a marble test's path), after it resolves
 * for a Promise: a step of work on a store that may answer either way.
 *
 * @example
 * chain(store.load(id), (stored) => stored?.revision ?? 0);
 */
export function chain<T, R>(value: T | PromiseLike<T>, f: (value: T) => R | PromiseLike<R>): R | PromiseLike<R> {
  return isPromiseLike<T>(value) ? Promise.resolve(value).then(f) : f(value);
}
