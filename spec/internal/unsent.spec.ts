import { sendable, unsentArguments, unsentResult, unsentValue } from '../../src/internal/unsent';

describe('unsent texts', () => {
  it('say what could not be sent and why, in the words every wire format uses', () => {
    let error: unknown;
    try {
      JSON.stringify({ n: 10n });
    } catch (thrown) {
      error = thrown;
    }
    expect(unsentResult(error)).toBe('The tool result could not be sent: Do not know how to serialize a BigInt');
    expect(unsentArguments(error)).toBe('The arguments could not be sent: Do not know how to serialize a BigInt');
    expect(unsentValue(error)).toBe('The value could not be sent: Do not know how to serialize a BigInt');
  });
});

describe('sendable', () => {
  const big = 'The value could not be sent: Do not know how to serialize a BigInt';

  it('replaces what JSON cannot hold down to `depth` levels, the rest as it is', () => {
    const value = { id: 'c1', value: { n: 5n, ok: true }, list: [1, 2n] };
    expect(sendable(value, 0)).toBe(big);
    expect(sendable(value, 1)).toEqual({ id: 'c1', value: big, list: big });
    expect(sendable(value, 2)).toEqual({ id: 'c1', value: { n: big, ok: true }, list: [1, big] });
    expect(sendable({ fine: 1 }, 3)).toEqual({ fine: 1 });
  });

  it('cuts a cycle where it closes', () => {
    const cycle: Record<string, unknown> = { name: 'loop' };
    cycle.self = cycle;
    const out = sendable({ cycle }, 4) as { cycle: { name: string; self: string } };
    expect(out.cycle.name).toBe('loop');
    expect(out.cycle.self).toMatch(/^The value could not be sent: .*circular/i);
  });
});
