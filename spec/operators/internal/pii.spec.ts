import { createHash } from 'node:crypto';
import {
  createStreamRedactor,
  DEFAULT_PII_RULES,
  findPii,
  PII_TYPES,
  piiReplacement,
  PiiDetectedError,
  redactText,
  resolvePiiConfig,
  toUpperSnake,
  type CustomPiiDetector,
  type PiiOptions,
  type PiiStrategy,
} from '../../../operators/internal/pii';
import { mulberry32 } from '../../support/random';

/** Rules that turn every built-in type off. */
const NONE = Object.fromEntries(PII_TYPES.map((type) => [type, false])) as Record<(typeof PII_TYPES)[number], false>;

/** Every built-in type, none blocking (so whole texts can be redacted). */
const ALL: PiiOptions = {
  rules: { email: 'redact', creditCard: 'mask', ssn: 'redact', phone: 'mask', ip: 'hash', mac: 'redact', url: 'redact', apiKey: 'redact' },
};
const allConfig = resolvePiiConfig(ALL);

const types = (text: string, options: PiiOptions = ALL) => findPii(text, options).map((m) => [m.type, m.value]);
const only = (type: string, text: string) =>
  findPii(text, ALL)
    .filter((m) => m.type === type)
    .map((m) => m.value);

const sha8 = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 8);

const rng = mulberry32;

