import { z } from 'zod';
import { zodIssues } from '../internal/zodIssues';

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
  return { role, content: [{ type: 'text', text }] };
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
  const list = Array.isArray(input) ? input : [input];
  const parsed = z.array(MessageSchema).safeParse(list);
  if (!parsed.success) {
    throw new TypeError(`Invalid run input: ${zodIssues(parsed.error)}`);
  }
  return list as Message[];
}
