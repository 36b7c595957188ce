import { toNodeHandler } from '../../src/http/toNodeHandler';
import { listen } from '../support/runsServer';

/** A resolvable promise. */
function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('toNodeHandler (a fetch-style handler on node:http)', () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await close?.();
    close = undefined;
  });

  async function serve(handler: (request: Request) => Promise<Response>): Promise<string> {
    const server = await listen(toNodeHandler(handler));
    close = () => server.close();
    return server.url;
  }

  it('passes the method, URL, headers and streamed body, and sends status, headers and cookies back', async () => {
    let seen: { method: string; url: string; agent: string | null; body: string } | undefined;
    const url = await serve(async (request) => {
      seen = { method: request.method, url: request.url, agent: request.headers.get('x-agent'), body: await request.text() };
      const headers = new Headers({ 'content-type': 'text/plain', 'x-one': '1' });
      headers.append('set-cookie', 'a=1');
      headers.append('set-cookie', 'b=2');
      return new Response('made', { status: 201, headers });
    });
    const body = 'é'.repeat(100_000);
    const res = await fetch(`${url}/runs?x=1`, { method: 'POST', headers: { 'x-agent': 'me' }, body });
    expect([res.status, res.headers.get('x-one'), res.headers.getSetCookie(), await res.text()]).toEqual([201, '1', ['a=1', 'b=2'], 'made']);
    expect(seen).toEqual({ method: 'POST', url: `${url}/runs?x=1`, agent: 'me', body });
  });

  it('writes each chunk of a streamed body as it comes, before the next exists', async () => {
    const next = deferred();
    const url = await serve(async () => {
      const encoder = new TextEncoder();
      const body = new ReadableStream<Uint8Array>({
        async start(controller) {
          controller.enqueue(encoder.encode('first\n'));
          await next.promise;
          controller.enqueue(encoder.encode('second\n'));
          controller.close();
        },
      });
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
    });
    const reader = (await fetch(url)).body!.getReader();
    const decoder = new TextDecoder();
    expect(decoder.decode((await reader.read()).value)).toBe('first\n');
    next.resolve();
    expect(decoder.decode((await reader.read()).value)).toBe('second\n');
    expect((await reader.read()).done).toBe(true);
  });

  it("cancels the response body and aborts the request's signal when the client goes away", async () => {
    const cancelled = deferred<unknown>();
    const aborted = deferred();
    const url = await serve(async (request) => {
      request.signal.addEventListener('abort', () => aborted.resolve());
      const body = new ReadableStream<Uint8Array>({
        start: (controller) => controller.enqueue(new TextEncoder().encode(': open\n\n')),
        cancel: (reason) => cancelled.resolve(reason),
      });
      return new Response(body);
    });
    const abort = new AbortController();
    const reader = (await fetch(url, { signal: abort.signal })).body!.getReader();
    await reader.read();
    abort.abort();
    await Promise.all([cancelled.promise, aborted.promise]);
  });

  it('answers 500 with the error when the handler fails, and cuts a body that fails mid-way', async () => {
    let mode: 'throw' | 'cut' = 'throw';
    const url = await serve(async () => {
      if (mode === 'throw') throw new Error('no database');
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('partial'));
          setTimeout(() => controller.error(new Error('store down')), 10);
        },
      });
      return new Response(body);
    });
    const failed = await fetch(url);
    expect([failed.status, await failed.json()]).toEqual([500, { error: 'The handler failed: no database' }]);
    mode = 'cut';
    await expect((await fetch(url)).text()).rejects.toThrow(/terminated/);
  });

  it('says what it needs', () => {
    expect(() => toNodeHandler('nope' as never)).toThrow('toNodeHandler: expected a handler (request: Request) => Promise<Response>, got string');
  });
});
