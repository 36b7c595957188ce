import { isArray } from '../../src/internal/isArray';

describe('isArray', () => {
  it('is true for arrays only', () => {
    expect([[], [1, 2], Object.freeze(['a'])].map(isArray)).toEqual([true, true, true]);
    expect([undefined, null, 'ab', { length: 0 }, new Set([1]), new Uint8Array(2)].map(isArray)).toEqual([false, false, false, false, false, false]);
  });

  it('narrows a readonly array to itself, not to any[]', () => {
    const names = ['a', 'b'] as readonly string[] | undefined;
    if (!isArray(names)) throw new Error('expected an array');
    const upper: string[] = names.map((name) => name.toUpperCase());
    expect(upper).toEqual(['A', 'B']);
  });
});
