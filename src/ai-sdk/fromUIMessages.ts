import type { ContentPart, Message } from '../index';
import { isArray } from '../internal/isArray';

/** A part of a {@link UIMessageLike}: `text`, `reasoning`, `tool-<name>` / `dynamic-tool`, `step-start`, … */
export interface UIMessagePartLike {
  readonly type: string;
  readonly [key: string]: unknown;
}

/** The shape of the AI SDK's `UIMessage` this entry reads (declared here: no `ai` needed). */
export interface UIMessageLike {
  readonly id: string;
  readonly role: 'system' | 'user' | 'assistant';
  readonly parts: readonly UIMessagePartLike[];
}

/**
 * @internal The error text of a call whose answer was dropped before its arguments were complete
 * (a model retry or fallback, the run's end): `toUIMessageStream` settles its part with it, and
 * {@link fromUIMessages} leaves such a call out, as the run's own history has none.
 */
export const CALL_NOT_MADE = "The call was not made: the model's answer was cut off before its arguments were complete.";

/**
 * The AI SDK's `UIMessage`s (a chat request's `messages`) as rx-agent messages: user and system
 * text; per step of an assistant message (`step-start` parts divide them), its text and the calls
 * that have an outcome, then a tool message with their results (`output-available`,
 * `output-error`, `output-denied`), as the model read them: a refusal in the words of
 * `permissions()`, arguments that were not JSON as the text the model wrote. Calls still waiting
 * (for input or an approval), calls never made (their answer was cut off by a model retry or the
 * run's end), reasoning, files and data parts are left out, so the history always pairs a call
 * with its result. A user or system message keeps its `id`; an assistant message's `id` goes to
 * the first message made from it (the run's first answer, whose id `toUIMessageStream` sent), the
 * later ones get their own.
 *
 * @example
 * agent.run(fromUIMessages(body.messages));
 */
export function fromUIMessages(messages: readonly UIMessageLike[]): Message[] {
  if (!isArray(messages)) throw new TypeError('fromUIMessages: expected an array of UI messages');
  const out: Message[] = [];
  for (const message of messages) {
    if (message.role !== 'assistant') {
      let text = '';
      for (const part of message.parts) if (part.type === 'text' && typeof part.text === 'string') text += part.text;
      out.push(withUIId(message.id, { role: message.role === 'system' ? 'system' : 'user', content: [{ type: 'text', text }] }));
      continue;
    }
    let id: unknown = message.id; // the first assistant message made from it takes it
    let content: ContentPart[] = [];
    let results: ContentPart[] = [];
    const flush = () => {
      if (content.length > 0) {
        out.push(withUIId(id, { role: 'assistant', content }));
        id = undefined;
      }
      if (results.length > 0) out.push({ role: 'tool', content: results });
      content = [];
      results = [];
    };
    for (const part of message.parts) {
      if (part.type === 'step-start') flush();
      else if (part.type === 'text' && typeof part.text === 'string' && part.text !== '') content.push({ type: 'text', text: part.text });
      else if (part.type === 'dynamic-tool' || part.type.startsWith('tool-')) {
        const name = part.type === 'dynamic-tool' ? String(part.toolName) : part.type.slice(5);
        const callId = String(part.toolCallId);
        const result = outcomeOf(part, name);
        if (!result) continue;
        content.push({ type: 'tool-call', callId, name, args: argumentsOf(part) });
        results.push({ type: 'tool-result', callId, name, ...result });
      }
    }
    flush();
  }
  return out;
}

function withUIId(id: unknown, message: Message): Message {
  return typeof id === 'string' && id !== '' ? { id, ...message } : message;
}

/**
 * A call's arguments as the run recorded them: its input; for arguments that were not JSON (a
 * `tool-input-error`, whose text the `ai` package keeps as `rawInput`), the text the model wrote,
 * as a session keeps such a call.
 */
function argumentsOf(part: UIMessagePartLike): unknown {
  if (part.input !== undefined) return part.input;
  return typeof part.rawInput === 'string' ? part.rawInput : {};
}

function outcomeOf(part: UIMessagePartLike, name: string): { result: unknown; isError?: boolean } | undefined {
  switch (part.state) {
    case 'output-available':
      // A preliminary output (a sub-agent's text so far) is no outcome yet.
      return part.preliminary === true ? undefined : { result: part.output };
    case 'output-error':
      return part.errorText === CALL_NOT_MADE ? undefined : { result: part.errorText, isError: true };
    case 'output-denied':
      return { result: refusalOf(name, part.approval), isError: true };
    default:
      return undefined;
  }
}

/**
 * The result the model read for a refused call, in the words of `permissions()`:
 * `Permission denied for '<tool>': <reason>`, the reason the person gave (else `denied by user`),
 * `timed out` for a question answered too late or not at all, `denied by policy` for a call refused
 * without a question. (The UI message keeps no other text of a refusal.)
 */
function refusalOf(name: string, approval: unknown): string {
  const { approved, reason } = (typeof approval === 'object' && approval !== null ? approval : {}) as { approved?: unknown; reason?: unknown };
  const why =
    approval == null ? 'denied by policy' : approved !== false ? 'timed out' : typeof reason === 'string' && reason !== '' ? reason : 'denied by user';
  return `Permission denied for '${name}': ${why}`;
}
