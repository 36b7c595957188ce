import { resolvePiiConfig, type PiiOptions } from '../../../../operators/internal/pii/config';
import * as findPiiModule from '../../../../operators/internal/pii/findPii';
import { findPii } from '../../../../operators/internal/pii/findPii';
import { PiiDetectedError, redactText } from '../../../../operators/internal/pii/redact';
import { createStreamRedactor } from '../../../../operators/internal/pii/streamRedactor';
import { mulberry32 } from '../../../support/random';
import { ALL, NONE } from './fixtures';

const allConfig = resolvePiiConfig(ALL);
const rng = mulberry32;

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

  it('a short window with a digit or an `@` that no value fits goes out at its safe boundary, unchanged', () => {
    const r = createStreamRedactor(allConfig);
    const detect = jest.spyOn(findPiiModule, 'detect');
    try {
      expect(r.push('a@b ')).toBe('a@b '); // nothing held
      expect(r.push('v2 ')).toBe(''); // a space after a digit may sit inside a phone number
      expect(r.push('tok ')).toBe('v2 tok ');
      expect(detect).not.toHaveBeenCalled(); // judged without the detectors
    } finally {
      detect.mockRestore();
    }
    expect(r.push('x@y')).toBe('');
    expect(r.push('.io ')).toBe('[REDACTED_EMAIL] '); // the window now fits an email
    expect(r.push('555 ')).toBe('');
    expect(r.push('123 ')).toBe('');
    expect(r.push('4567 ok ')).toBe('***-***-4567 ok ');
    expect(r.flush()).toBe('');
    expect([...r.counts]).toEqual([
      ['email', { strategy: 'redact', count: 1 }],
      ['phone', { strategy: 'mask', count: 1 }],
    ]);
  });

  it('a short window is judged whole with a small lookBehind too', () => {
    const r = createStreamRedactor(allConfig, 4);
    expect(r.push('v2 ')).toBe('');
    expect(r.push('tok')).toBe('v2'); // over lookBehind: the oldest characters go out
    expect(r.held).toBe(4);
    expect(r.flush()).toBe(' tok');
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

  it('a whitespace-free stretch longer than lookBehind (an identifier, base64) goes out unchanged, and a key after it is caught', () => {
    const random = rng(5);
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    const blob = Array.from({ length: 600 }, () => alphabet[Math.floor(random() * 64)]).join('');
    for (const text of [blob, `id_${'camelCaseName'.repeat(40)}`, `${blob}\u00e9${blob}`]) {
      expect(findPii(text, allConfig)).toEqual([]);
      const deltas = text.match(/.{1,8}/gs) ?? [];
      expect(run(deltas).text).toBe(text);
    }
    const key = 'sk-abc123def456ghi789jkl012';
    const deltas = `${blob} ${key} end`.match(/.{1,8}/gs) ?? [];
    expect(run(deltas).text).toBe(`${blob} [REDACTED_API_KEY] end`);
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
    const words = [
      'the',
      'tok',
      'hello',
      '(note)',
      '42',
      'x:y',
      'v1.2.3',
      'ratio 3:4',
      'ID',
      'at',
      '@',
      'email:',
      '1999',
      'a-b-c',
      'über',
      '😀',
      '你好',
      '“q”',
      "don't",
    ];
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
      for (let i = 0; i < text.length;) {
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
