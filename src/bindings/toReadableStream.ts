import type { Observable, Subscription } from 'rxjs';
import { isSubscribable } from '../internal/isSubscribable';

/**
 * A WHATWG `ReadableStream` over an Observable (typically a run's `Observable<AgentEvent>`).
 *
 * The stream is lazy, like the Observable: it subscribes when it is first read (a microtask
 * after the first `read()`), not when it is created. An Observable cannot be paused, so values that arrive while the reader is slow are
 * queued in the stream. `cancel()` on the stream (or on its reader) unsubscribes, which cancels
 * the run; completion closes the stream; an Observable error errors the stream with that error, once the
 * reader has taken the values that came before it.
 *
 * Read it once: like any `ReadableStream`, it has one reader at a time and cannot be replayed.
 *
 * @throws TypeError when `source` is not an Observable.
 *
 * @example
 * const reader = toReadableStream(agent.run('Hi')).getReader();
 * for (let r = await reader.read(); !r.done; r = await reader.read()) console.log(r.value.type);
 */
export function toReadableStream<T>(source: Observable<T>): ReadableStream<T> {
  if (!isSubscribable(source)) {
    throw new TypeError('toReadableStream: expected an Observable (e.g. agent.run(input))');
  }
  let subscription: Subscription | undefined;
  let finished = false;
  // controller.error() drops the queued values: an error that comes while values wait for the
  // reader is held back until the reader has taken them.
  let heldError: { error: unknown } | undefined;
  return new ReadableStream<T>(
    {
      pull(controller) {
        if (heldError) {
          controller.error(heldError.error);
          heldError = undefined;
          return;
        }
        if (subscription || finished) return;
        subscription = source.subscribe({
          next(value) {
            if (!finished) controller.enqueue(value);
          },
          error(error) {
            if (finished) return;
            finished = true;
            const queued = controller.desiredSize;
            if (queued !== null && queued < 0) heldError = { error };
            else controller.error(error);
          },
          complete() {
            if (finished) return;
            finished = true;
            controller.close();
          },
        });
        // A source that finished synchronously has nothing left to release.
        if (finished) subscription = undefined;
      },
      cancel() {
        finished = true;
        heldError = undefined;
        const s = subscription;
        subscription = undefined;
        s?.unsubscribe();
      },
    },
    // highWaterMark 0: `pull` runs only when someone reads, so nothing starts before that.
    { highWaterMark: 0 },
  );
}
