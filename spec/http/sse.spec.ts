import { NEVER, Observable, Subject, VirtualTimeScheduler, concat, firstValueFrom, from, lastValueFrom, of, take, throwError, toArray } from 'rxjs';
import type { AgentEvent } from '../../src/index';
import { decodeSSE, encodeSSE, sseHeaders, toSSEStream } from '../../src/http/sse';

const usage = { inputTokens: 3, outputTokens: 2 };
const sample: AgentEvent[] = [
  { type: 'run-start', runId: 'r1' },
  { type: 'iteration-start', runId: 'r1', iteration: 0 },
  { type: 'text-delta', runId: 'r1', iteration: 0, text: 'Hello\n\nworld\r\n' },
  { type: 'text-delta', runId: 'r1', iteration: 0, text: 'data: not a field\nevent: nope\n: nor a comment' },
  { type: 'text-delta', runId: 'r1', iteration: 0, text: 'Ünïcödé € 日本語 😀🎉 \u2028\u2029 \u0085 \ufeff' },
  { type: 'reasoning-delta', runId: 'r1', iteration: 0, text: '\r' },
  { type: 'tool-call', runId: 'r1', iteration: 0, callId: 'c1', name: 'search', args: { q: 'a "quoted"\n thing', n: [1, 2.5, null, true] } },
  { type: 'tool-result', runId: 'r1', iteration: 0, callId: 'c1', name: 'search', result: { nested: { deep: ['x', { y: '\u0000\u001f' }] } }, isError: false },
  { type: 'error', runId: 'r1', error: { name: 'ModelError', message: 'rate limited', status: 429 }, source: 'model' },
  { type: 'iteration-end', runId: 'r1', iteration: 0, usage },
  { type: 'run-end', runId: 'r1', reason: 'completed', text: 'Hello', usage },
];

const enc = new TextEncoder();
const collect = <T>(o: Observable<T>) => lastValueFrom(o.pipe(toArray()));
const strings = (...chunks: string[]): AsyncIterable<string> =>
  (async function* () {
    for (const c of chunks) yield c;
  })();
const bytesStream = (chunks: Uint8Array[]) =>
  new ReadableStream<Uint8Array>({
    start(c) {
      for (const chunk of chunks) c.enqueue(chunk);
      c.close();
    },
  });
const asyncBytes = (chunks: Uint8Array[]): AsyncIterable<Uint8Array> =>
  (async function* () {
    yield* chunks;
  })();
const encodeAll = (events: AgentEvent[]) => firstValueFrom(from(events).pipe(encodeSSE(), toArray())).then((f) => f.join(''));

/** mulberry32: a small seeded PRNG, so that the "random" splits are the same on every run. */
function prng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function splitAtRandom(bytes: Uint8Array, random: () => number, maxChunk: number): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < bytes.length;) {
    const size = Math.floor(random() * (maxChunk + 1)); // 0-length chunks included
    chunks.push(bytes.subarray(i, i + size));
    i += size;
  }
  return chunks;
}

