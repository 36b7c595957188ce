import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Serves a fetch-style handler on a loopback port through node:http (the adapter a Node app
 * writes): the request becomes a `Request`, the `Response` body is piped back, and a client that
 * goes away cancels the body (so the run behind it is told).
 */
export async function serveFetch(handler: (request: Request) => Promise<Response>): Promise<{ url: string; close(): Promise<void> }> {
  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers = new Headers();
    for (const [key, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(key, value);
    const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : Buffer.concat(chunks);
    const response = await handler(new Request(`http://127.0.0.1${req.url}`, { method: req.method, headers, body }));
    const out: Record<string, string> = {};
    response.headers.forEach((value, key) => (out[key] = value));
    res.writeHead(response.status, out);
    if (!response.body) {
      res.end();
      return;
    }
    const reader = response.body.getReader();
    res.on('close', () => void reader.cancel().catch(() => undefined));
    for (let r = await reader.read(); !r.done; r = await reader.read()) res.write(r.value);
    res.end();
  };
  const server: Server = createServer((req, res) => void serve(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}
