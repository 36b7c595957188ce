import { jsonString, needsJsonEscape } from '../../src/internal/jsonString';

describe('jsonString', () => {
  it('is JSON.stringify of a string, byte for byte, for plain and escaped text', () => {
    const samples = [
      'tok ',
      '',
      'é日本語😀',
      'a"b',
      'back\\slash',
      'line\nbreak',
      '\t',
      '\u0000',
      '\u001f',
      '\u007f',
      '\u2028\u2029',
      '\ud800',
      'x\udfff',
      '👩‍👩‍👧',
      '</script>',
    ];
    for (const text of samples) expect(jsonString(text)).toBe(JSON.stringify(text));
    for (let code = 0; code < 0x10000; code += 7) {
      const text = `a${String.fromCharCode(code)}b`;
      expect(jsonString(text)).toBe(JSON.stringify(text));
    }
  });

  it('needsJsonEscape tells, short text (a loop) and long (a regular expression) alike, whether JSON.stringify escapes', () => {
    for (const length of [1, 31, 32, 33, 200]) {
      const plain = 'a'.repeat(length);
      expect(needsJsonEscape(plain)).toBe(false);
      for (const special of ['"', '\\', '\n', '\u0000', '\u001f', '\ud800', '\udfff']) {
        const text = plain.slice(1) + special;
        expect([length, needsJsonEscape(text)]).toEqual([length, true]);
        expect(jsonString(text)).toBe(JSON.stringify(text));
      }
      expect(needsJsonEscape(plain.slice(1) + '\u007f\u2028é')).toBe(false);
    }
  });
});
