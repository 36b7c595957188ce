import { resolvePiiConfig } from '../../../../operators/internal/pii/config';
import { API_KEY_RE, BUILTINS, noBuiltinFits, PII_TYPES } from '../../../../operators/internal/pii/detectors';
import { findPii } from '../../../../operators/internal/pii/findPii';
import { redactText } from '../../../../operators/internal/pii/redact';
import { NONE, only, types } from './fixtures';

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
    expect(only('url', 'db postgres://admin:s3cret@db.example.com:5432/app?ssl=1. ok')).toEqual(['postgres://admin:s3cret@db.example.com:5432/app?ssl=1']);
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

  it('apiKey: tried where a run starts only, it finds what the whole regular expression finds', () => {
    const oracle = (text: string) => [...text.matchAll(API_KEY_RE)].map((m) => ({ start: m.index, end: m.index + m[0].length }));
    const pieces = [
      'sk-',
      'sk_live_',
      'AKIA',
      'ghp_',
      'xoxb-',
      'eyJ',
      'AIza',
      'ABCDEFGHIJKLMNOP',
      'a1B2c3D4e5',
      '0123456789',
      '_',
      '-',
      '.',
      ' ',
      '/',
      '+',
      'é',
    ];
    let seed = 11;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    let found = 0;
    for (let k = 0; k < 5_000; k++) {
      let text = '';
      for (let n = 1 + random(12); n > 0; n--) text += pieces[random(pieces.length)];
      const expected = oracle(text);
      found += expected.length;
      expect([text, BUILTINS.apiKey.find(text)]).toEqual([text, expected]);
    }
    expect(found).toBeGreaterThan(100); // 174 with this seed
  });

  it('a text with fewer digits than a type needs does not run its finder (one count for all)', () => {
    const finders = (['creditCard', 'phone', 'ssn', 'ip'] as const).map((type) => jest.spyOn(BUILTINS[type], 'find'));
    try {
      const config = resolvePiiConfig(); // after the spies: the config holds the finders it was given
      expect(findPii(`id ${'x'.repeat(60)} 1.2 v3-a`, config)).toEqual([]);
      for (const finder of finders) expect(finder).not.toHaveBeenCalled();
      expect(findPii('call 555-123-4567', config).map((m) => m.type)).toEqual(['phone']);
      expect(finders[1]).toHaveBeenCalled();
    } finally {
      finders.forEach((finder) => finder.mockRestore());
    }
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
      return i < 0
        ? []
        : [
            { start: i, end: i + 9 },
            { start: 0, end: 0 },
          ];
    };
    expect(redactText('about Project X.', { rules: NONE, custom: [{ name: 'codeName', detector }] }).text).toBe('about [REDACTED_CODE_NAME].');
    const bad = resolvePiiConfig({ custom: [{ name: 'bad', detector: (t) => [{ start: 0, end: t.length + 1 }] }] });
    expect(() => findPii('abc', bad)).toThrow(/Custom PII detector "bad" returned an invalid span/);
  });

  it('finds the shortest value of each type (what each finder checks before its regular expressions)', () => {
    expect(only('email', 'a@b.io')).toEqual(['a@b.io']);
    expect(only('creditCard', '4222222222222')).toEqual(['4222222222222']);
    expect(only('ssn', '123-45-6789')).toEqual(['123-45-6789']);
    expect(only('phone', '+12345678')).toEqual(['+12345678']);
    expect(only('phone', '555-123-4567')).toEqual(['555-123-4567']);
    expect(only('ip', '1.2.3.4')).toEqual(['1.2.3.4']);
    expect(only('mac', 'aa:bb:cc:dd:ee:ff')).toEqual(['aa:bb:cc:dd:ee:ff']);
    expect(only('url', 's://u:p@h')).toEqual(['s://u:p@h']);
    expect(only('apiKey', 'xoxb-1234567890')).toEqual(['xoxb-1234567890']);
  });

  it('noBuiltinFits: true only for windows where no built-in finder finds anything', () => {
    expect(['v2 a@b ', '42 tok ', 'a@b', '1.2.3', 'x://y', ''].map(noBuiltinFits)).toEqual([true, true, true, true, true, true]);
    expect(['a@b.io', '1.2.3.4', 's://u:p@h', '+12345678', 'xoxb-1234567890'].map(noBuiltinFits)).toEqual([false, false, false, false, false]);
    // Random short windows over the characters values are made of.
    const alphabet = '0123456789.@:/-+ ()abxy';
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    let fits = 0;
    for (let k = 0; k < 20_000; k++) {
      let text = '';
      for (let n = random(15); n > 0; n--) text += alphabet[random(alphabet.length)];
      if (!noBuiltinFits(text)) continue;
      fits++;
      for (const type of PII_TYPES) expect([type, text, BUILTINS[type].find(text)]).toEqual([type, text, []]);
    }
    expect(fits).toBeGreaterThan(1000);
  });
});
