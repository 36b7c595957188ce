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

  it('leaves out a call no tool message answers (a dropped attempt, a stopped run): every call in the history has its result', () => {
    const messages: AgUiMessage[] = [
      { id: 'u1', role: 'user', content: 'go' },
      // Cut off by a model retry: TOOL_CALL_END came, no result.
      { id: 'a1', role: 'assistant', toolCalls: [{ id: 'cut', type: 'function', function: { name: 'rm', arguments: '{"x"' } }] },
      {
        id: 'a2',
        role: 'assistant',
        content: 'Both.',
        toolCalls: [
          { id: 'c1', type: 'function', function: { name: 'rm', arguments: '{}' } },
          { id: 'stopped', type: 'function', function: { name: 'rm', arguments: '{}' } },
        ],
      },
      { id: 't1', role: 'tool', toolCallId: 'c1', content: 'out' },
    ];
    expect(fromAgUiMessages(messages)).toEqual([
      { id: 'u1', role: 'user', content: [{ type: 'text', text: 'go' }] },
      {
        id: 'a2',
        role: 'assistant',
        content: [
          { type: 'text', text: 'Both.' },
          { type: 'tool-call', callId: 'c1', name: 'rm', args: {} },
        ],
      },
      { id: 't1', role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'rm', result: 'out' }] },
    ]);
  });
});