describe('built-in detectors', () => {
  it('email', () => {
    expect(only('email', 'mail john.doe+x@mail.example.co.uk, or a@b.io.')).toEqual(['john.doe+x@mail.example.co.uk', 'a@b.io']);
    expect(only('email', 'not@an email, @handle, x@localhost')).toEqual([]);
  });

  it('creditCard: 13–19 digits, spaces or dashes, Luhn-checked', () => {
    expect(only('creditCard', 'a 4111 1111 1111 1111 b 4111-1111-1111-1111 c 4111111111111111 d')).toEqual([
      '4111 1111 1111 1111',
      '4111-1111-1111-1111',
      '4111111111111111',
    ]);
    expect(only('creditCard', 'amex 3782 822463 10005, visa13 4222222222222')).toEqual(['3782 822463 10005', '4222222222222']);
    expect(only('creditCard', 'bad luhn 4111 1111 1111 1112')).toEqual([]);
    expect(only('creditCard', 'too short 4111 1111 11')).toEqual([]);
    // Never found inside a longer unbroken digit run.
    expect(only('creditCard', 'id 94111111111111111119 x')).toEqual([]);
    // A card followed by another number is still found.
    expect(only('creditCard', 'card 4111111111111111 12 25')).toEqual(['4111111111111111']);
  });

  it('ssn with the invalid ranges excluded', () => {
    expect(only('ssn', 'ssn 123-45-6789 and 555-12-3456')).toEqual(['123-45-6789', '555-12-3456']);
    for (const bad of ['000-12-3456', '666-12-3456', '900-12-3456', '999-12-3456', '123-00-4567', '123-45-0000', '1123-45-6789', '123-45-67890']) {
      expect(only('ssn', `x ${bad} y`)).toEqual([]);
    }
  });

  it('phone: North-American and international shapes', () => {
    expect(only('phone', 'call +1 555 123 4567, (555) 123-4567, 555-123-4567, 555.123.4567 or +44 20 7946 0958')).toEqual([
      '+1 555 123 4567',
      '(555) 123-4567',
      '555-123-4567',
      '555.123.4567',
      '+44 20 7946 0958',
    ]);
    expect(only('phone', 'ids 99555-123-4567 and 555-123-45678 and 2024-01-15')).toEqual([]);
    // A card is a card, not a phone.
    expect(types('card 4111 1111 1111 1111')).toEqual([['creditCard', '4111 1111 1111 1111']]);
  });

  it('ip: IPv4 with octets <= 255, not in a longer dotted run', () => {
    expect(only('ip', 'hosts 10.0.0.1, 192.168.1.255 and 255.255.255.255.')).toEqual(['10.0.0.1', '192.168.1.255', '255.255.255.255']);
    expect(only('ip', 'v 256.1.1.1 1.2.3.4.5 1.2.3 01.2.3.4 1.2.3.4567')).toEqual([]);
  });

  it('mac with colons or dashes', () => {
    expect(only('mac', 'mac aa:bb:cc:dd:ee:ff and 00-1A-2B-3C-4D-5E')).toEqual(['aa:bb:cc:dd:ee:ff', '00-1A-2B-3C-4D-5E']);
    expect(only('mac', 'aa:bb-cc:dd:ee:ff 10:30:00 aa:bb:cc:dd:ee:ff:00')).toEqual([]);
  });

  it('url with credentials (whole URL, trailing punctuation excluded)', () => {
    expect(only('url', 'db postgres://admin:s3cret@db.example.com:5432/app?ssl=1. ok')).toEqual([
      'postgres://admin:s3cret@db.example.com:5432/app?ssl=1',
    ]);
    expect(only('url', 'see https://example.com/a?b=c and ssh://git@github.com/x')).toEqual([]);
    // The password@host part is not reported as an email: the longer url wins.
    expect(types('https://bob:pw@example.com')).toEqual([['url', 'https://bob:pw@example.com']]);
  });

  it('apiKey: common key shapes', () => {
    const keys = [
      'sk-abc123def456ghi789jkl012mno',
      'sk-proj-Ab3_dE-fGh1jKlMnOpQrStUvWxYz0123456789',
      'AKIAIOSFODNN7EXAMPLE',
      `ghp_${'a1B2'.repeat(9)}`,
      `gho_${'Z9y8'.repeat(9)}`,
      'xoxb-123456789012-abcdefABCDEF',
      `AIza${'Sy0_-'.repeat(7)}`,
      'sk_live_4eC39HqLyjWDarjtT1zdp7dc',
      'pk_live_4eC39HqLyjWDarjtT1zdp7dc',
      'rk_live_4eC39HqLyjWDarjtT1zdp7dc',
      'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
    ];
    for (const key of keys) expect(only('apiKey', `key: ${key} end`)).toEqual([key]);
    expect(only('apiKey', 'task-learning-rate-scheduler-config ask-abc123def456ghi789jkl012 AKIAIOSFODNN7EXAMPL')).toEqual([]);
  });
});

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
      types('x abc', { custom: [{ name: 'a', detector: () => both(2) }, { name: 'b', detector: () => both(2) }] }).map((t) => t[0]),
    ).toEqual(['a']);
  });

  it('uses the default rules when none are given', () => {
    expect(findPii('a@b.io 4111 1111 1111 1111').map((m) => [m.type, m.strategy])).toEqual([
      ['email', 'redact'],
      ['creditCard', 'block'],
    ]);
  });
});

