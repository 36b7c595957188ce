import type { Unsubscribable } from 'rxjs';

/**
 * Unsubscribes and returns what a finalizer threw (rxjs gathers it in an `UnsubscriptionError`),
 * or `undefined`. The runtime tears its own steps down with it, so that the throwing teardown of a
 * user's Observable (a tool, a model client, a hook) is reported instead of cutting a run short of
 * its `run-end`.
 *
 * @example
 * const teardownError = unsubscribeQuietly(sink);
 * if (teardownError === undefined) continueTheRun();
 * else failTheRun(teardownError);
 */
export function unsubscribeQuietly(subscription: Unsubscribable): unknown {
  try {
    subscription.unsubscribe();
    return undefined;
  } catch (error) {
    return error;
  }
}
