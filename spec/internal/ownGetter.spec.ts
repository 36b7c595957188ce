import { ownGetter } from '../../src/internal/ownGetter';

describe('ownGetter', () => {
  const defineTotal = ownGetter('total', (parts: number[]) => parts.reduce((a, b) => a + b, 0));

  it('reads the source when the property is read, through a spread, a Proxy and Object.create', () => {
    const parts = [1, 2];
    const target: { total?: number } = {};
    defineTotal(target, parts);
    parts.push(3);
    expect(target.total).toBe(6);
    expect({ ...target }).toEqual({ total: 6 });
    expect(new Proxy(target, {}).total).toBe(6);
    expect((Object.create(target) as { total: number }).total).toBe(6);
  });

  it('shows only the property: the source is under a non-enumerable symbol', () => {
    const target = {};
    defineTotal(target, [4]);
    expect(Object.keys(target)).toEqual(['total']);
    expect(Object.getOwnPropertySymbols(target).map((s) => Object.getOwnPropertyDescriptor(target, s)?.enumerable)).toEqual([false]);
    expect(target).toEqual({ total: 4 });
  });

  it('is configurable: the property can be replaced by a value', () => {
    const target: { total?: number } = {};
    defineTotal(target, [1]);
    expect(Object.getOwnPropertyDescriptor(target, 'total')?.configurable).toBe(true);
    Object.defineProperty(target, 'total', { value: 10 });
    expect(target.total).toBe(10);
  });
});
