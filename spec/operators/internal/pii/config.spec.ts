import { DEFAULT_PII_RULES, resolvePiiConfig, toUpperSnake, type PiiStrategy } from '../../../../operators/internal/pii/config';
import { PII_TYPES } from '../../../../operators/internal/pii/detectors';
import { PiiDetectedError, redactText } from '../../../../operators/internal/pii/redact';
import { NONE } from './fixtures';

describe('resolvePiiConfig', () => {
  it('rules change the strategies of the types they list; the others keep their defaults; false turns a type off', () => {
    expect(resolvePiiConfig({ rules: { ip: 'redact', email: 'mask', phone: undefined, ssn: false } }).active).toEqual([
      { type: 'email', strategy: 'mask' },
      { type: 'creditCard', strategy: 'block' },
      { type: 'phone', strategy: 'mask' },
      { type: 'ip', strategy: 'redact' },
      { type: 'mac', strategy: 'redact' },
      { type: 'url', strategy: 'redact' },
      { type: 'apiKey', strategy: 'redact' },
    ]);
    expect(resolvePiiConfig({ rules: {} }).active).toEqual(resolvePiiConfig({}).active);
    expect(resolvePiiConfig({ rules: NONE }).active).toEqual([]);
    expect(redactText('a@b.io 4111 1111 1111 1111', { rules: NONE }).text).toBe('a@b.io 4111 1111 1111 1111');
    // A rule for one type leaves the blocking of cards in place.
    expect(() => redactText('a@b.io 4111 1111 1111 1111', { rules: { email: 'mask' } })).toThrow(PiiDetectedError);
  });

  it('validates with clear errors', () => {
    expect(() => resolvePiiConfig({ rules: { passport: 'redact' } as never })).toThrow(
      'Unknown PII type "passport" in rules; expected one of: email, creditCard, ssn, phone, ip, mac, url, apiKey',
    );
    expect(() => resolvePiiConfig({ rules: { email: 'erase' as PiiStrategy } })).toThrow(
      'Unknown strategy "erase" for PII type "email"; expected one of: redact, mask, hash, block',
    );
    expect(() => resolvePiiConfig({ custom: [{ detector: /x/ } as never] })).toThrow('Custom PII detector at index 0 has no name');
    expect(() => resolvePiiConfig({ custom: [{ name: ' ', detector: /x/ }] })).toThrow('Custom PII detector at index 0 has no name');
    expect(() => resolvePiiConfig({ custom: [{ name: 'x', detector: 'x' as never }] })).toThrow(/needs a RegExp or a function/);
    expect(() => resolvePiiConfig({ custom: [{ name: 'x', detector: /x/, strategy: 'nope' as PiiStrategy }] })).toThrow(
      'Unknown strategy "nope" for custom PII detector "x"',
    );
    expect(() => resolvePiiConfig({ custom: [{ name: 'email', detector: /x/ }] })).toThrow(/name of a built-in type/);
    expect(() =>
      resolvePiiConfig({
        custom: [
          { name: 'x', detector: /x/ },
          { name: 'x', detector: /y/ },
        ],
      }),
    ).toThrow(/defined twice/);
    expect(() => resolvePiiConfig({ rules: [] as never })).toThrow(/`rules` must be an object/);
    expect(() => resolvePiiConfig({ custom: {} as never })).toThrow(/`custom` must be an array/);
  });

  it('is frozen', () => {
    const config = resolvePiiConfig();
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.active)).toBe(true);
  });

  it('custom detectors are added after the defaults when rules are not given', () => {
    const config = resolvePiiConfig({ custom: [{ name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'hash' }] });
    expect(config.active).toEqual([...PII_TYPES.map((type) => ({ type, strategy: DEFAULT_PII_RULES[type] })), { type: 'employeeId', strategy: 'hash' }]);
  });
});

describe('toUpperSnake', () => {
  it('turns a type name into the label of its redaction', () => {
    expect(toUpperSnake('IPAddress')).toBe('IP_ADDRESS');
    expect(toUpperSnake('employee-id')).toBe('EMPLOYEE_ID');
  });
});