describe('strategies', () => {
  it('redact uses the type in upper snake case', () => {
    expect(piiReplacement('email', 'redact', 'a@b.io')).toBe('[REDACTED_EMAIL]');
    expect(piiReplacement('creditCard', 'redact', '4111111111111111')).toBe('[REDACTED_CREDIT_CARD]');
    expect(piiReplacement('apiKey', 'redact', 'x')).toBe('[REDACTED_API_KEY]');
    expect(piiReplacement('employeeId', 'redact', 'x')).toBe('[REDACTED_EMPLOYEE_ID]');
    expect(toUpperSnake('IPAddress')).toBe('IP_ADDRESS');
    expect(toUpperSnake('employee-id')).toBe('EMPLOYEE_ID');
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

describe('custom detectors', () => {
  it('a RegExp without g finds every match; the caller’s RegExp is untouched', () => {
    const re = /EMP-\d{6}/;
    const config = resolvePiiConfig({ rules: NONE, custom: [{ name: 'employeeId', detector: re, strategy: 'redact' }] });
    expect(redactText('EMP-123456 and EMP-654321', config).text).toBe('[REDACTED_EMPLOYEE_ID] and [REDACTED_EMPLOYEE_ID]');
    expect(re.lastIndex).toBe(0);

    const global = /EMP-\d{6}/g;
    global.lastIndex = 5;
    const sticky = /EMP-\d{6}/y;
    for (const detector of [global, sticky]) {
      const c = resolvePiiConfig({ rules: NONE, custom: [{ name: 'e', detector }] });
      expect(findPii('x EMP-123456 y EMP-000001', c).map((m) => m.value)).toEqual(['EMP-123456', 'EMP-000001']);
      expect(findPii('x EMP-123456 y EMP-000001', c)).toHaveLength(2);
    }
    expect(global.lastIndex).toBe(5);
    expect(sticky.lastIndex).toBe(0);
  });

  it('a function detector; strategy defaults to redact; empty spans are ignored, invalid ones throw', () => {
    const detector = (text: string) => {
      const i = text.indexOf('Project X');
      return i < 0 ? [] : [{ start: i, end: i + 9 }, { start: 0, end: 0 }];
    };
    expect(redactText('about Project X.', { rules: NONE, custom: [{ name: 'codeName', detector }] }).text).toBe('about [REDACTED_CODE_NAME].');
    const bad = resolvePiiConfig({ custom: [{ name: 'bad', detector: (t) => [{ start: 0, end: t.length + 1 }] }] });
    expect(() => findPii('abc', bad)).toThrow(/Custom PII detector "bad" returned an invalid span/);
  });

  it('custom detectors are added after the defaults when rules are not given', () => {
    const config = resolvePiiConfig({ custom: [{ name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'hash' }] });
    expect(config.active).toEqual([
      ...PII_TYPES.map((type) => ({ type, strategy: DEFAULT_PII_RULES[type] })),
      { type: 'employeeId', strategy: 'hash' },
    ]);
  });
});

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
    expect(() => resolvePiiConfig({ custom: [{ name: 'x', detector: /x/ }, { name: 'x', detector: /y/ }] })).toThrow(/defined twice/);
    expect(() => resolvePiiConfig({ rules: [] as never })).toThrow(/`rules` must be an object/);
    expect(() => resolvePiiConfig({ custom: {} as never })).toThrow(/`custom` must be an array/);
  });

  it('is frozen', () => {
    const config = resolvePiiConfig();
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.active)).toBe(true);
  });
});

