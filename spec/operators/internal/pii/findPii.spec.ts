import { findPii } from '../../../../operators/internal/pii/findPii';
import type { CustomPiiDetector } from '../../../../operators/internal/pii/config';
import { ALL, types } from './fixtures';

describe('findPii', () => {
  it('returns matches in text order with offsets, values and strategies', () => {
    const text = 'a@b.io then 10.0.0.1';
    expect(findPii(text, ALL)).toEqual([
      { type: 'email', start: 0, end: 6, value: 'a@b.io', strategy: 'redact' },
      { type: 'ip', start: 12, end: 20, value: '10.0.0.1', strategy: 'hash' },
    ]);
  });

  it('the longest overlapping match wins', () => {
    const custom: CustomPiiDetector[] = [{ name: 'longer', detector: /mail a@b\.io/, strategy: 'redact' }];
    expect(types('mail a@b.io', { rules: { email: 'redact' }, custom })).toEqual([['longer', 'mail a@b.io']]);
    const shorter: CustomPiiDetector[] = [{ name: 'domain', detector: /b\.io/, strategy: 'redact' }];
    expect(types('mail a@b.io', { rules: { email: 'redact' }, custom: shorter })).toEqual([['email', 'a@b.io']]);
  });

  it('ties go to the type listed first (built-ins in order, then custom in order)', () => {
    const custom: CustomPiiDetector[] = [
      { name: 'first', detector: /\d{3}-\d{2}-\d{4}/, strategy: 'redact' },
      { name: 'second', detector: /\d{3}-\d{2}-\d{4}/, strategy: 'redact' },
    ];
    expect(types('ssn 123-45-6789', { rules: { ssn: 'redact' }, custom })).toEqual([['ssn', '123-45-6789']]);
    expect(types('ssn 123-45-6789', { rules: { ssn: false }, custom })).toEqual([['first', '123-45-6789']]);
    // rules key order does not change priority: creditCard before phone.
    const both = (start: number) => [{ start, end: start + 3 }];
    expect(
      types('x abc', {
        custom: [
          { name: 'a', detector: () => both(2) },
          { name: 'b', detector: () => both(2) },
        ],
      }).map((t) => t[0]),
    ).toEqual(['a']);
  });

  it('uses the default rules when none are given', () => {
    expect(findPii('a@b.io 4111 1111 1111 1111').map((m) => [m.type, m.strategy])).toEqual([
      ['email', 'redact'],
      ['creditCard', 'block'],
    ]);
  });
});
