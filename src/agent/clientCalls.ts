import type { ClientCall } from '../events/types';
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
