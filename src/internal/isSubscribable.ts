import type { Subscribable } from 'rxjs';

/**
 * Whether `value` can be subscribed to: an object with a `subscribe` method. Looser than rxjs's
 * `isObservable` (which also wants `lift`), so an Observable of another copy of rxjs passes.
 *
 * @example
 * if (!isSubscribable(source)) throw new TypeError('expected an Observable');
 */
export function isSubscribable<T = unknown>(value: unknown): value is Subscribable<T> {
  return typeof value === 'object' && value !== null && typeof (value as Subscribable<T>).subscribe === 'function';
}
