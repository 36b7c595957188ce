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
});
