import { textMessage, textOf } from '../../src/index';
import { SessionContent, copyState, foldTurns } from '../../src/session/sessionTurns';

const turn = (runId: string, texts: string[], n: number, replace?: true) => ({
  runId,
  messages: texts.map((text) => textMessage('user', text)),
  state: { n: { version: 1, value: n } },
  ...(replace ? { replace } : {}),
});

describe('foldTurns', () => {
  it("appends each turn's messages and sets its state entries; a replace turn starts over", () => {
    const { content } = foldTurns(new SessionContent([], { other: { version: 1, value: 'kept' } }), [turn('a', ['1', '2'], 1), turn('b', ['3'], 2)]);
    expect(content.messages.map(textOf)).toEqual(['1', '2', '3']);
    expect(content.state).toEqual({ other: { version: 1, value: 'kept' }, n: { version: 1, value: 2 } });
    const replaced = foldTurns(new SessionContent([], {}), [turn('a', ['1', '2'], 1), turn('b', ['s'], 2, true), turn('c', ['4'], 3)]).content;
    expect([replaced.messages.map(textOf), replaced.state]).toEqual([['s', '4'], { n: { version: 1, value: 3 } }]);
  });

  it('gives the state as it stood after the last step that left at most `at` messages', () => {
    const turns = [turn('a', ['1', '2'], 1), turn('b', ['3', '4'], 2)];
    const stateAt = (at: number) => JSON.parse(foldTurns(new SessionContent([], { n: { version: 1, value: 0 } }), turns, at).stateAt) as unknown;
    expect([0, 1, 2, 3, 4, 9].map(stateAt)).toEqual([
      { n: { version: 1, value: 0 } },
      { n: { version: 1, value: 0 } },
      { n: { version: 1, value: 1 } },
      { n: { version: 1, value: 1 } },
      { n: { version: 1, value: 2 } },
      { n: { version: 1, value: 2 } },
    ]);
  });

  it('keeps a state key named __proto__ as data', () => {
    const state = JSON.parse('{"__proto__":{"version":1,"value":7}}') as Record<string, { version: number; value: unknown }>;
    const copy = copyState(state);
    expect(Object.keys(copy)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    const { content } = foldTurns(new SessionContent([], {}), [{ runId: 'a', messages: [], state }]);
    expect(JSON.stringify(content.state)).toBe('{"__proto__":{"version":1,"value":7}}');
  });
});
