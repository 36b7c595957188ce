import type { Message as AgUiMessage } from '@ag-ui/client';
import type { ContentPart, Message } from '../index';
import { isArray } from '../internal/isArray';
import { AG_UI_METADATA_KEY } from './toAgUi';

/**
 * AG-UI messages (a `RunAgentInput`'s conversation) as rx-agent messages: user, system and
 * developer text; assistant text and the tool calls a tool message answers (arguments parsed from
 * their JSON; a call with no result, as a retried attempt or a stopped run leaves it, is left out,
 * so the history always pairs a call with its result); tool results
 * (named after their call), errors when the message says so: its AG-UI `error`, or
 * `metadata['rx-agent']` with `isError: true` or `denied: true` (a failed or refused call, as
 * `toAgUi` tells it and `HttpAgent` keeps it on the message). Reasoning and activity messages are
 * the UI's own and are left out, as are a sub-agent's messages (those with a `subagentRunId`: the
 * call's result stands for them); of multimodal user content, the text parts are kept. Each message keeps its AG-UI `id` as its
 * rx-agent id (the ids `toAgUi` streamed are the history's, so a conversation sent back keeps them).
 *
 * @example
 * agent.run(fromAgUiMessages(input.messages));
 */
export function fromAgUiMessages(messages: readonly AgUiMessage[]): Message[] {
  if (!isArray(messages)) throw new TypeError('fromAgUiMessages: expected an array of AG-UI messages');
  const answered = answeredCalls(messages);
  const names = new Map<string, string>();
  const out: Message[] = [];
  for (const message of messages) {
    if ((message as { subagentRunId?: unknown }).subagentRunId != null) continue;
    switch (message.role) {
      case 'user':
      case 'system':
      case 'developer': {
        const text = textOf(message.content);
        out.push(withAgUiId(message, { role: message.role === 'user' ? 'user' : 'system', content: [{ type: 'text', text }] }));
        break;
      }
      case 'assistant': {
        const content: ContentPart[] = [];
        const text = textOf(message.content);
        if (text !== '') content.push({ type: 'text', text });
        for (const call of message.toolCalls ?? []) {
          if (!answered.has(call.id)) continue;
          names.set(call.id, call.function.name);
          content.push({ type: 'tool-call', callId: call.id, name: call.function.name, args: parseArgs(call.function.arguments) });
        }
        if (content.length > 0) out.push(withAgUiId(message, { role: 'assistant', content }));
        break;
      }
      case 'tool': {
        const result = textOf(message.content);
        const part: ContentPart = { type: 'tool-result', callId: message.toolCallId, name: names.get(message.toolCallId) ?? '', result };
        if (message.error || toldAsError(message.metadata)) (part as { isError?: boolean }).isError = true;
        out.push(withAgUiId(message, { role: 'tool', content: [part] }));
        break;
      }
      default:
        break; // reasoning and activity messages are not part of the model's history
    }
  }
  return out;
}

/**
 * The ids of the calls a tool message answers. A call without one never got a result the model
 * read: its attempt was dropped (a model retry or fallback), or the run stopped (a client's abort,
 * `RUN_ERROR`) or suspended (its answer comes as a `resume` entry, which the run takes from the
 * journal, not from these messages). A model API refuses such a call in a history.
 */
function answeredCalls(messages: readonly AgUiMessage[]): Set<string> {
  const answered = new Set<string>();
  for (const message of messages) {
    if (message.role === 'tool' && (message as { subagentRunId?: unknown }).subagentRunId == null) answered.add(message.toolCallId);
  }
  return answered;
}

/** Whether a tool message's metadata tells a failed or refused call (`toAgUi`'s `metadata['rx-agent']`). */
function toldAsError(metadata: unknown): boolean {
  if (typeof metadata !== 'object' || metadata === null) return false;
  const about: unknown = (metadata as Record<string, unknown>)[AG_UI_METADATA_KEY];
  if (typeof about !== 'object' || about === null) return false;
  const { isError, denied } = about as { isError?: unknown; denied?: unknown };
  return isError === true || denied === true;
}

/** `converted` with the AG-UI message's id, when it has one. */
function withAgUiId(message: AgUiMessage, converted: Message): Message {
  const id = (message as { id?: unknown }).id;
  return typeof id === 'string' && id !== '' ? { id, ...converted } : converted;
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!isArray(content)) return '';
  let text = '';
  for (const part of content) if (isTextPart(part)) text += part.text;
  return text;
}

function isTextPart(part: unknown): part is { type: 'text'; text: string } {
  if (typeof part !== 'object' || part === null) return false;
  const { type, text } = part as { type?: unknown; text?: unknown };
  return type === 'text' && typeof text === 'string';
}

function parseArgs(text: string): unknown {
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
