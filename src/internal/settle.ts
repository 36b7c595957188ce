import { isPromiseLike } from './isPromiseLike';

/**
 * Continues with what `work` returns: at once for a plain value (no Promise in a marble test's
 * path), after it resolves for a Promise. A throw or a rejection goes to `fail`.
 *
 * @example
 * settle(() => store.read(runId), (entries) => use(entries), (error) => report(error));
 */
export function settle<T>(work: () => T | PromiseLike<T>, ok: (value: T) => void, fail: (error: unknown) => void): void {
  let value: T | PromiseLike<T>;
  try {
    value = work();
  } catch (error) {
    return fail(error);
  }
  if (isPromiseLike<T>(value)) Promise.resolve(value).then(ok, fail);
  else ok(value);
}