describe('createStreamRedactor', () => {
  const run = (deltas: string[], options: PiiOptions = ALL, lookBehind?: number) => {
    const r = createStreamRedactor(resolvePiiConfig(options), lookBehind);
    const out = deltas.map((d) => r.push(d));
    out.push(r.flush());
    return { out, text: out.join(''), counts: r.counts };
  };

  it('catches a value split across deltas', () => {
    const { out, counts } = run(['mail me at jo', 'hn@example.com now'], { rules: { email: 'redact' } });
    expect(out).toEqual(['mail me at ', '[REDACTED_EMAIL] ', 'now']);
    expect([...counts]).toEqual([['email', { strategy: 'redact', count: 1 }]]);
  });

  it('text that looked like a value but was not: the same text out, and no counts made', () => {
    const clean = 'room 4 at 10:30, user@ host, build 1234567';
    const { text, counts } = run(clean.split(/(?<= )/));
    expect(text).toBe(clean);
    expect(counts).toBe(createStreamRedactor(resolvePiiConfig(ALL)).counts); // the shared empty map
  });

  it('catches values split into single characters', () => {
    const text = 'card 4111 1111 1111 1111, call (555) 123-4567 and key AKIAIOSFODNN7EXAMPLE.';
    expect(run([...text]).text).toBe(redactText(text, ALL).text);
  });

  it('returns clean deltas as the same string instance, fast', () => {
    const r = createStreamRedactor(allConfig);
    const delta = 'tok ';
    let same = true;
    const t0 = performance.now();
    for (let i = 0; i < 100_000; i++) {
      if (r.push(delta) !== delta) same = false;
    }
    const ms = performance.now() - t0;
    expect(same).toBe(true);
    expect(r.flush()).toBe('');
    expect(ms).toBeLessThan(100);
  });

  it('clean deltas without a trailing space are emitted at once too (punctuation, CJK)', () => {
    const r = createStreamRedactor(allConfig);
    for (const d of ['Hello, world! ', '你好', '世界。', '"quoted" ', '<b>', 'end\n']) expect(r.push(d)).toBe(d);
    expect(r.push('hold')).toBe('');
    expect(r.push('这')).toBe('hold这');
  });

  it('a JWT longer than lookBehind is caught before its signature arrives', () => {
    const header = 'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9';
    const payload = 'eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ';
    const jwt = `${header}.${payload}.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c`;
    const text = `Authorization: Bearer ${jwt} ok`;
    expect(redactText(text, ALL).text).toBe('Authorization: Bearer [REDACTED_API_KEY] ok');
    const { text: out } = run(text.match(/.{1,3}/gs)!, ALL, 64);
    expect(out).toBe('Authorization: Bearer [REDACTED_API_KEY] ok');
  });

  it('default config is used when none is given', () => {
    const r = createStreamRedactor();
    expect(r.push('hi a@b.io ')).toBe('hi [REDACTED_EMAIL] ');
  });

  it('holds back only what could still grow into a value', () => {
    const r = createStreamRedactor(allConfig);
    expect(r.push('hello wor')).toBe('hello ');
    expect(r.held).toBe(3);
    expect(r.push('ld ')).toBe('world ');
    expect(r.push('it costs 5 ')).toBe('it costs ');
    expect(r.push('dollars\n')).toBe('5 dollars\n');
    expect(r.held).toBe(0);
  });

  it('never holds back more than lookBehind characters', () => {
    const random = rng(7);
    for (const lookBehind of [0, 1, 8, 64]) {
      const r = createStreamRedactor(allConfig, lookBehind);
      let maxHeld = 0;
      for (let i = 0; i < 2000; i++) {
        const len = 1 + Math.floor(random() * 12);
        let d = '';
        for (let j = 0; j < len; j++) d += 'ab1@.: -x9'[Math.floor(random() * 10)];
        r.push(d);
        maxHeld = Math.max(maxHeld, r.held);
      }
      expect(maxHeld).toBeLessThanOrEqual(lookBehind);
    }
  });

  it('a value longer than lookBehind is replaced and its continuation swallowed', () => {
    const key = `sk-proj-${'aB3dE5fG7h'.repeat(15)}`;
    const text = `key ${key} done`;
    for (const lookBehind of [24, 64]) {
      const { text: out } = run([...text], ALL, lookBehind);
      expect(out).toBe('key [REDACTED_API_KEY] done');
    }
  });

  it('throws PiiDetectedError for a blocked value before emitting it', () => {
    const r = createStreamRedactor(resolvePiiConfig({ rules: { creditCard: 'block' } }));
    const emitted: string[] = [];
    expect(() => {
      for (const d of ['pay with 4111 ', '1111 1111', ' 1111 ', 'thanks ']) emitted.push(r.push(d));
    }).toThrow(PiiDetectedError);
    expect(emitted.join('')).toBe('pay with ');
  });

  it('block found at flush', () => {
    const r = createStreamRedactor(resolvePiiConfig({ rules: { ssn: 'block' } }));
    expect(r.push('ssn 123-45-')).toBe('ssn ');
    expect(r.push('6789')).toBe('');
    expect(() => r.flush()).toThrow(expect.objectContaining({ name: 'PiiDetectedError', piiType: 'ssn' }));
  });

  it('custom detectors catch values split across deltas (hold back lookBehind)', () => {
    const options: PiiOptions = { custom: [{ name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'redact' }], rules: NONE };
    const { text } = run(['badge EM', 'P-12', '3456 ok ', 'x'.repeat(100), ' EMP-000001'], options, 16);
    expect(text).toBe(`badge [REDACTED_EMPLOYEE_ID] ok ${'x'.repeat(100)} [REDACTED_EMPLOYEE_ID]`);
  });

  it('with no active type, passes everything through', () => {
    const r = createStreamRedactor(resolvePiiConfig({ rules: NONE }));
    const d = 'a@b.io';
    expect(r.push(d)).toBe(d);
    expect(r.flush()).toBe('');
  });

  it('rejects a bad lookBehind', () => {
    expect(() => createStreamRedactor(allConfig, -1)).toThrow(RangeError);
    expect(() => createStreamRedactor(allConfig, 1.5)).toThrow(RangeError);
  });

  describe('property: random splits give the same result as redactText on the whole text', () => {
    const pii = [
      'john.doe@example.com',
      'a@b.io',
      '4111 1111 1111 1111',
      '5500-0000-0000-0004',
      '4111111111111111',
      '123-45-6789',
      '+1 555 123 4567',
      '(555) 123-4567',
      '555.123.4567',
      '+44 20 7946 0958',
      '10.0.0.1',
      '192.168.255.254',
      'aa:bb:cc:dd:ee:ff',
      '00-1A-2B-3C-4D-5E',
      'https://u:p4ss@host.example.com/x?y=1',
      'AKIAIOSFODNN7EXAMPLE',
      'sk-abc123def456ghi789jkl012',
      `ghp_${'a1B2'.repeat(9)}`,
      'xoxb-123456789012-abcdefABC',
      'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w',
      'EMP-123456',
    ];
    const words = ['the', 'tok', 'hello', '(note)', '42', 'x:y', 'v1.2.3', 'ratio 3:4', 'ID', 'at', '@', 'email:', '1999', 'a-b-c', 'über', '😀', '你好', '“q”', "don't"];
    // No '' separator: whitespace-free stretches stay shorter than lookBehind (the documented precondition).
    const seps = [' ', ' ', ' ', '\n', ', ', '. ', ': ', '\t', ' (', ') ', ' - ', '; ', '"', "'", '<', '>', '你', '`', '|', '{', '}'];

    const makeText = (random: () => number, piiShare = 0.4) => {
      const parts: string[] = [];
      const n = 1 + Math.floor(random() * 14);
      for (let i = 0; i < n; i++) {
        const pool = random() < piiShare ? pii : words;
        parts.push(pool[Math.floor(random() * pool.length)]);
        parts.push(seps[Math.floor(random() * seps.length)]);
      }
      return parts.join('');
    };
    const split = (text: string, random: () => number, maxLen: number) => {
      const out: string[] = [];
      for (let i = 0; i < text.length; ) {
        const len = Math.floor(random() * (maxLen + 1)); // empty deltas too
        out.push(text.slice(i, i + len));
        i += len;
      }
      return out;
    };

    const cases: Array<[string, PiiOptions]> = [
      ['built-in types', ALL],
      ['default-like with custom', { ...ALL, custom: [{ name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'hash' }] }],
      ['email only', { rules: { ...NONE, email: 'mask' } }],
    ];
    it.each(cases)('%s', (_name, options) => {
      const config = resolvePiiConfig(options);
      const random = rng(12345);
      for (let i = 0; i < 600; i++) {
        const text = makeText(random);
        const expected = redactText(text, config);
        const r = createStreamRedactor(config, 64);
        let out = '';
        for (const d of split(text, random, 1 + Math.floor(random() * 10))) {
          out += r.push(d);
          if (r.held > 64) throw new Error(`held ${r.held} > 64 for ${JSON.stringify(text)}`);
        }
        out += r.flush();
        if (out !== expected.text) throw new Error(`mismatch for ${JSON.stringify(text)}:\n${out}\n${expected.text}`);
        expect([...r.counts]).toEqual([...expected.counts]);
      }
    });

    it('without PII, the text goes through unchanged whatever the split', () => {
      const random = rng(99);
      for (let i = 0; i < 300; i++) {
        const text = makeText(random, 0);
        expect(findPii(text, allConfig)).toEqual([]);
        const r = createStreamRedactor(allConfig, 8);
        let out = '';
        for (const d of split(text, random, 6)) out += r.push(d);
        out += r.flush();
        expect(out).toBe(text);
      }
    });
  });
});
