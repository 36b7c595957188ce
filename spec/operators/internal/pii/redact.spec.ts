import { createHash } from 'node:crypto';
import { piiReplacement, PiiDetectedError, redactText } from '../../../../operators/internal/pii/redact';
import { ALL } from './fixtures';

const sha8 = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 8);

describe('strategies', () => {
  it('redact uses the type in upper snake case', () => {
    expect(piiReplacement('email', 'redact', 'a@b.io')).toBe('[REDACTED_EMAIL]');
    expect(piiReplacement('creditCard', 'redact', '4111111111111111')).toBe('[REDACTED_CREDIT_CARD]');
    expect(piiReplacement('apiKey', 'redact', 'x')).toBe('[REDACTED_API_KEY]');
    expect(piiReplacement('employeeId', 'redact', 'x')).toBe('[REDACTED_EMPLOYEE_ID]');
  });

  it('mask', () => {
    expect(piiReplacement('email', 'mask', 'user@example.com')).toBe('u***@example.com');
    expect(piiReplacement('creditCard', 'mask', '5105 1051 0510 0366')).toBe('****-****-****-0366');
    expect(piiReplacement('phone', 'mask', '(555) 987-1234')).toBe('***-***-1234');
    expect(piiReplacement('ssn', 'mask', '123-45-6789')).toBe('*******6789');
    expect(piiReplacement('apiKey', 'mask', 'AKIAIOSFODNN7EXAMPLE')).toBe('****************MPLE');
    expect(piiReplacement('pin', 'mask', '1234')).toBe('****');
  });

  it('hash is <type_hash:8 hex of sha256>, stable for equal input', () => {
    expect(piiReplacement('ip', 'hash', '10.0.0.1')).toBe(`<ip_hash:${sha8('10.0.0.1')}>`);
    expect(piiReplacement('ip', 'hash', '10.0.0.1')).toBe(piiReplacement('ip', 'hash', '10.0.0.1'));
    expect(piiReplacement('ip', 'hash', '10.0.0.2')).not.toBe(piiReplacement('ip', 'hash', '10.0.0.1'));
    expect(redactText('from 10.0.0.1', ALL).text).toMatch(/^from <ip_hash:[0-9a-f]{8}>$/);
  });

  it('block throws PiiDetectedError without the value in the message', () => {
    let error: unknown;
    try {
      redactText('card 4111 1111 1111 1111 and 5500 0000 0000 0004, mail a@b.io');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(PiiDetectedError);
    expect(error).toBeInstanceOf(Error);
    const e = error as PiiDetectedError;
    expect(e.name).toBe('PiiDetectedError');
    expect(e.piiType).toBe('creditCard');
    expect(e.count).toBe(2);
    expect(e.message).toBe('PII detected: creditCard');
    expect(e.message).not.toContain('4111');
  });
});

describe('redactText', () => {
  it('replaces every value and counts them per type', () => {
    const { text, counts } = redactText('a@b.io, c@d.io from 10.0.0.1 call 555-123-4567', ALL);
    expect(text).toBe(`[REDACTED_EMAIL], [REDACTED_EMAIL] from <ip_hash:${sha8('10.0.0.1')}> call ***-***-4567`);
    expect([...counts]).toEqual([
      ['email', { strategy: 'redact', count: 2 }],
      ['ip', { strategy: 'hash', count: 1 }],
      ['phone', { strategy: 'mask', count: 1 }],
    ]);
  });

  it('returns the same text and no counts when there is nothing', () => {
    const text = 'nothing to see here';
    const result = redactText(text, ALL);
    expect(result.text).toBe(text);
    expect(result.counts.size).toBe(0);
  });

  it('throws for the first blocked match', () => {
    expect(() => redactText('ip 10.0.0.1 ssn 123-45-6789 card 4111111111111111', { rules: { ip: 'block', ssn: 'block' } })).toThrow(
      expect.objectContaining({ piiType: 'ip' }),
    );
  });
});
