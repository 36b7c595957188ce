import { isNetworkError } from '../../../operators/internal/isNetworkError';

const withCode = (code: string) => Object.assign(new Error('socket'), { code });

describe('isNetworkError', () => {
  it('knows socket codes, undici codes and the SDK connection errors', () => {
    for (const code of ['ECONNRESET', 'ETIMEDOUT', 'EAI_AGAIN', 'UND_ERR_SOCKET']) expect(isNetworkError(withCode(code))).toBe(true);
    const sdk = Object.assign(new Error('Connection error.'), { name: 'APIConnectionError' });
    expect(isNetworkError(sdk)).toBe(true);
    expect(isNetworkError(withCode('ENOENT'))).toBe(false);
  });

  it("knows fetch's TypeErrors, not any TypeError", () => {
    expect(isNetworkError(new TypeError('fetch failed'))).toBe(true);
    expect(isNetworkError(new TypeError('terminated'))).toBe(true);
    expect(isNetworkError(new TypeError('NetworkError when attempting to fetch resource.'))).toBe(true);
    expect(isNetworkError(new TypeError('x is not a function'))).toBe(false);
    expect(isNetworkError(new Error('fetch failed'))).toBe(false);
  });

  it('looks along the cause chain, at most five deep', () => {
    const wrap = (cause: unknown, times: number): unknown => (times === 0 ? cause : wrap(new Error('wrapped', { cause }), times - 1));
    expect(isNetworkError(wrap(withCode('ECONNREFUSED'), 4))).toBe(true);
    expect(isNetworkError(wrap(withCode('ECONNREFUSED'), 5))).toBe(false);
  });

  it('an error with an HTTP status is an answer, never a network error', () => {
    expect(isNetworkError(Object.assign(withCode('ECONNRESET'), { status: 502 }))).toBe(false);
    expect(isNetworkError(new Error('outer', { cause: Object.assign(new Error('http'), { status: 400, cause: withCode('ECONNRESET') }) }))).toBe(false);
  });

  it('anything else is not one', () => {
    for (const value of [undefined, null, 'ECONNRESET', 42, {}]) expect(isNetworkError(value)).toBe(false);
  });
});
