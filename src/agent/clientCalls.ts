import type { ClientCall } from '../events/types';
import type { Message } from '../messages/message';
import type { MessageLog } from '../messages/messageLog';
import type { Tool } from '../tools/defineTool';

/** Whether the client runs the tool's calls (made with `defineClientTool`). */
export function isClientTool(tool: Tool | undefined): boolean {
  return tool?.client === true;
}

/**
 * The calls of the turn's last assistant message that no later message answers: those a turn
 * that ended on client tools leaves to the client. Empty when the turn's answer has none.
 */
export function unansweredCalls(log: MessageLog, turnStart: number): ClientCall[] {
  for (let i = log.length - 1; i >= turnStart; i--) {
    const message = log.at(i);
    if (message?.role !== 'assistant') continue;
    if (!message.content.some((part) => part.type === 'tool-call')) return [];
    const answered = new Set<string>();
    for (let j = i + 1; j < log.length; j++) {
      for (const part of log.at(j)?.content ?? []) if (part.type === 'tool-result') answered.add(part.callId);
    }
    const calls: ClientCall[] = [];
    for (const part of message.content) {
      if (part.type === 'tool-call' && !answered.has(part.callId)) calls.push({ callId: part.callId, name: part.name, args: part.args });
    }
    return calls;
  }
  return [];
}

/** The result a call of a client tool gets when the next run's input brings none for it. */
export const CLIENT_CALL_NOT_RUN = 'The client did not run this call: no result came for it.';

/**
 * The run's input, preceded by an error result for each call the history left to the client that
 * the input does not answer (a new message instead of the results, or only some of them): a model
 * API refuses a history with a call and no result after it, so without this a session whose
 * client never answered could not be run again.
 *
 * @example
 * closeOpenCalls(history, [{ role: 'user', content: [{ type: 'text', text: 'Never mind' }] }]);
 * // [{ role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'pick_color', result: CLIENT_CALL_NOT_RUN, isError: true }] }, { role: 'user', … }]
 */
export function closeOpenCalls(history: MessageLog, input: Message[]): Message[] {
  const open = unansweredCalls(history, 0);
  if (open.length === 0) return input;
  const answered = new Set<string>();
  for (const message of input) for (const part of message.content) if (part.type === 'tool-result') answered.add(part.callId);
  const missing = open.filter((call) => !answered.has(call.callId));
  if (missing.length === 0) return input;
  const results = missing.map(({ callId, name }) => ({ type: 'tool-result' as const, callId, name, result: CLIENT_CALL_NOT_RUN, isError: true }));
  return [{ role: 'tool', content: results }, ...input];
}
