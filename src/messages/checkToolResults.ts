import type { Message } from './message';
import type { MessageLog } from './messageLog';

/**
 * Checks that every tool result of a run's input answers a call of the conversation (the history
 * or an earlier input message) that has no result yet: the results of calls a client ran.
 * Throws a TypeError naming the call id otherwise (a model API refuses such a history).
 *
 * @example
 * checkToolResults(history, [{ role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'pick_color', result: 'red' }] }]);
 */
export function checkToolResults(history: MessageLog, input: readonly Message[]): void {
  if (!input.some((message) => message.content.some((part) => part.type === 'tool-result'))) return;
  const open = new Set<string>();
  const answered = new Set<string>();
  const read = (message: Message, checked: boolean) => {
    for (const part of message.content) {
      if (part.type === 'tool-call') open.add(part.callId);
      else if (part.type === 'tool-result') {
        if (checked && !open.has(part.callId)) {
          const why = answered.has(part.callId) ? 'has a result already' : 'is not a tool call of the conversation';
          throw new TypeError(`Invalid run input: the tool result for call '${part.callId}' answers no open call: '${part.callId}' ${why}`);
        }
        open.delete(part.callId);
        answered.add(part.callId);
      }
    }
  };
  for (let i = 0; i < history.length; i++) read(history.at(i) as Message, false);
  for (const message of input) read(message, true);
}
