import { request as httpRequest } from 'node:http';
import { createServer as createHttp2Server, connect as connectHttp2 } from 'node:http2';
import { connect, type AddressInfo } from 'node:net';
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

  it('stops reading a chunked body its handler cancelled (a size limit): the rest is dropped, the server goes on', async () => {
    const url = await serve(async (request) => {
      const reader = (request.body as ReadableStream<Uint8Array>).getReader();
      let size = 0;
      for (let next = await reader.read(); !next.done; next = await reader.read()) {
        size += next.value.byteLength;
        if (size > 1000) {
          await reader.cancel();
          return new Response('too big', { status: 413 });
        }
      }
      return new Response(`read ${size}`);
    });
    const { hostname, port } = new URL(url);
    const status = await new Promise<number | undefined>((resolve, reject) => {
      // No content-length: the body is chunked, and goes on after the handler cancelled it.
      const req = httpRequest({ hostname, port, method: 'POST', path: '/', headers: { 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      });
      req.on('error', reject);
      const chunk = Buffer.alloc(600, 'a');
      let sent = 0;
      const write = () => (sent++ < 20 ? req.write(chunk, () => setTimeout(write, 2)) : req.end());
      write();
    });
    expect(status).toBe(413);
    // Before, the chunks that came after the cancel were enqueued on the cancelled stream: an
    // uncaught TypeError (ERR_INVALID_STATE) in the server's process. It still answers.
    const res = await fetch(url, { method: 'POST', body: 'small' });
    expect([res.status, await res.text()]).toEqual([200, 'read 5']);
  });

  it('drops what its handler did not read of a body, so the next request on a kept-alive connection is answered', async () => {
    const url = await serve(async (request) => new Response(new URL(request.url).pathname === '/refused' ? 'no' : 'yes', { status: 200 }));
    const { hostname, port } = new URL(url);
    const replies = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), hostname);
      const body = 'a'.repeat(1_000_000); // more than the socket and the stream buffer
      socket.write(`POST /refused HTTP/1.1\r\nhost: x\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
      socket.write('POST /next HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}');
      let got = '';
      socket.on('data', (data: Buffer) => (got += data.toString()));
      socket.on('end', () => resolve(got));
      socket.on('error', reject);
    });
    expect(replies.match(/HTTP\/1\.1 \d+|\byes\b|\bno\b/g)).toEqual(['HTTP/1.1 200', 'no', 'HTTP/1.1 200', 'yes']);
  });

  it('on HTTP/2 (node:http2), leaves out the connection headers HTTP/2 forbids: an event stream comes through, with no warning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    const server = createHttp2Server(
      toNodeHandler(
        async () =>
          new Response('data: hi\n\n', {
            headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'keep-alive': 'timeout=5' },
          }),
      ) as unknown as Parameters<typeof createHttp2Server>[1],
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const session = connectHttp2(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const stream = session.request({ ':path': '/events' });
      const chunks: Buffer[] = [];
      let headers: Record<string, unknown> | undefined;
      stream.on('response', (received: Record<string, unknown>) => (headers = received));
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      // However the stream ends (a reset too), or after a second.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 1_000);
        stream.on('close', () => (clearTimeout(timer), resolve()));
        stream.on('error', () => undefined);
      });
      expect(headers).toMatchObject({ ':status': 200, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      expect(headers).not.toHaveProperty('connection');
      expect(headers).not.toHaveProperty('keep-alive');
      expect(Buffer.concat(chunks).toString()).toBe('data: hi\n\n');
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      session.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('says what it needs', () => {
    expect(() => toNodeHandler('nope' as never)).toThrow('toNodeHandler: expected a handler (request: Request) => Promise<Response>, got string');
  });
});
