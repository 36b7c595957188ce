import { z } from 'zod';
import { uniqueId } from '../internal/uniqueId';
import { zodIssues } from '../internal/zodIssues';
import { show } from '../internal/show';

/** Who wrote a message. */
export type Role = 'system' | 'user' | 'assistant' | 'tool';

/** A text part. */
export interface TextPart {
  readonly type: 'text';
  readonly text: string;
}
/** A reasoning (thinking) part, as some models stream it. */
export interface ReasoningPart {
  readonly type: 'reasoning';
  readonly text: string;
}
/** A complete tool call the model made. */
export interface ToolCallPart {
  readonly type: 'tool-call';
  readonly callId: string;
  readonly name: string;
  readonly args: unknown;
}
/** The result of one tool call, as the model will read it. */
export interface ToolResultPart {
  readonly type: 'tool-result';
  readonly callId: string;
  readonly name: string;
  readonly result: unknown;
  readonly isError?: boolean;
}

/** One part of a message's content. */
export type ContentPart = TextPart | ReasoningPart | ToolCallPart | ToolResultPart;

/**
 * One message of a conversation.
 *
 * @example
 * const m: Message = { role: 'user', content: [{ type: 'text', text: 'Hi' }] };
 */
export interface Message {
  /**
   * Stable id, made when the message is (`msg_…`); sessions, snapshots and journals keep it. Optional
   * in the type so that a message written by hand is one: the runtime gives it an id when it joins
   * a run (its input) or a session.
   */
  readonly id?: string;
  readonly role: Role;
  readonly content: readonly ContentPart[];
}

/** zod schema of a {@link ContentPart}. */
export const ContentPartSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text'), text: z.string() }),
  z.object({ type: z.literal('reasoning'), text: z.string() }),
  // `args` and `result` may be undefined (a tool that returns nothing), which JSON leaves out.
  z.object({ type: z.literal('tool-call'), callId: z.string(), name: z.string(), args: z.unknown().optional() }),
  z.object({
    type: z.literal('tool-result'),
    callId: z.string(),
    name: z.string(),
    result: z.unknown().optional(),
    isError: z.boolean().optional(),
  }),
]);

/** zod schema of a {@link Message}; used when a session snapshot is restored. */
export const MessageSchema = z.object({
  id: z.string().min(1).optional(),
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.array(ContentPartSchema),
});

/**
 * A message with one text part.
 *
 * @example
 * textMessage('user', 'What is the weather in Paris?');
 */
export function textMessage(role: Role, text: string): Message {
  return { id: messageId(), role, content: [{ type: 'text', text }] };
}

/**
 * A new message id (`msg_<uuid>`).
 *
 * @example
 * const m: Message = { id: messageId(), role: 'user', content: [{ type: 'text', text: 'Hi' }] };
 */
export function messageId(): string {
  return uniqueId('msg');
}

/**
 * `message` with an id: itself when it has one, else a copy with a new one.
 *
 * @example
 * withId({ role: 'user', content: [] }).id; // 'msg_…'
 */
export function withId(message: Message): Message {
  return typeof message.id === 'string' && message.id !== '' ? message : { ...message, id: messageId() };
}

/**
 * `messages` with ids: the same array when every one has one, else a copy (one object per message
 * that lacked an id).
 *
 * @example
 * withIds(snapshot.messages).every((m) => m.id); // true
 */
export function withIds(messages: readonly Message[]): Message[] {
  let out: Message[] | undefined;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (typeof m.id === 'string' && m.id !== '') {
      if (out) out.push(m);
      continue;
    }
    out ??= messages.slice(0, i);
    out.push({ ...m, id: messageId() });
  }
  return out ?? (messages as Message[]);
}

/**
 * The text of a message: its text parts joined, reasoning and tool parts left out.
 *
 * @example
 * textOf(textMessage('assistant', 'Done.')); // 'Done.'
 */
export function textOf(message: Message | undefined): string {
  if (!message) return '';
  let text = '';
  for (const part of message.content) if (part.type === 'text') text += part.text;
  return text;
}

/** What `agent.run` accepts as input: a string (a user message), a message, or several. */
export type RunInput = string | Message | readonly Message[];

/**
 * Normalises a run's input to messages, checking a non-string input with zod.
 *
 * @example
 * toMessages('Hi'); // [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }]
 */
export function toMessages(input: RunInput): Message[] {
  if (typeof input === 'string') return [textMessage('user', input)];
  if (input === null || typeof input !== 'object') {
    throw new TypeError(`Invalid run input: expected a string, a message or an array of messages, got ${show(input)}`);
  }
  const list = Array.isArray(input) ? input : [input];
  const parsed = z.array(MessageSchema).safeParse(list);
  if (!parsed.success) {
    throw new TypeError(`Invalid run input: ${zodIssues(parsed.error)}`);
  }
  return withIds(list as Message[]);
}
