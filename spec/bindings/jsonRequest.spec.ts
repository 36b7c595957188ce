import { readJsonBody } from '../../src/bindings/jsonRequest';

const post = (body: string, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
  new Request('http://localhost/', { method: 'POST', body, headers });

async function statusOf(result: unknown): Promise<[number, string] | undefined> {
  if (!(result instanceof Response)) return undefined;
  return [result.status, ((await result.json()) as { error: string }).error];
}

describe('readJsonBody', () => {
  it('parses the JSON body of a POST', async () => {
    expect(await readJsonBody(post('{"a":1}'), 100, 'a thing')).toEqual({ a: 1 });
  });

  it('answers 405, 415, 413 and 400 with a message that names what was wrong', async () => {
    const get = await readJsonBody(new Request('http://localhost/'), 100, 'a thing');
    expect(await statusOf(get)).toEqual([405, 'Method GET not allowed: POST a thing']);
    expect((get as Response).headers.get('allow')).toBe('POST');
    expect(await statusOf(await readJsonBody(post('{}', { 'content-type': 'text/plain' }), 100, 'a thing'))).toEqual([
      415,
      'Expected content-type application/json, got text/plain',
    ]);
    const big = JSON.stringify({ text: 'x'.repeat(200) });
    // Refused by its declared length before it is read, or by what was read when none is declared.
    const declared = post(big, { 'content-type': 'application/json', 'content-length': String(big.length) });
    expect(await statusOf(await readJsonBody(declared, 100, 'a thing'))).toEqual([413, 'Body of 211 bytes is over the limit of 100']);
    expect(await statusOf(await readJsonBody(post(big), 100, 'a thing'))).toEqual([413, 'Body is over the limit of 100 bytes']);
    const [status, message] = (await statusOf(await readJsonBody(post('{nope'), 100, 'a thing')))!;
    expect(status).toBe(400);
    expect(message).toMatch(/^Body is not JSON: /);
  });

  it('stops reading a body without a length at the limit, and cancels the rest (a chunked body cannot fill the memory)', async () => {
    let sent = 0;
    let cancelled = false;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        sent += 64;
        controller.enqueue(new Uint8Array(64).fill(32));
      },
      cancel() {
        cancelled = true;
      },
    });
    const request = new Request('http://localhost/', {
      method: 'POST',
      body: endless,
      headers: { 'content-type': 'application/json' },
      duplex: 'half',
    } as RequestInit);
    expect(await statusOf(await readJsonBody(request, 1000, 'a thing'))).toEqual([413, 'Body is over the limit of 1000 bytes']);
    expect(cancelled).toBe(true);
    expect(sent).toBeLessThan(2000);
  });

  it('counts bytes, not characters', async () => {
    const text = JSON.stringify('é'.repeat(60)); // 62 characters, 122 bytes
    expect(await statusOf(await readJsonBody(post(text), 100, 'a thing'))).toEqual([413, 'Body is over the limit of 100 bytes']);
    expect(await readJsonBody(post(text), 122, 'a thing')).toBe('é'.repeat(60));
  });
});
