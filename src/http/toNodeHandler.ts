/*
 * Typed structurally, without a runtime import of node:http or node:stream: rx-agent/http also
 * loads in a browser, and its types compile without @types/node.
 */

/** What {@link toNodeHandler} reads of a `node:http` request (an `IncomingMessage`). */
export interface NodeRequestLike {
  readonly method?: string;
  readonly url?: string;
  readonly headers: Readonly<Record<string, string | readonly string[] | undefined>>;
  /** 2 on an HTTP/2 stream (`node:http2`'s compatibility API): connection headers are not sent there. */
  readonly httpVersionMajor?: number;
  /** A TLS socket (`encrypted: true`) makes the URL https. */
  readonly socket?: unknown;
  on(event: 'data', listener: (chunk: Uint8Array) => void): unknown;
  on(event: 'end' | 'close', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  pause(): unknown;
  resume(): unknown;
}

/** What {@link toNodeHandler} uses of a `node:http` response (a `ServerResponse`). */
export interface NodeResponseLike {
  readonly headersSent: boolean;
  readonly writableEnded: boolean;
  readonly destroyed: boolean;
  writeHead(status: number, headers: Record<string, string | string[]>): unknown;
  flushHeaders(): void;
  write(chunk: Uint8Array): boolean;
  end(chunk?: string): unknown;
  destroy(error?: Error): unknown;
  on(event: 'close' | 'drain', listener: () => void): unknown;
  off(event: 'close' | 'drain', listener: () => void): unknown;
}

/**
 * Serves a fetch-style handler (such as {@link runsHandler}'s) from `node:http` (or Express,
 * which passes the same objects): the request becomes a `Request` (its body streamed, read only
 * as the handler reads it; its `signal` aborted when the client goes away), and the `Response` is
 * written back as it comes, each chunk flushed at once (an event stream is not held back), waiting
 * for `drain` when the socket is full. When the client closes the connection, the response body
 * is cancelled: for an event stream that ends the stream, never the run behind it.
 *
 * @example
 * import { createServer } from 'node:http';
 * createServer(toNodeHandler(runsHandler(agent))).listen(3000);
 * // Express: app.use('/runs', toNodeHandler(handle)) mounts it (req.url is then relative), so
 * // prefer app.all('/runs*', toNodeHandler(handle)), which keeps the whole path.
 */
export function toNodeHandler(handler: (request: Request) => Promise<Response>): (req: NodeRequestLike, res: NodeResponseLike) => void {
  if (typeof handler !== 'function') throw new TypeError(`toNodeHandler: expected a handler (request: Request) => Promise<Response>, got ${typeof handler}`);
  return (req, res) => {
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableEnded) abort.abort(new Error('The client closed the connection'));
    };
    res.on('close', onClose);
    let request: Request;
    let dropBody: () => void;
    try {
      [request, dropBody] = toRequest(req, abort.signal);
    } catch (error) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: `Bad request: ${(error as Error).message}` }));
      return;
    }
    handler(request)
      .then((response) => send(response, res, abort.signal, (req.httpVersionMajor ?? 1) >= 2))
      .catch((error: unknown) => {
        if (!res.headersSent) {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: `The handler failed: ${error instanceof Error ? error.message : String(error)}` }));
        } else {
          res.destroy(error instanceof Error ? error : new Error(String(error)));
        }
      })
      .finally(() => {
        res.off('close', onClose);
        // What the handler left of the body is read and dropped, so that the next request on a
        // kept-alive connection is read (Node leaves that to whoever started reading the body).
        dropBody();
      });
  };
}

/** The request, and a function that reads what is left of its body into nothing. */
function toRequest(req: NodeRequestLike, signal: AbortSignal): [Request, () => void] {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith(':')) continue; // HTTP/2 pseudo-headers
    if (typeof value === 'string') headers.append(name, value);
    else if (value) for (const one of value) headers.append(name, one);
  }
  const scheme = (req.socket as { encrypted?: boolean } | null | undefined)?.encrypted ? 'https' : 'http';
  const url = new URL(req.url ?? '/', `${scheme}://${headers.get('host') ?? 'localhost'}`);
  const method = req.method ?? 'GET';
  if (method === 'GET' || method === 'HEAD') return [new Request(url, { method, headers, signal }), () => req.resume()];
  // Chunks go to the stream until it ends, errors, is cancelled (a reader that stopped at a size
  // limit) or is dropped; after that they are read and thrown away, never enqueued.
  let open = true;
  const drop = () => {
    open = false;
    req.resume();
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      req.on('data', (chunk) => {
        if (!open) return;
        controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        if ((controller.desiredSize ?? 1) <= 0) req.pause();
      });
      req.on('end', () => {
        if (!open) return;
        open = false;
        controller.close();
      });
      req.on('error', (error) => {
        if (!open) return;
        open = false;
        controller.error(error);
      });
      req.pause();
    },
    pull() {
      req.resume();
    },
    cancel: drop,
  });
  // `duplex: 'half'` is what a streamed request body needs (Node's fetch asks for it).
  return [new Request(url, { method, headers, signal, body, duplex: 'half' } as RequestInit), drop];
}

/** Headers of one HTTP/1 connection, which HTTP/2 forbids (RFC 9113, 8.2.2): an event stream's `connection: keep-alive`, say. */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

async function send(response: Response, res: NodeResponseLike, signal: AbortSignal, http2: boolean): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie' && !(http2 && CONNECTION_HEADERS.has(name))) headers[name] = value;
  });
  const cookies = response.headers.getSetCookie?.() ?? [];
  if (cookies.length > 0) headers['set-cookie'] = cookies;
  res.writeHead(response.status, headers);
  if (!response.body || signal.aborted) {
    if (response.body) await response.body.cancel().catch(() => undefined);
    res.end();
    return;
  }
  res.flushHeaders();
  const reader = response.body.getReader();
  const cancel = () => void reader.cancel().catch(() => undefined);
  signal.addEventListener('abort', cancel, { once: true });
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read()) {
      if (signal.aborted) return;
      if (!res.write(next.value)) await drained(res);
    }
    if (!signal.aborted) res.end();
  } catch (error) {
    // The body failed mid-way: the client must not take a cut stream for a whole one.
    if (!signal.aborted) res.destroy(error instanceof Error ? error : new Error(String(error)));
  } finally {
    signal.removeEventListener('abort', cancel);
  }
}

/** Resolves when the socket takes writes again, or is gone. */
function drained(res: NodeResponseLike): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
