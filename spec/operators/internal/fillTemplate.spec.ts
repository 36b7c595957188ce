import { fillTemplate } from '../../../operators/internal/fillTemplate';

describe('fillTemplate', () => {
  it('fills the named placeholders in one pass, values as they are', () => {
    expect(fillTemplate('{a} then {b}, {a} again', { a: '1', b: '2' })).toBe('1 then 2, 1 again');
    expect(fillTemplate('error: {lastError}', { lastError: "$& and $' and {a}", a: 'x' })).toBe("error: $& and $' and {a}");
  });

  it('keeps placeholders it has no value for, and prototype names, as written', () => {
    expect(fillTemplate('{unknown} {constructor} {a}', { a: '1' })).toBe('{unknown} {constructor} 1');
  });
});
