import { UnparsedArguments } from '../../src/messages/unparsedArguments';
import { argumentsText, resultText } from '../../src/openai/toolText';

describe('argumentsText', () => {
  it('gives back what the model wrote, JSON for an object, {} for nothing', () => {
    expect(argumentsText(new UnparsedArguments('{"a":', 'bad json'))).toBe('{"a":');
    expect(argumentsText('{"a":1}')).toBe('{"a":1}');
    expect(argumentsText({ a: 1 })).toBe('{"a":1}');
    expect(argumentsText(undefined)).toBe('{}');
  });
});

describe('resultText', () => {
  it('gives a string as is, JSON for the rest, an empty string for nothing', () => {
    expect(resultText('sunny')).toBe('sunny');
    expect(resultText({ celsius: 21 })).toBe('{"celsius":21}');
    expect(resultText(42)).toBe('42');
    expect(resultText(undefined)).toBe('');
    expect(resultText(Symbol('s'))).toBe('Symbol(s)');
  });
});