describe('encodeSSE', () => {
  it('writes `event: <type>` and the whole event as JSON on one data line', async () => {
    const event: AgentEvent = { type: 'text-delta', runId: 'r1', iteration: 0, text: 'Hi' };
    expect(await firstValueFrom(of(event).pipe(encodeSSE()))).toBe('event: text-delta\ndata: {"type":"text-delta","runId":"r1","iteration":0,"text":"Hi"}\n\n');
  });

  it('gives an event of a journaled run `id: <seq>`, which decodeSSE reads past (the seq stays in the data)', async () => {
    const event: AgentEvent = { type: 'text-delta', runId: 'r1', iteration: 0, text: 'Hi', seq: 7 };
    const frame = await firstValueFrom(of(event).pipe(encodeSSE()));
    expect(frame).toBe('event: text-delta\nid: 7\ndata: {"type":"text-delta","runId":"r1","iteration":0,"text":"Hi","seq":7}\n\n');
    expect(await firstValueFrom(decodeSSE(strings(frame)).pipe(toArray()))).toEqual([event]);
    // A seq that is no position (not a whole number >= 0) is no id: the frame has none.
    const odd = await firstValueFrom(of({ ...event, seq: 1.5 } as AgentEvent).pipe(encodeSSE()));
    expect(odd).not.toContain('\nid:');
  });

  it('never writes a raw line break inside a frame, whatever the text holds', async () => {
    const frames = await firstValueFrom(from(sample).pipe(encodeSSE(), toArray()));
    for (const frame of frames) {
      expect(frame.endsWith('\n\n')).toBe(true);
      const lines = frame.slice(0, -2).split('\n');
      expect(lines).toHaveLength(2);
      expect(lines[0]).toMatch(/^event: [a-z-]+$/);
      expect(lines[1]).toMatch(/^data: \{/);
      expect(frame.slice(0, -2)).not.toMatch(/\r/);
    }
  });

  it('errors on an event whose type is missing, not a string or empty, naming encodeSSE', async () => {
    for (const type of [undefined, 42, '']) {
      const bad = { runId: 'r1', text: 'x', type } as unknown as AgentEvent;
      await expect(firstValueFrom(of(bad).pipe(encodeSSE()))).rejects.toThrow(
        new TypeError(`encodeSSE: an event needs a non-empty string 'type', got ${typeof type === 'string' ? '""' : String(type)}`),
      );
    }
  });

  it('splits data over several data: lines should the JSON ever contain a line break', async () => {
    const stringify = JSON.stringify;
    const spy = jest.spyOn(JSON, 'stringify').mockImplementation((v: unknown) => stringify(v, null, 2));
    let frame: string;
    try {
      frame = await firstValueFrom(of(sample[6]).pipe(encodeSSE()));
    } finally {
      spy.mockRestore();
    }
    expect(frame.split('\n').filter((l) => l.startsWith('data: ')).length).toBeGreaterThan(3);
    expect(frame.slice(0, -2)).not.toMatch(/\n\n/);
    expect(await collect(decodeSSE(strings(frame)))).toEqual([sample[6]]);
  });

  it('errors on an event whose type has a line break', async () => {
    const evil = { type: 'x\ndata: {}', runId: 'r' } as unknown as AgentEvent;
    await expect(firstValueFrom(of(evil).pipe(encodeSSE()))).rejects.toThrow(/line break/);
  });
});

describe('encodeSSE and values JSON cannot hold', () => {
  it('sends a tool result, a tool call and a permission request with a BigInt as strings saying so', async () => {
    const events = [
      { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c', name: 'n', args: { n: 1n } },
      { type: 'permission-request', runId: 'r', requestId: 'q', callId: 'c', toolName: 'n', args: { n: 1n } },
      { type: 'tool-result', runId: 'r', iteration: 0, callId: 'c', name: 'n', result: 1n, isError: false },
    ] as unknown as AgentEvent[];
    const decoded = await collect(decodeSSE(strings(...(await lastValueFrom(from(events).pipe(encodeSSE(), toArray()))))));
    expect(decoded).toMatchObject([
      { type: 'tool-call', args: expect.stringMatching(/^The arguments could not be sent: .*BigInt/) },
      { type: 'permission-request', args: expect.stringMatching(/^The arguments could not be sent: .*BigInt/) },
      { type: 'tool-result', result: expect.stringMatching(/^The tool result could not be sent: .*BigInt/), isError: true },
    ]);
  });
});

describe('encodeSSE and other values JSON cannot hold', () => {
  it('sends them as the string the journal keeps, the rest of the event as it is', async () => {
    const cycle: Record<string, unknown> = { name: 'loop' };
    cycle.self = cycle;
    const events = [
      { type: 'cost-recorded', runId: 'r', inputTokens: 1, outputTokens: 1, cost: 1n, totalCost: 1 },
      { type: 'tool-progress', runId: 'r', iteration: 0, callId: 'c', value: cycle },
    ] as unknown as AgentEvent[];
    const decoded = await collect(decodeSSE(strings(...(await lastValueFrom(from(events).pipe(encodeSSE(), toArray()))))));
    expect(decoded).toEqual([
      {
        type: 'cost-recorded',
        runId: 'r',
        inputTokens: 1,
        outputTokens: 1,
        cost: 'The value could not be sent: Do not know how to serialize a BigInt',
        totalCost: 1,
      },
      {
        type: 'tool-progress',
        runId: 'r',
        iteration: 0,
        callId: 'c',
        value: { name: 'loop', self: expect.stringMatching(/^The value could not be sent: Converting circular structure to JSON/) },
      },
    ]);
  });
});

describe('toSSEStream', () => {
  it('is a UTF-8 body a Response can carry', async () => {
    const text = await new Response(toSSEStream(from(sample)), { headers: sseHeaders }).text();
    expect(text).toBe(await encodeAll(sample));
  });

  it('has text/event-stream headers', () => {
    expect(new Headers(sseHeaders).get('content-type')).toMatch(/^text\/event-stream/);
    expect(sseHeaders['cache-control']).toContain('no-cache');
  });

  it('errors the body when the events error', async () => {
    const boom = new Error('boom');
    await expect(
      new Response(
        toSSEStream(
          concat(
            of(sample[0]),
            throwError(() => boom),
          ),
        ),
      ).text(),
    ).rejects.toBe(boom);
  });

  it('sends a tool result JSON cannot hold (a BigInt) as an error result saying so, and the rest of the run after it', async () => {
    const events: AgentEvent[] = [
      sample[0],
      { type: 'tool-result', runId: 'r1', iteration: 0, callId: 'c1', name: 'count', result: { n: 10n }, isError: false },
      sample[sample.length - 1],
    ];
    const decoded = await collect(decodeSSE(toSSEStream(from(events))));
    expect(decoded.map((e) => e.type)).toEqual(['run-start', 'tool-result', 'run-end']);
    expect(decoded[1]).toEqual({
      type: 'tool-result',
      runId: 'r1',
      iteration: 0,
      callId: 'c1',
      name: 'count',
      result: expect.stringMatching(/^The tool result could not be sent: .*BigInt/),
      isError: true,
    });
  });

  it('sends tool-call arguments JSON cannot hold (a hook added a BigInt) as a string saying so', async () => {
    const events: AgentEvent[] = [
      sample[0],
      { type: 'tool-call', runId: 'r1', iteration: 0, callId: 'c1', name: 'count', args: { n: 1n } },
      sample[sample.length - 1],
    ];
    const decoded = await collect(decodeSSE(toSSEStream(from(events))));
    expect(decoded.map((e) => e.type)).toEqual(['run-start', 'tool-call', 'run-end']);
    expect(decoded[1]).toMatchObject({ type: 'tool-call', callId: 'c1', args: expect.stringMatching(/^The arguments could not be sent: .*BigInt/) });
  });

  it('sends a comment as heartbeat while the run is quiet; the decoder skips it', async () => {
    const events = new Subject<AgentEvent>();
    const stream = toSSEStream(events, { heartbeatMs: 10 });
    const chunks: string[] = [];
    const reading = (async () => {
      const dec = new TextDecoder();
      for await (const c of stream as unknown as AsyncIterable<Uint8Array>) chunks.push(dec.decode(c));
    })();
    await new Promise((r) => setTimeout(r, 5));
    events.next(sample[0]);
    await new Promise((r) => setTimeout(r, 45));
    events.next(sample[1]);
    events.complete();
    await reading;
    const body = chunks.join('');
    expect(body).toContain(': ping\n\n');
    expect(await collect(decodeSSE(strings(body)))).toEqual([sample[0], sample[1]]);
  });
  it('pings on its scheduler every heartbeatMs while the run is quiet, and stops when it ends', async () => {
    const scheduler = new VirtualTimeScheduler(undefined, 35);
    const events = new Subject<AgentEvent>();
    const reader = toSSEStream(events, { heartbeatMs: 10, scheduler }).getReader();
    const dec = new TextDecoder();
    const first = reader.read(); // the body subscribes when it is first read
    await new Promise((r) => setTimeout(r, 0));
    scheduler.flush(); // virtual frames 0-35: pings at 10, 20 and 30
    const frames = [dec.decode((await first).value)];
    for (let i = 0; i < 2; i++) frames.push(dec.decode((await reader.read()).value));
    expect(frames).toEqual([': ping\n\n', ': ping\n\n', ': ping\n\n']);
    events.complete();
    expect(await reader.read()).toEqual({ value: undefined, done: true });
    expect(scheduler.actions).toEqual([]); // the heartbeat is unscheduled with the body
  });

  it('heartbeatMs Infinity schedules nothing; a bad heartbeatMs or scheduler is a TypeError naming it', async () => {
    const scheduler = new VirtualTimeScheduler();
    const reader = toSSEStream(NEVER, { heartbeatMs: Infinity, scheduler }).getReader();
    void reader.read();
    await new Promise((r) => setTimeout(r, 0));
    expect(scheduler.actions).toEqual([]);
    await reader.cancel();
    for (const heartbeatMs of [0, -1, NaN, 2 ** 31, '10']) {
      expect(() => toSSEStream(NEVER, { heartbeatMs: heartbeatMs as number })).toThrow(
        new TypeError(
          `toSSEStream: heartbeatMs must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got ${typeof heartbeatMs === 'string' ? '"10"' : String(heartbeatMs)}`,
        ),
      );
    }
    expect(() => toSSEStream(NEVER, { scheduler: {} as VirtualTimeScheduler })).toThrow(/toSSEStream: 'scheduler'/);
  });
});

describe('decodeSSE', () => {
  it('decodes a byte stream (what fetch gives)', async () => {
    const body = bytesStream([enc.encode(await encodeAll(sample))]);
    expect(await collect(decodeSSE(body))).toEqual(sample);
  });

  it('takes CRLF and lone CR line endings, even a CR and its LF in different chunks', async () => {
    const lf = await encodeAll(sample);
    const crlf = lf.replace(/\n/g, '\r\n');
    const cr = lf.replace(/\n/g, '\r');
    expect(await collect(decodeSSE(strings(crlf)))).toEqual(sample);
    expect(await collect(decodeSSE(strings(cr)))).toEqual(sample);
    // every split point of the first CRLF frame, the CR and LF straddling chunks included
    const frame = crlf.slice(0, crlf.indexOf('\r\n\r\n') + 4) + crlf.slice(0, crlf.indexOf('\r\n\r\n') + 4);
    for (let i = 0; i <= frame.length; i++) {
      expect(await collect(decodeSSE(strings(frame.slice(0, i), frame.slice(i))))).toEqual([sample[0], sample[0]]);
    }
  });

  it('skips comments, id, retry and unknown fields, and frames without data', async () => {
    const body = [
      ': hello\n',
      ':\n\n',
      'retry: 1000\nid: 7\nfoo: bar\nevent: ping\n\n',
      'id: 8\nevent: run-start\n: in the middle\ndata: {"type":"run-start","runId":"r1"}\n\n',
    ].join('');
    expect(await collect(decodeSSE(strings(body)))).toEqual([{ type: 'run-start', runId: 'r1' }]);
  });

  it('joins several data: lines with \\n and strips one space after the colon', async () => {
    const body = 'event: text-delta\ndata: {"type":"text-delta",\ndata:"runId":"r1",\ndata:  "iteration":0,\ndata: "text":"x"}\n\n';
    expect(await collect(decodeSSE(strings(body)))).toEqual([{ type: 'text-delta', runId: 'r1', iteration: 0, text: 'x' }]);
  });

  it('joins data: lines with \\n even when the split falls inside a JSON token: the token is not glued back', async () => {
    // A number and a string cut over two data: lines: with the \n in between neither is JSON.
    const failure = (body: string) =>
      collect(decodeSSE(strings(body))).then(
        () => 'no error',
        (error: Error) => error.message,
      );
    const number = await failure('event: iteration-start\ndata: {"type":"iteration-start","iteration":12\ndata:34}\n\n');
    expect(number).toMatch(/^decodeSSE: bad JSON in the data of a 'iteration-start' event \(.*\): /);
    expect(number.endsWith(JSON.stringify('{"type":"iteration-start","iteration":12\n34}'))).toBe(true);
    const text = await failure('event: text-delta\ndata: {"type":"text-delta","text":"ab\ndata: cd"}\n\n');
    expect(text.endsWith(JSON.stringify('{"type":"text-delta","text":"ab\ncd"}'))).toBe(true);
    // The same frames cut between tokens decode: the \n is whitespace there.
    expect(await collect(decodeSSE(strings('data: {"type":"iteration-start","iteration":\ndata:1234}\n\n')))).toEqual([
      { type: 'iteration-start', iteration: 1234 },
    ]);
  });

  it('delivers a last frame without its blank line, or without any line break', async () => {
    expect(await collect(decodeSSE(strings('event: run-start\ndata: {"type":"run-start","runId":"a"}\n')))).toEqual([{ type: 'run-start', runId: 'a' }]);
    expect(await collect(decodeSSE(strings('event: run-start\ndata: {"type":"run-start","runId":"a"}')))).toEqual([{ type: 'run-start', runId: 'a' }]);
    expect(await collect(decodeSSE(strings('')))).toEqual([]);
  });

  it('uses the event name when the data has no type', async () => {
    expect(await collect(decodeSSE(strings('event: run-start\ndata: {"runId":"a"}\n\n')))).toEqual([{ type: 'run-start', runId: 'a' }]);
  });

  it('skips a byte order mark at the start', async () => {
    const bytes = new Uint8Array([0xef, 0xbb, 0xbf, ...enc.encode(await encodeAll(sample.slice(0, 2)))]);
    expect(await collect(decodeSSE(bytesStream([bytes.subarray(0, 2), bytes.subarray(2)])))).toEqual(sample.slice(0, 2));
  });

  it('decodes multi-byte characters split at every byte', async () => {
    const event: AgentEvent = { type: 'text-delta', runId: 'r', iteration: 0, text: '€😀日ß' };
    const bytes = enc.encode(await encodeAll([event]));
    for (let i = 0; i <= bytes.length; i++) {
      for (const j of [i, Math.min(bytes.length, i + 1), Math.min(bytes.length, i + 2), Math.min(bytes.length, i + 3)]) {
        const chunks = [bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)];
        expect(await collect(decodeSSE(bytesStream(chunks)))).toEqual([event]);
      }
    }
  });

  it('errors on bad JSON with a message naming the event type, and cancels the source', async () => {
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(enc.encode('event: run-start\ndata: {"type":"run-start","runId":"a"}\n\nevent: tool-call\ndata: {"type": "tool-call", oops}\n\n'));
      },
      cancel: () => void (cancelled = true),
    });
    const seen: AgentEvent[] = [];
    const error = await new Promise<Error>((resolve) => decodeSSE(body).subscribe({ next: (e) => seen.push(e), error: resolve }));
    expect(seen).toEqual([{ type: 'run-start', runId: 'a' }]);
    expect(error.message).toMatch(/^decodeSSE: bad JSON in the data of a 'tool-call' event/);
    expect(error.message).toContain('oops');
    expect(cancelled).toBe(true);
  });

  it('errors when the data is JSON but not an object', async () => {
    await expect(collect(decodeSSE(strings('data: [DONE]\n\n')))).rejects.toThrow(/bad JSON in the data of a 'message' event/);
    await expect(collect(decodeSSE(strings('event: x\ndata: 42\n\n')))).rejects.toThrow(/'x' event is not a JSON object/);
  });

  it('passes on an error of the source', async () => {
    const failing = (async function* () {
      yield 'event: run-start\ndata: {"type":"run-start","runId":"a"}\n\n';
      throw new Error('socket hang up');
    })();
    const seen: AgentEvent[] = [];
    const error = await new Promise<Error>((resolve) => decodeSSE(failing).subscribe({ next: (e) => seen.push(e), error: resolve }));
    expect(seen).toEqual([{ type: 'run-start', runId: 'a' }]);
    expect(error.message).toBe('socket hang up');
  });

  it('errors clearly on a source that is neither a stream nor an async iterable', async () => {
    await expect(collect(decodeSSE(['data: {}'] as never))).rejects.toThrow(/decodeSSE: expected a ReadableStream or an AsyncIterable/);
  });

  it('unsubscribing cancels the stream reader', async () => {
    let cancelled = false;
    const frame = enc.encode(await encodeAll(sample.slice(0, 1)));
    const body = new ReadableStream<Uint8Array>({
      pull: (c) => c.enqueue(frame), // never ends
      cancel: () => void (cancelled = true),
    });
    expect(await collect(decodeSSE(body).pipe(take(3)))).toEqual([sample[0], sample[0], sample[0]]);
    expect(cancelled).toBe(true);
  });

  it('stops within a chunk when the subscriber unsubscribes from inside next', async () => {
    const body = await encodeAll(sample);
    const seen: AgentEvent[] = [];
    const sub = decodeSSE(strings(body)).subscribe((e) => {
      seen.push(e);
      if (seen.length === 2) sub.unsubscribe();
    });
    await new Promise((r) => setTimeout(r, 10));
    expect(seen).toEqual(sample.slice(0, 2));
  });

  it('unsubscribing calls return() on an async iterable', async () => {
    let returned = false;
    const iterable: AsyncIterable<string> = {
      [Symbol.asyncIterator]: () => ({
        next: async () => ({ value: 'event: run-start\ndata: {"type":"run-start","runId":"a"}\n\n', done: false }),
        return: async () => ((returned = true), { value: undefined, done: true }),
      }),
    };
    expect(await collect(decodeSSE(iterable).pipe(take(2)))).toHaveLength(2);
    expect(returned).toBe(true);
  });

  it('is linear: a 4 MB line in 100k chunks, and 20k small frames, decode quickly', async () => {
    const text = 'x'.repeat(4_000_000);
    const frame = await encodeAll([{ type: 'text-delta', runId: 'r', iteration: 0, text }]);
    const chunks: string[] = [];
    for (let i = 0; i < frame.length; i += 40) chunks.push(frame.slice(i, i + 40));
    // About 0.2 s on an idle 2-core machine; a decoder that copied its buffer per chunk would take
    // minutes. The bound leaves room for a machine busy with other suites.
    let t = performance.now();
    const [event] = await collect(decodeSSE(strings(...chunks)));
    expect((event as { text: string }).text.length).toBe(4_000_000);
    expect(performance.now() - t).toBeLessThan(10_000);

    const many = Array.from({ length: 20_000 }, (_, i): AgentEvent => ({ type: 'text-delta', runId: 'r', iteration: 0, text: `t${i}` }));
    const body = enc.encode(await encodeAll(many));
    t = performance.now();
    expect(await collect(decodeSSE(bytesStream([body])))).toHaveLength(20_000);
    expect(performance.now() - t).toBeLessThan(10_000);
  });
});

