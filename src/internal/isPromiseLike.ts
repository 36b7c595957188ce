/** True for a Promise or any thenable: what a store, a tool or a cache may answer with. */
export function isPromiseLike<T = unknown>(value: unknown): value is PromiseLike<T> {
  return !!value && typeof (value as PromiseLike<T>).then === 'function';
}
