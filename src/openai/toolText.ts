import { UnparsedArguments } from '../messages/unparsedArguments';

/**
 * A tool call's arguments as the OpenAI APIs take them back: JSON text. Exactly what the model
 * wrote when it was not JSON; a string is that text too (UnparsedArguments after a JSON round trip
 * of the session: tool arguments are objects, never a JSON string).
 */
export function argumentsText(args: unknown): string {
  if (args instanceof UnparsedArguments) return args.text;
  if (typeof args === 'string') return args;
  if (args === undefined) return '{}';
  return JSON.stringify(args) ?? '{}';
}

/** A tool result as the OpenAI APIs take it: a string as is, anything else as JSON. */
export function resultText(result: unknown): string {
  if (typeof result === 'string') return result;
  if (result === undefined) return '';
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- JSON has no text for a function or a symbol: its own string form
  return JSON.stringify(result) ?? String(result);
}