describe('encode -> decode round trip', () => {
  it('gives back the same events for random byte splits, line endings and comments (fixed seed)', async () => {
    const random = prng(20240607);
    const lf = await encodeAll(sample);
    const variants = [
      lf,
      lf.replace(/\n/g, '\r\n'),
      lf.replace(/\n/g, '\r'),
      lf.replace(/\n\n/g, '\n: keep-alive\n\n'),
      lf.slice(0, -2), // no blank line at the end
    ];
    for (let round = 0; round < 300; round++) {
      const variant = variants[round % variants.length];
      const bytes = enc.encode(variant);
      const chunks = splitAtRandom(bytes, random, 1 + Math.floor(random() * 64));
      const source = round % 2 === 0 ? bytesStream(chunks) : asyncBytes(chunks);
      const decoded = await collect(decodeSSE(source));
      expect(decoded).toEqual(sample);
    }
  });

  it('gives back the same events through toSSEStream and a byte-splitting transform', async () => {
    const random = prng(7);
    for (let round = 0; round < 50; round++) {
      const resplit = new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          for (const piece of splitAtRandom(chunk, random, 7)) controller.enqueue(piece);
        },
      });
      expect(await collect(decodeSSE(toSSEStream(from(sample)).pipeThrough(resplit)))).toEqual(sample);
    }
  });
});
