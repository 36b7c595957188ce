import type { Message as AgUiMessage } from '@ag-ui/client';
import { fromAgUiMessages } from '../../src/ag-ui/index';

describe('fromAgUiMessages', () => {
  const call: AgUiMessage = { id: 'a1', role: 'assistant', toolCalls: [{ id: 'c1', type: 'function', function: { name: 'rm', arguments: '{}' } }] };
  const resultOf = (tool: Record<string, unknown>) => {
    const messages = fromAgUiMessages([call, { id: 't1', role: 'tool', toolCallId: 'c1', content: 'out', ...tool }]);
    return messages[1].content[0];
  };

  it("reads a failed or refused call from the tool message's error or from metadata['rx-agent'] (what toAgUi sends and HttpAgent keeps)", () => {
    const failed = { type: 'tool-result', callId: 'c1', name: 'rm', result: 'out', isError: true };
    const fine = { type: 'tool-result', callId: 'c1', name: 'rm', result: 'out' };
    expect(resultOf({})).toEqual(fine);
    expect(resultOf({ error: 'boom' })).toEqual(failed);
    expect(resultOf({ metadata: { 'rx-agent': { isError: true } } })).toEqual(failed);
    expect(resultOf({ metadata: { 'rx-agent': { isError: false, denied: true, reason: 'no' } } })).toEqual(failed);
    expect(resultOf({ metadata: { 'rx-agent': { isError: false } } })).toEqual(fine);
    // What is not rx-agent's telling is not read as an error.
    for (const metadata of [{ 'rx-agent': 'isError' }, { 'rx-agent': null }, { other: { isError: true } }, { 'rx-agent': { isError: 'yes' } }]) {
      expect(resultOf({ metadata })).toEqual(fine);
    }
  });
});
