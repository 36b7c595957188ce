import { chain } from '../../src/internal/chain';

describe('chain', () => {
  it('continues at once with a plain value (no Promise)', () => {
    expect(chain(2, (n) => n * 3)).toBe(6);
  });

  it('continues after a Promise resolves, and passes a rejection on', async () => {
    await expect(chain(Promise.resolve(2), (n) => n * 3)).resolves.toBe(6);
    await expect(chain(Promise.reject(new Error('down')), () => 1)).rejects.toThrow('down');
  });
});
