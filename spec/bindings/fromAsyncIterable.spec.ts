import { lastValueFrom, Subscriber, toArray } from 'rxjs';
import { fromAsyncIterable } from '../../src/bindings/fromAsyncIterable';
import OpenAI from 'openai';
import { startFakeOpenAIServer } from '../../src/testing/openAIServer';

/** An async generator of the given values. */
async function* values<T>(...items: T[]): AsyncGenerator<T> {
  for (const item of items) yield item;
}

describe('fromAsyncIterable', () => {
  it('aborts the signal and calls return() when unsubscribed while waiting', async () => {
    let signal: AbortSignal | undefined;
    let returned = false;
    const iterable: AsyncIterable<number> = {
      [Symbol.asyncIterator]: () => ({
        next: () => new Promise<IteratorResult<number>>(() => undefined), // never resolves
        return: async () => {
          returned = true;
          return { done: true, value: undefined };
        },
      }),
    };
    const errors: unknown[] = [];
    const sub = fromAsyncIterable((options) => ((signal = options.signal), iterable)).subscribe({ error: (e) => errors.push(e) });
    await new Promise((r) => setTimeout(r, 10));
    sub.unsubscribe();
    expect(signal?.aborted).toBe(true);
    expect(returned).toBe(true);
    expect(errors).toEqual([]);
  });

  it('an iterator without return(): unsubscribing while waiting aborts the signal, and a value that comes after is dropped', async () => {
    let signal: AbortSignal | undefined;
    let release: ((r: IteratorResult<number>) => void) | undefined;
    const iterable: AsyncIterable<number> = {
      [Symbol.asyncIterator]: () => ({ next: () => new Promise<IteratorResult<number>>((resolve) => (release = resolve)) }),
    };
    const seen: unknown[] = [];
    const sub = fromAsyncIterable((options) => ((signal = options.signal), iterable)).subscribe({
      next: (v) => seen.push(v),
      error: (e) => seen.push(e),
      complete: () => seen.push('complete'),
    });
    await new Promise((r) => setTimeout(r, 10));
    expect(() => sub.unsubscribe()).not.toThrow();
    expect(signal?.aborted).toBe(true);
    release?.({ done: false, value: 1 }); // a value that arrives after the teardown is dropped
    await new Promise((r) => setTimeout(r, 10));
    expect(seen).toEqual([]);
  });

  it('creates no AbortController for a factory that never reads the signal', async () => {
    const Real = globalThis.AbortController;
    let made = 0;
    globalThis.AbortController = class extends Real {
      constructor() {
        super();
        made++;
      }
    };
    try {
      expect(await lastValueFrom(fromAsyncIterable(() => values(1, 2)).pipe(toArray()))).toEqual([1, 2]);
      expect(made).toBe(0);
      let spread: { signal?: AbortSignal } = {};
      await lastValueFrom(fromAsyncIterable((options) => ((spread = { ...options }), values(1, 2))).pipe(toArray()));
      expect(made).toBe(1);
      expect(spread.signal).toBeInstanceOf(AbortSignal);
      expect(spread.signal?.aborted).toBe(false);
    } finally {
      globalThis.AbortController = Real;
    }
  });

  it('gives an already aborted signal to a factory that reads it after the unsubscribe', async () => {
    let late: AbortSignal | undefined;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const sub = fromAsyncIterable<number>(async (options) => {
      await gate;
      late = options.signal;
      return (async function* () {})();
    }).subscribe();
    sub.unsubscribe();
    release();
    await new Promise((r) => setTimeout(r, 0));
    expect(late?.aborted).toBe(true);
  });

  it('emits the values, completes, and forwards errors', async () => {
    async function* ok() {
      yield 1;
      yield 2;
    }
    async function* bad() {
      yield 1;
      throw new Error('boom');
    }
    expect(await lastValueFrom(fromAsyncIterable(ok()).pipe(toArray()))).toEqual([1, 2]);
    await expect(lastValueFrom(fromAsyncIterable(bad()))).rejects.toThrow('boom');
  });

  it('reads an iterator that answers synchronously (next() not a Promise) a microtask at a time', async () => {
    let i = 0;
    const counting: AsyncIterable<number> = {
      [Symbol.asyncIterator]: () => ({
        next: () => (i < 20000 ? { value: i++, done: false } : { value: undefined, done: true }) as unknown as Promise<IteratorResult<number>>,
      }),
    };
    const values = await lastValueFrom(fromAsyncIterable(counting).pipe(toArray()));
    expect(values).toHaveLength(20000); // no recursion: 20,000 values do not overflow the stack
  });

  it('a factory that throws, or returns a Promise that rejects, or something not iterable: an error', async () => {
    await expect(
      lastValueFrom(
        fromAsyncIterable(() => {
          throw new Error('no key');
        }),
      ),
    ).rejects.toThrow('no key');
    await expect(lastValueFrom(fromAsyncIterable(() => Promise.reject(new Error('refused'))))).rejects.toThrow('refused');
    await expect(lastValueFrom(fromAsyncIterable(() => ({}) as AsyncIterable<number>))).rejects.toThrow(TypeError);
  });

  it('something not async iterable (null, an array, a non-streamed answer): an error that says what it got', async () => {
    const expected = 'fromAsyncIterable: expected an AsyncIterable, or a factory returning one (or a Promise of one), got';
    await expect(lastValueFrom(fromAsyncIterable(null as unknown as AsyncIterable<number>))).rejects.toThrow(`${expected} null`);
    await expect(lastValueFrom(fromAsyncIterable([1, 2] as unknown as AsyncIterable<number>))).rejects.toThrow(
      `${expected} [1,2] (a sync iterable: use rxjs's from())`,
    );
    const completion = { id: 'chatcmpl-1', choices: [{ message: { content: 'x'.repeat(500) } }] };
    const error = await lastValueFrom(fromAsyncIterable(async () => completion as unknown as AsyncIterable<number>)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toBe(`${expected} ${JSON.stringify(completion).slice(0, 100)}…`);
  });

  it('a subscriber whose next throws: the stream errors with it, the iterator is returned and the signal aborted', async () => {
    let reads = 0;
    let returned = false;
    let signal: AbortSignal | undefined;
    async function* many() {
      try {
        for (let n = 0; n < 10; n++) {
          reads++;
          yield n;
        }
      } finally {
        returned = true;
      }
    }
    const errors: unknown[] = [];
    await new Promise<void>((resolve) => {
      // A Subscriber of its own (not an observer object, whose throws rxjs reports on its own).
      fromAsyncIterable((options) => ((signal = options.signal), many())).subscribe(
        new Subscriber<number>({
          next: (n) => {
            if (n === 2) throw new Error('consumer broke');
          },
          error: (e: unknown) => {
            errors.push(e);
            resolve();
          },
          complete: () => undefined,
        }),
      );
    });
    await new Promise((r) => setTimeout(r, 5));
    expect(errors).toEqual([new Error('consumer broke')]);
    expect(reads).toBe(3);
    expect(returned).toBe(true);
    expect(signal?.aborted).toBe(true);
  });

  it('an iterator whose next() throws synchronously: an error, and return() is not called on an ended stream', async () => {
    let returned = 0;
    const broken: AsyncIterable<number> = {
      [Symbol.asyncIterator]: () => ({
        next: () => {
          throw new Error('next broke');
        },
        return: async () => {
          returned++;
          return { done: true, value: undefined };
        },
      }),
    };
    await expect(lastValueFrom(fromAsyncIterable(broken))).rejects.toThrow('next broke');
    expect(returned).toBe(0);
  });

  it('a return() that throws or rejects on unsubscribe is swallowed: nobody is listening any more', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      for (const fail of [
        () => {
          throw new Error('return threw');
        },
        () => Promise.reject(new Error('return rejected')),
      ]) {
        let calls = 0;
        const stuck: AsyncIterable<number> = {
          [Symbol.asyncIterator]: () => ({
            next: () => new Promise<IteratorResult<number>>(() => undefined),
            return: () => {
              calls++;
              return fail() as Promise<IteratorResult<number>>;
            },
          }),
        };
        const errors: unknown[] = [];
        const sub = fromAsyncIterable(stuck).subscribe({ error: (e) => errors.push(e) });
        expect(() => sub.unsubscribe()).not.toThrow();
        await new Promise((r) => setTimeout(r, 5));
        expect(calls).toBe(1);
        expect(errors).toEqual([]);
      }
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('an iterable whose Promise settles after the unsubscribe is returned unread (a body that never saw the signal is released)', async () => {
    let cancelled = false;
    let pulled = 0;
    const body = new ReadableStream<number>(
      {
        pull(controller) {
          pulled++;
          controller.enqueue(1);
        },
        cancel() {
          cancelled = true;
        },
      },
      { highWaterMark: 0 },
    ); // pulled only when read
    let resolve!: (iterable: AsyncIterable<number>) => void;
    // A factory that does not use the signal, e.g. async () => (await fetch(url)).body
    const subscription = fromAsyncIterable(() => new Promise<AsyncIterable<number>>((r) => (resolve = r))).subscribe();
    subscription.unsubscribe();
    resolve(body as unknown as AsyncIterable<number>);
    await new Promise((r) => setTimeout(r, 10));
    expect(cancelled).toBe(true);
    expect(pulled).toBe(0); // nothing read from it
  });

  it('a factory whose Promise settles after the unsubscribe with something not iterable: nothing to release, nothing reported', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      let resolve!: (iterable: AsyncIterable<number>) => void;
      const subscription = fromAsyncIterable(() => new Promise<AsyncIterable<number>>((r) => (resolve = r))).subscribe({ error: (e) => unhandled.push(e) });
      subscription.unsubscribe();
      resolve(null as never);
      await new Promise((r) => setTimeout(r, 10));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('an openai SDK Stream that arrives after the unsubscribe is aborted by its controller (its iterator only aborts once started)', async () => {
    const server = await startFakeOpenAIServer([{ text: ['a', 'b', 'c'], delayMs: 5000 }]);
    try {
      const client = new OpenAI({ apiKey: 'test', baseURL: server.url, maxRetries: 0 });
      const closed = server.waitForClose();
      let settled!: Promise<unknown>;
      // A factory that does not pass the signal on: the SDK's Stream resolves once the headers came.
      const subscription = fromAsyncIterable(() => (settled = client.chat.completions.create({ model: 'm', messages: [], stream: true }))).subscribe();
      subscription.unsubscribe();
      await settled;
      await closed; // well before the server's 5 s between chunks
      expect(server.closedConnections()).toBe(1);
    } finally {
      await server.close();
    }
  });

  it('calls the factory once per subscription, each with its own signal', async () => {
    const signals: AbortSignal[] = [];
    const numbers$ = fromAsyncIterable((options) => {
      signals.push(options.signal);
      return values(signals.length, signals.length * 10);
    });
    const [first, second] = await Promise.all([lastValueFrom(numbers$.pipe(toArray())), lastValueFrom(numbers$.pipe(toArray()))]);
    expect([first, second]).toEqual([
      [1, 10],
      [2, 20],
    ]);
    expect(signals).toHaveLength(2);
    expect(signals[0]).not.toBe(signals[1]);
  });

  it('a factory may return a Promise of the iterable', async () => {
    expect(await lastValueFrom(fromAsyncIterable(async () => values('a', 'b')).pipe(toArray()))).toEqual(['a', 'b']);
  });
});
