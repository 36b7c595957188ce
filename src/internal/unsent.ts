import { errorMessage } from './errorMessage';

// What goes out in place of a value JSON cannot hold (a BigInt, a cycle), in every wire format
// (the SSE binding, the AI SDK stream, AG-UI), so that a UI reads the same words whichever it uses.

/**
 * The text sent for a tool result JSON cannot hold (as an error result).
 *
 * @example
 * unsentResult(new TypeError('Do not know how to serialize a BigInt')); // 'The tool result could not be sent: Do not know how to serialize a BigInt'
 */
export function unsentResult(error: unknown): string {
  return `The tool result could not be sent: ${errorMessage(error)}`;
}

/**
 * The text sent for a call's arguments JSON cannot hold.
 *
 * @example
 * unsentArguments(error); // 'The arguments could not be sent: …'
 */
export function unsentArguments(error: unknown): string {
  return `The arguments could not be sent: ${errorMessage(error)}`;
}

/**
 * The text sent for any other value JSON cannot hold (a progress value, a custom event's field).
 *
 * @example
 * unsentValue(error); // 'The value could not be sent: …'
 */
export function unsentValue(error: unknown): string {
  return `The value could not be sent: ${errorMessage(error)}`;
}
