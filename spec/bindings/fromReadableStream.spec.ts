import { lastValueFrom, take, toArray } from 'rxjs';
import { fromReadableStream } from '../../src/bindings/fromReadableStream';
import { toReadableStream } from '../../src/bindings/toReadableStream';
import { from } from 'rxjs';

describe('fromReadableStream', () => {
  it('emits the chunks and completes at the end of the stream', async () => {
    expect(await lastValueFrom(fromReadableStream(toReadableStream(from([1, 2, 3]))).pipe(toArray()))).toEqual([1, 2, 3]);
  });

  it('what is not a ReadableStream is an Observable error that says so', async () => {
    await expect(lastValueFrom(fromReadableStream({} as ReadableStream<number>))).rejects.toThrow(
      new TypeError('fromReadableStream: expected a ReadableStream (e.g. `response.body`)'),
    );
  });

  it('errors with the stream error', async () => {
    const boom = new Error('boom');
    const stream = new ReadableStream<number>({ start: (c) => c.error(boom) });
    await expect(lastValueFrom(fromReadableStream(stream))).rejects.toBe(boom);
  });

  it('unsubscribing cancels the reader', async () => {
    let cancelled: unknown = 'not yet';
    let i = 0;
    const stream = new ReadableStream<number>({
      pull: (c) => c.enqueue(i++),
      cancel: (reason) => void (cancelled = reason),
    });
    expect(await lastValueFrom(fromReadableStream(stream).pipe(take(3), toArray()))).toEqual([0, 1, 2]);
    await new Promise((r) => setTimeout(r, 0));
    expect(cancelled).toBeUndefined();
  });

  it('a second subscription errors: a stream is read once', async () => {
    const stream = new ReadableStream<number>({ pull: () => new Promise(() => {}) });
    const first = fromReadableStream(stream).subscribe();
    await expect(lastValueFrom(fromReadableStream(stream))).rejects.toThrow(/locked/);
    first.unsubscribe();
  });
});
