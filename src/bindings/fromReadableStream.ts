import { Observable } from 'rxjs';

/**
 * An Observable over a WHATWG `ReadableStream`: each chunk is a value, the end of the stream
 * completes, a stream error is an Observable error. Unsubscribing cancels the reader, which for
 * `fetch(...).body` aborts the HTTP request.
 *
 * A stream can be read only once: subscribe once (a second subscription errors, the stream being
 * locked or already consumed). Wrap it in `defer(() => fromReadableStream(makeStream()))` for a
 * cold, repeatable Observable. What is not a `ReadableStream` is an Observable error that says so.
 *
 * @example
 * const res = await fetch(url);
 * fromReadableStream(res.body!).subscribe(chunk => console.log(chunk.byteLength));
 */
export function fromReadableStream<T>(stream: ReadableStream<T>): Observable<T> {
  return new Observable<T>((subscriber) => {
    if (typeof (stream as Partial<ReadableStream<T>> | null)?.getReader !== 'function') {
      subscriber.error(new TypeError('fromReadableStream: expected a ReadableStream (e.g. `response.body`)'));
      return;
    }
    let reader: ReadableStreamDefaultReader<T>;
    try {
      reader = stream.getReader();
    } catch (error) {
      subscriber.error(error);
      return;
    }
    let finished = false;

    const run = async (): Promise<void> => {
      try {
        while (!subscriber.closed) {
          const result = await reader.read();
          if (result.done) {
            finished = true;
            subscriber.complete();
            return;
          }
          subscriber.next(result.value);
        }
      } catch (error) {
        finished = true;
        // After unsubscribe the error is ours (the cancel): nobody is listening any more.
        if (!subscriber.closed) subscriber.error(error);
      }
    };
    void run();

    return () => {
      if (finished) return;
      finished = true;
      reader.cancel().then(undefined, () => {});
    };
  });
}
