import { Observable, Subject, concat, finalize, of, throwError } from 'rxjs';
import { toAsyncIterable } from '../../src/bindings/toAsyncIterable';

describe('toAsyncIterable', () => {
  it('iterates the values with for await', async () => {
    const values: number[] = [];
    for await (const v of toAsyncIterable(of(1, 2, 3))) values.push(v);
    expect(values).toEqual([1, 2, 3]);
  });

  it('subscribes on the first next(), not when created', async () => {
    let subscribed = false;
    const it = toAsyncIterable(new Observable<number>((s) => ((subscribed = true), s.complete())));
    expect(subscribed).toBe(false);
    expect(await it.next()).toEqual({ value: undefined, done: true });
    expect(subscribed).toBe(true);
  });

  it('buffers values that arrive while the body runs', async () => {
    const subject = new Subject<number>();
    const it = toAsyncIterable(subject);
    const first = it.next();
    for (let i = 0; i < 3000; i++) subject.next(i);
    subject.complete();
    const values = [(await first).value];
    for (let r = await it.next(); !r.done; r = await it.next()) values.push(r.value);
    expect(values).toEqual(Array.from({ length: 3000 }, (_, i) => i));
  });

  it('throws the error after the values before it, once', async () => {
    const boom = new Error('boom');
    const it = toAsyncIterable(
      concat(
        of(1),
        throwError(() => boom),
      ),
    );
    expect(await it.next()).toEqual({ value: 1, done: false });
    await expect(it.next()).rejects.toBe(boom);
    expect(await it.next()).toEqual({ value: undefined, done: true });
  });

  it('answers overlapping next() calls in order', async () => {
    const subject = new Subject<string>();
    const it = toAsyncIterable(subject);
    const a = it.next();
    const b = it.next();
    const c = it.next();
    subject.next('a');
    subject.next('b');
    subject.complete();
    expect(await Promise.all([a, b, c])).toEqual([
      { value: 'a', done: false },
      { value: 'b', done: false },
      { value: undefined, done: true },
    ]);
  });

  it('an error rejects the first pending next(), the others end', async () => {
    const subject = new Subject<string>();
    const it = toAsyncIterable(subject);
    const a = it.next();
    const b = it.next();
    subject.error(new Error('x'));
    await expect(a).rejects.toThrow('x');
    expect(await b).toEqual({ value: undefined, done: true });
  });

  it('break unsubscribes', async () => {
    let unsubscribed = false;
    const subject = new Subject<number>();
    const source = subject.pipe(finalize(() => (unsubscribed = true)));
    setTimeout(() => subject.next(1));
    for await (const v of toAsyncIterable(source)) {
      expect(v).toBe(1);
      break;
    }
    expect(unsubscribed).toBe(true);
    expect(subject.observed).toBe(false);
  });

  it('return() settles a pending next() and drops buffered values', async () => {
    const subject = new Subject<number>();
    const it = toAsyncIterable(subject);
    const pending = it.next();
    await it.return!();
    expect(await pending).toEqual({ value: undefined, done: true });
    expect(subject.observed).toBe(false);
    expect(await it.next()).toEqual({ value: undefined, done: true });
  });

  it('throw() unsubscribes and rejects with the given error', async () => {
    const subject = new Subject<number>();
    const it = toAsyncIterable(subject);
    void it.next();
    await expect(it.throw!(new Error('stop'))).rejects.toThrow('stop');
    expect(subject.observed).toBe(false);
  });
  it('return() or throw() before the first next(): a later next() answers done and never subscribes', async () => {
    let subscribed = 0;
    const run$ = new Observable<number>(() => {
      subscribed++;
    });
    const left = toAsyncIterable(run$);
    await left.return!();
    expect(await left.next()).toEqual({ value: undefined, done: true });
    const thrown = toAsyncIterable(run$);
    await expect(thrown.throw!(new Error('stop'))).rejects.toThrow('stop');
    expect(await thrown.next()).toEqual({ value: undefined, done: true });
    expect(subscribed).toBe(0);
  });

  it('rejects what is not an Observable, naming toAsyncIterable', () => {
    expect(() => toAsyncIterable({} as Observable<number>)).toThrow(new TypeError('toAsyncIterable: expected an Observable (e.g. agent.run(input))'));
    expect(() => toAsyncIterable(null as unknown as Observable<number>)).toThrow(/toAsyncIterable/);
  });

  it('a subscribe that throws rejects the first next(); later calls answer done', async () => {
    const broken = {
      subscribe() {
        throw new Error('cannot subscribe');
      },
    } as unknown as Observable<number>;
    const it = toAsyncIterable(broken);
    await expect(it.next()).rejects.toThrow('cannot subscribe');
    expect(await it.next()).toEqual({ value: undefined, done: true });
  });
});
