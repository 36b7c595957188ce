import { firstValueFrom, lastValueFrom, filter, tap, toArray } from 'rxjs';
import { memoryStore } from '../../src/index';
import { runsClient, RunsHttpError } from '../../src/http/runsClient';
import { runsHandler } from '../../src/http/runsHandler';
import { toNodeHandler } from '../../src/http/toNodeHandler';
import { bookingAgent, label, listen } from '../support/runsServer';

describe('runsClient against runsHandler (real node:http server, fetch)', () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await close?.();
    close = undefined;
  });

  /** The runs server; `cut(n)` destroys the socket of the next events stream after `n` frames. */
  async function serve(options: { delayMs?: number; retainMs?: number; booked?: string[] } = {}) {
    const node = toNodeHandler(runsHandler(bookingAgent(memoryStore({ retainMs: options.retainMs ?? 60_000 }), options)));
    let cutAfter: number | undefined;
    const cuts: number[] = [];
    const server = await listen((req, res) => {
      if (cutAfter !== undefined && req.url?.endsWith('/events')) {
        const after = cutAfter;
        cutAfter = undefined;
        let frames = 0;
        const write = res.write.bind(res) as (chunk: Uint8Array) => boolean;
        res.write = ((chunk: Uint8Array) => {
          const ok = write(chunk);
          frames += Buffer.from(chunk).toString().split('\n\n').length - 1;
          if (frames >= after) {
            cuts.push(frames);
            req.socket.destroy(); // the network drops: no end of stream, a reset
          }
          return ok;
        }) as typeof res.write;
      }
      node(req, res);
    });
    close = () => server.close();
    return { url: `${server.url}/runs`, cut: (frames: number) => (cutAfter = frames), cuts };
  }

  it('starts a run and reads its events to the end', async () => {
    const { url } = await serve();
    const runs = runsClient(url);
    const runId = await runs.start({ input: 'hello' });
    const events = await lastValueFrom(runs.events(runId).pipe(toArray()));
    expect(events.map(label)).toEqual([
      'run-start',
      'iteration-start',
      'text:You ',
      'text:said: ',
      'text:hello',
      'text:.',
      'iteration-end',
      'run-end:completed',
    ]);
  });

  it('reconnects with Last-Event-ID after the network drops mid-run, and gets every event exactly once', async () => {
    const { url, cut, cuts } = await serve({ delayMs: 20 });
    const runs = runsClient(url, { retryMs: 10 });
    const runId = await runs.start({ input: 'hello again' });
    cut(4);
    const events = await lastValueFrom(runs.events(runId).pipe(toArray()));
    expect(cuts).toEqual([4]);
    expect(events.map((event) => event.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.map(label)).toEqual([
      'run-start',
      'iteration-start',
      'text:You ',
      'text:said: ',
      'text:hello again',
      'text:.',
      'iteration-end',
      'run-end:completed',
    ]);
  });

  it('answers an approval and follows the run to its end; a second answer is false', async () => {
    const booked: string[] = [];
    const { url } = await serve({ booked });
    const runs = runsClient(url, { headers: () => ({ 'x-test': '1' }) });
    const runId = await runs.start({ input: 'book it' });
    const answers: Array<Promise<boolean>> = [];
    const events = await lastValueFrom(
      runs.events(runId).pipe(
        tap((event) => {
          if (event.type === 'permission-request') {
            const response = { type: 'permission-response' as const, requestId: event.requestId, approved: true };
            answers.push(runs.respond(runId, response).then(async (first) => [first, await runs.respond(runId, response)].every(Boolean)));
          }
        }),
        toArray(),
      ),
    );
    expect(events.map(label).slice(-4)).toEqual(['text:answer: ', 'text:Booked for 2.', 'iteration-end', 'run-end:completed']);
    expect(await answers[0]).toBe(false); // the first answer true, the second false
    expect(booked).toEqual(['table for 2']);
  });

  it('cancels a run (true), then says it has ended (false)', async () => {
    const { url } = await serve();
    const runs = runsClient(url);
    const runId = await runs.start({ input: 'book it' });
    await firstValueFrom(runs.events(runId).pipe(filter((event) => event.type === 'permission-request')));
    expect(await runs.cancel(runId)).toBe(true);
    expect(await runs.cancel(runId)).toBe(false);
    const events = await lastValueFrom(runs.events(runId).pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'cancelled' });
    // Caught up: the server answers 204, the stream completes at once.
    expect(await lastValueFrom(runs.events(runId, { after: events.length }).pipe(toArray()))).toEqual([]);
  });

  it('gets a run as the server tells it: waiting for an approval, then finished; undefined for an unknown run', async () => {
    const { url } = await serve();
    const runs = runsClient(url);
    const runId = await runs.start({ input: 'book it', sessionId: 's-get' });
    const request = await firstValueFrom(runs.events(runId).pipe(filter((event) => event.type === 'permission-request')));
    const waiting = await runs.get(runId);
    expect(waiting).toEqual({
      runId,
      status: 'running',
      sessionId: 's-get',
      seq: request.seq,
      pendingRequests: [{ requestId: request.requestId, type: 'permission-request', deadline: expect.any(Number) }],
    });
    expect(await runs.cancel(runId)).toBe(true);
    expect(await runs.get(runId)).toMatchObject({ runId, status: 'finished', reason: 'cancelled', pendingRequests: [] });
    expect(await runs.get('nope')).toBeUndefined();
    // A 404 of no route (a wrong base URL) is no answer about the run.
    await expect(runsClient(url.replace(/\/runs$/, '/elsewhere')).get(runId)).rejects.toThrow(
      new RunsHttpError(404, `404: No route for GET /elsewhere/${runId}: the runs are under /runs`),
    );
    const forbidden = async () => new Response(JSON.stringify({ error: 'Not allowed' }), { status: 403, headers: { 'content-type': 'application/json' } });
    await expect(runsClient('http://example.test/runs', { fetch: forbidden }).get('r')).rejects.toThrow(new RunsHttpError(403, '403: Not allowed'));
  });

  it('errors with RunsHttpError, not retried, for an unknown run or a refused start', async () => {
    const { url } = await serve();
    const runs = runsClient(url, { retryMs: 10 });
    const error = await lastValueFrom(runs.events('nope')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RunsHttpError);
    expect(error).toMatchObject({ status: 404, message: "404: No run 'nope' in the store (never started, or its journal was dropped after its retention)" });
    await expect(runs.start({ input: '' })).rejects.toThrow(
      new RunsHttpError(400, '400: "input" must be a non-empty string, a message or an array of messages, got ""'),
    );
  });

  it('gives up after maxRetries reconnections in a row without an event', async () => {
    const { url } = await serve();
    const attempts: number[] = [];
    const fetchCounting = (input: string, init: RequestInit) => (attempts.push(1), fetch(input, init));
    const counted = runsClient(url.replace(/:\d+\//, ':1/'), { retryMs: 1, maxRetries: 2, fetch: fetchCounting });
    await expect(lastValueFrom(counted.events('r'))).rejects.toThrow(/fetch failed/);
    expect(attempts).toHaveLength(3);
  });

  it('counts a stream the server ends without an event as a failed connection: maxRetries of them in a row error', async () => {
    let calls = 0;
    const emptyStreams = async () => (calls++, new Response('', { headers: { 'content-type': 'text/event-stream' } }));
    const runs = runsClient('http://example.test/runs', { retryMs: 1, maxRetries: 3, fetch: emptyStreams });
    await expect(lastValueFrom(runs.events('r'))).rejects.toThrow("The event stream of run 'r' ended without an event");
    expect(calls).toBe(4); // the first connection and three more
  });

  it('reconnects after a 5xx (a deploy), and errors at once on a 4xx', async () => {
    const end = { type: 'run-end', runId: 'r', reason: 'completed', text: 'done', seq: 1 };
    const statuses = [503, 502, 200];
    const deploying = async () => {
      const status = statuses.shift() as number;
      if (status !== 200) return new Response(JSON.stringify({ error: 'restarting' }), { status, headers: { 'content-type': 'application/json' } });
      return new Response(`id: 1\ndata: ${JSON.stringify(end)}\n\n`, { headers: { 'content-type': 'text/event-stream' } });
    };
    const runs = runsClient('http://example.test/runs', { retryMs: 1, fetch: deploying });
    expect(await lastValueFrom(runs.events('r').pipe(toArray()))).toEqual([end]);
    expect(statuses).toEqual([]);

    const forbidden = async () => new Response(JSON.stringify({ error: 'not yours' }), { status: 403, headers: { 'content-type': 'application/json' } });
    await expect(lastValueFrom(runsClient('http://example.test/runs', { retryMs: 1, fetch: forbidden }).events('r'))).rejects.toThrow(
      new RunsHttpError(403, '403: not yours'),
    );
  });

  it('errors at once on a response that is not an event stream (an HTML fallback page, say)', async () => {
    let calls = 0;
    const page = async () => (calls++, new Response('<!doctype html><p>app</p>', { headers: { 'content-type': 'text/html; charset=utf-8' } }));
    const runs = runsClient('http://example.test/runs', { retryMs: 1, fetch: page });
    await expect(lastValueFrom(runs.events('r'))).rejects.toThrow(
      new RunsHttpError(200, 'Expected an event stream (text/event-stream) from http://example.test/runs/r/events, got text/html; charset=utf-8'),
    );
    expect(calls).toBe(1);
  });

  it('checks its arguments', () => {
    expect(() => runsClient('')).toThrow('runsClient: the base URL must be a non-empty string (e.g. \'/runs\'), got ""');
    expect(() => runsClient('/runs', { retryMs: 0 })).toThrow(/runsClient: retryMs must be a number of milliseconds/);
    expect(() => runsClient('/runs', { maxRetries: -1 })).toThrow("runsClient: 'maxRetries' must be a whole number >= 0, got -1");
    expect(() => runsClient('/runs').events('')).toThrow('runsClient: a run id must be a non-empty string, got ""');
    expect(() => runsClient('/runs').events('r', { after: 1.5 })).toThrow("runsClient: 'after' must be a seq (a whole number >= 0), got 1.5");
  });

  it('refuses an unknown option (a TypeError naming it and the known ones) and headers that are not an object of strings', async () => {
    expect(() => runsClient('/runs', { header: { authorization: 'Bearer t' } } as never)).toThrow(
      new TypeError("runsClient: unknown option(s) 'header' (known: fetch, headers, retryMs, maxRetries, scheduler)"),
    );
    expect(() => runsClient('/runs', { retry: 5, timeoutMs: 1 } as never)).toThrow("runsClient: unknown option(s) 'retry', 'timeoutMs' (known:");
    const bad = "runsClient: 'headers' must be an object of string values (e.g. { authorization: 'Bearer …' }) or a function returning one, got";
    expect(() => runsClient('/runs', { headers: 5 as never })).toThrow(new TypeError(`${bad} 5`));
    expect(() => runsClient('/runs', { headers: null as never })).toThrow(new TypeError(`${bad} null`));
    expect(() => runsClient('/runs', { headers: [['authorization', 'x']] as never })).toThrow(new TypeError(`${bad} an Array`));
    expect(() => runsClient('/runs', { headers: { 'x-count': 5 } as never })).toThrow(new TypeError(`${bad} {"x-count":5}`));
    // A Headers: its entries are no properties, and would be dropped.
    expect(() => runsClient('/runs', { headers: new Headers({ authorization: 'x' }) as never })).toThrow(new TypeError(`${bad} a Headers`));
    expect(() => runsClient('/runs', { headers: { authorization: 'Bearer t' } })).not.toThrow();
    expect(() => runsClient('/runs', { headers: Object.assign(Object.create(null) as object, { authorization: 'Bearer t' }) })).not.toThrow();
    // A function is asked per request: what it gives is checked then.
    const sent: RequestInit[] = [];
    const fetch = (_url: string, init: RequestInit) => (sent.push(init), Promise.resolve(new Response('{"runId":"r"}', { status: 201 })));
    await expect(runsClient('/runs', { fetch, headers: () => 5 as never }).start({ input: 'hi' })).rejects.toThrow(
      new TypeError("runsClient: the 'headers' function must return an object of string values, got 5"),
    );
    expect(sent).toEqual([]);
    await expect(runsClient('/runs', { fetch, headers: () => ({ authorization: 'Bearer t' }) }).start({ input: 'hi' })).resolves.toBe('r');
    expect(sent[0].headers).toEqual({ authorization: 'Bearer t', 'content-type': 'application/json' });
  });
});
