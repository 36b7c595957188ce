import { TextBuilder } from '../../src/internal/textBuilder';

/** '0,1,2,…' as the pieces '0,', '1,', … would build it. */
function numbered(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${i},`);
}

describe('TextBuilder', () => {
  it('is the empty string with no pieces, or only empty ones', () => {
    const text = new TextBuilder();
    expect(text.toString()).toBe('');
    text.append('');
    expect(text.toString()).toBe('');
  });

  // 64 pieces fill the buffer once: below, at, just past and several times past that.
  it.each([1, 63, 64, 65, 128, 129, 1000])('joins %i pieces in order', (count) => {
    const pieces = numbered(count);
    const text = new TextBuilder();
    for (const piece of pieces) text.append(piece);
    expect(text.toString()).toBe(pieces.join(''));
  });

  it('can be read while pieces keep coming, and keeps them all', () => {
    const pieces = numbered(150);
    const text = new TextBuilder();
    for (let i = 0; i < 70; i++) text.append(pieces[i]);
    expect(text.toString()).toBe(pieces.slice(0, 70).join(''));
    for (let i = 70; i < 150; i++) text.append(pieces[i]);
    expect(text.toString()).toBe(pieces.join(''));
  });
});
