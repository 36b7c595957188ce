import { jsonString } from '../../src/internal/jsonString';

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
});
