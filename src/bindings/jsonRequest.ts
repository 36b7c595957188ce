/** A JSON error response: `{ error }` with `status` (and extra headers, e.g. `allow`). */
export function jsonError(status: number, error: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ error }), { status, headers: { 'content-type': 'application/json', ...headers } });
}

/**
 * The parsed JSON body of a POST, or the error response to answer with: 405 for another method,
 * 415 for another content type, 413 over `maxBodyBytes`, 400 for a body that is not JSON.
 * `expected` names what the body should be, in the 405 message.
 *
 * @example
 * const body = await readJsonBody(request, 1_000_000, 'a chat request');
 * if (body instanceof Response) return body;
 */
export async function readJsonBody(request: Request, maxBodyBytes: number, expected: string): Promise<unknown> {
  if (request.method !== 'POST') return jsonError(405, `Method ${request.method} not allowed: POST ${expected}`, { allow: 'POST' });
  const type = request.headers.get('content-type') ?? '';
  if (!/^application\/json\b/i.test(type)) return jsonError(415, `Expected content-type application/json, got ${type || 'none'}`);
  const length = Number(request.headers.get('content-length'));
  if (length > maxBodyBytes) return jsonError(413, `Body of ${length} bytes is over the limit of ${maxBodyBytes}`);
  const bytes = await readAtMost(request, maxBodyBytes);
  if (bytes === undefined) return jsonError(413, `Body is over the limit of ${maxBodyBytes} bytes`);
  const text = new TextDecoder().decode(bytes);
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    return jsonError(400, `Body is not JSON: ${(error as Error).message}`);
  }
}

/**
 * The body's bytes, or undefined once more than `max` came: reading stops there and the rest is
 * cancelled, so a body without a length (chunked) cannot fill the memory.
 */
async function readAtMost(request: Request, max: number): Promise<Uint8Array | undefined> {
  if (!request.body) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (let next = await reader.read(); !next.done; next = await reader.read()) {
    size += next.value.byteLength;
    if (size > max) {
      await reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(next.value);
  }
  if (chunks.length === 1) return chunks[0];
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}
