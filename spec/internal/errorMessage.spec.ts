import { errorMessage } from '../../src/internal/errorMessage';

describe('errorMessage', () => {
  it("is an Error's message, a string as is, anything else as JSON (or its string form)", () => {
    expect(errorMessage(new TypeError('bad'))).toBe('bad');
    expect(errorMessage('plain')).toBe('plain');
    expect(errorMessage({ code: 'E_FAIL' })).toBe('{"code":"E_FAIL"}');
    expect(errorMessage(undefined)).toBe('undefined');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(errorMessage(cyclic)).toBe('[object Object]');
  });
});
