import { unsentArguments, unsentResult, unsentValue } from '../../src/internal/unsent';

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
