import { Observable, Subject, finalize, of, throwError, concat, NEVER } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent } from '../../src/index';
import { toReadableStream } from '../../src/bindings/toReadableStream';
import { scriptedModel } from '../../src/testing/index';

async function readAll<T>(stream: ReadableStream<T>): Promise<T[]> {
  const reader = stream.getReader();
  const values: T[] = [];
  for (let r = await reader.read(); !r.done; r = await reader.read()) values.push(r.value);
  return values;
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe('toReadableStream', () => {
  it('reads every value, then closes', async () => {
    expect(await readAll(toReadableStream(of(1, 2, 3)))).toEqual([1, 2, 3]);
  });

  it('is lazy: subscribes on the first read, not when created', async () => {
    let subscribed = 0;
    const source = new Observable<number>((s) => {
      subscribed++;
      s.next(1);
      s.complete();
    });
    const stream = toReadableStream(source);
    await new Promise((r) => setTimeout(r, 5));
    expect(subscribed).toBe(0);
    expect(await readAll(stream)).toEqual([1]);
    expect(subscribed).toBe(1);
  });

  it('rejects what is not an Observable at once, naming toReadableStream', () => {
    expect(() => toReadableStream(Promise.resolve(1) as unknown as Observable<number>)).toThrow(
      new TypeError('toReadableStream: expected an Observable (e.g. agent.run(input))'),
    );
  });

  it('buffers values pushed while the reader is slow, in order', async () => {
    const subject = new Subject<number>();
    const reader = toReadableStream(subject).getReader();
    const first = reader.read(); // subscribes, a microtask later
    await tick();
    for (let i = 0; i < 5000; i++) subject.next(i);
    subject.complete();
    expect(await first).toEqual({ value: 0, done: false });
    const rest: number[] = [];
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest.push(r.value);
    expect(rest).toEqual(Array.from({ length: 4999 }, (_, i) => i + 1));
  });

  it('errors the stream with the Observable error, after the values before it', async () => {
    const boom = new Error('boom');
    const reader = toReadableStream(
      concat(
        of('a', 'b'),
        throwError(() => boom),
      ),
    ).getReader();
    expect(await reader.read()).toEqual({ value: 'a', done: false });
    expect(await reader.read()).toEqual({ value: 'b', done: false });
    await expect(reader.read()).rejects.toBe(boom);
  });

  it('an error with nothing queued errors the stream at once', async () => {
    const boom = new Error('boom');
    const subject = new Subject<string>();
    const reader = toReadableStream(subject).getReader();
    const first = reader.read();
    await tick();
    subject.next('a');
    expect(await first).toEqual({ value: 'a', done: false });
    const second = reader.read();
    subject.error(boom);
    await expect(second).rejects.toBe(boom);
    await expect(reader.closed).rejects.toBe(boom);
  });

  it('cancel() unsubscribes from the source', async () => {
    let unsubscribed = false;
    const subject = new Subject<number>();
    const stream = toReadableStream(subject.pipe(finalize(() => (unsubscribed = true))));
    const reader = stream.getReader();
    const pending = reader.read();
    await tick();
    subject.next(1);
    expect(await pending).toEqual({ value: 1, done: false });
    await reader.cancel();
    expect(unsubscribed).toBe(true);
    expect(subject.observed).toBe(false);
    subject.next(2); // nothing to enqueue into, nothing thrown
  });

  it('cancel() before any read never subscribes', async () => {
    let subscribed = false;
    const stream = toReadableStream(new Observable(() => void (subscribed = true)));
    await stream.cancel();
    expect(subscribed).toBe(false);
  });

  it('cancelling the stream of a real run cancels the run (the tool sees its signal abort)', async () => {
    let aborted!: () => void;
    const toolAborted = new Promise<void>((r) => (aborted = r));
    const hang = defineTool({
      name: 'hang',
      description: 'never ends',
      parameters: z.object({}),
      execute: (_args, ctx) => {
        ctx.signal.addEventListener('abort', () => aborted());
        return NEVER;
      },
    });
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'hang', args: {} }] }]), tools: [hang] });
    const reader = toReadableStream(agent.run('go')).getReader();
    const seen: AgentEvent['type'][] = [];
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      seen.push(r.value.type);
      if (r.value.type === 'tool-call') break;
    }
    expect(seen).toContain('tool-call');
    await reader.cancel();
    await toolAborted;
  });
});
