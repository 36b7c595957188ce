import type { ContentPart, Message } from '../../src/index';

export function lengthOf(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (value === undefined) return 0;
  try {
    return JSON.stringify(value)?.length ?? 0;
  } catch {
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- JSON cannot hold it (a bigint, a cycle): any text of about its size does for an estimate
    return String(value).length;
  }
}

function partChars(part: ContentPart): number {
  switch (part.type) {
    case 'text':
    case 'reasoning':
      return part.text.length;
    case 'tool-call':
      return lengthOf(part.args);
    case 'tool-result':
      return lengthOf(part.result);
  }
}

/**
 * The characters of messages' text, tool-call arguments and tool results. With `memo`, each
 * (immutable) message is measured once, so counting a growing history stays cheap.
 */
export function totalChars(messages: readonly Message[], memo?: WeakMap<Message, number>): number {
  let total = 0;
  for (const message of messages) {
    let chars = memo?.get(message);
    if (chars === undefined) {
      chars = 0;
      for (const part of message.content) chars += partChars(part);
      memo?.set(message, chars);
    }
    total += chars;
  }
  return total;
}

/**
 * The default token count of `contextEditing` and `summarization`: the characters of all text,
 * tool-call arguments (as JSON) and tool results (as JSON unless strings), divided by 4 and
 * rounded up.
 *
 * @example
 * approximateTokens([textMessage('user', 'abcdefgh')]); // 2
 */
export function approximateTokens(messages: readonly Message[]): number {
  return Math.ceil(totalChars(messages) / 4);
}
