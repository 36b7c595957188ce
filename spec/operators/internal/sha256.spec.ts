import { createHash } from 'node:crypto';
import { portableSha256Hex, sha256Hex } from '../../../operators/internal/sha256';

// FIPS 180-2 test vectors, and UTF-8 text beyond ASCII.
const vectors: Array<[string, string]> = [
  ['', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'],
  ['abc', 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'],
  ['abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq', '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1'],
];

describe('sha256Hex', () => {
  it.each(vectors)('hashes %j to the standard digest, in both implementations', (text, digest) => {
    expect(sha256Hex(text)).toBe(digest);
    expect(portableSha256Hex(text)).toBe(digest);
  });

  it('hashes the UTF-8 bytes of any text the same way in both implementations (and as Node does)', () => {
    const texts = ['Zürich 🌞', 'é', '日本語のテキスト', 'a'.repeat(1000), '\uD800 lone surrogate', JSON.stringify({ k: [1, 'x\n'] })];
    for (const text of texts) {
      const expected = createHash('sha256').update(text, 'utf8').digest('hex');
      expect(portableSha256Hex(text)).toBe(expected);
      expect(sha256Hex(text)).toBe(expected);
    }
  });
});
