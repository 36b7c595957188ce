import { errorMessage } from './errorMessage';
import { isArray } from './isArray';

// What goes out in place of a value JSON cannot hold (a BigInt, a cycle), in every wire format
// (the SSE binding, the AI SDK stream, AG-UI), so that a UI reads the same words whichever it uses.

/**
 * What a UI is told of an error when the user's `onError` (which masks error texts) throws: the
 * AI SDK's own default text. The error's message is not used, as it may be what was to be hidden.
 *
 * @example
 * toUIMessageStream({ onError: () => { throw new Error('oops'); } }); // errors go out as MASKED_ERROR_TEXT
 */
export const MASKED_ERROR_TEXT = 'An error occurred.';

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

/**
 * The error `JSON.stringify` throws for `value` (a `BigInt`, a cycle, a `toJSON` that throws), else
 * undefined. A string, number, boolean or undefined is not looked at: JSON holds them (or leaves
 * them out).
 *
 * @example
 * jsonProblem({ n: 10n }); // TypeError: Do not know how to serialize a BigInt
 * jsonProblem('text'); // undefined
 */
export function jsonProblem(value: unknown): unknown {
  if (value === null || (typeof value !== 'object' && typeof value !== 'bigint')) return undefined;
  try {
    if (isPlainJson(value, PLAIN_SCAN_DEPTH)) return undefined; // seen without writing it (the usual case)
    JSON.stringify(value);
    return undefined;
  } catch (error) {
    return error;
  }
}

/** How many levels of objects {@link isPlainJson} looks into before `JSON.stringify` is asked. */
export const PLAIN_SCAN_DEPTH = 8;

/**
 * What a UI is told of `error`: `onError`'s text ({@link MASKED_ERROR_TEXT} without one). An `onError` that
 * throws, or returns no string, tells {@link MASKED_ERROR_TEXT}: thrown into the run's emitter it
 * would break the stream, and the error's own text may be what it was to hide.
 *
 * @example
 * toldOfError(error, () => { throw new Error('oops'); }); // 'An error occurred.'
 */
export function toldOfError(error: { name: string; message: string }, onError: ((error: { name: string; message: string }) => string) | undefined): string {
  if (!onError) return MASKED_ERROR_TEXT;
  try {
    const text: unknown = onError(error);
    return typeof text === 'string' ? text : MASKED_ERROR_TEXT;
  } catch {
    return MASKED_ERROR_TEXT;
  }
}

/** How deep {@link sendable} looks in an event for what JSON cannot hold (deeper, the whole field is replaced). */
export const SENDABLE_DEPTH = 16;

/**
 * Whether JSON holds `value`, seen without writing it: true for strings, numbers, booleans, null
 * and undefined, alone or in plain objects (made by `{}`) and arrays without `toJSON`, down to
 * `depth` levels of objects. False says only that `JSON.stringify` is to tell (a `BigInt`, a
 * `Date`, a class's instance, a value deeper). A getter that throws throws.
 *
 * @example
 * isPlainJson({ callId: 'c1', value: { done: 2 } }, 4); // true
 * isPlainJson({ n: 10n }, 4); // false: JSON.stringify is to tell (here it throws)
 */
export function isPlainJson(value: unknown, depth: number): boolean {
  if (typeof value !== 'object') return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' || value === undefined;
  return value === null || isPlainObject(value, depth);
}

/** {@link isPlainJson} of an object; the fields that are strings or numbers are looked at in the loop, without a call. */
function isPlainObject(value: object, depth: number): boolean {
  if (depth === 0 || (value as { toJSON?: unknown }).toJSON !== undefined) return false;
  if (isArray(value)) {
    for (let i = 0; i < value.length; i++) if (!isPlainJson(value[i], depth - 1)) return false;
    return true;
  }
  // Not `{}`'s (a boxed BigInt, a class's instance): JSON.stringify tells. The loop sees the fields JSON writes, and any inherited.
  if (value.constructor !== Object) return false;
  for (const key in value) {
    const field = (value as Record<string, unknown>)[key];
    switch (typeof field) {
      case 'string':
      case 'number':
      case 'boolean':
      case 'undefined':
        continue;
      case 'object':
        if (field === null || isPlainObject(field, depth - 1)) continue;
    }
    return false;
  }
  return true;
}

/**
 * `value` with what JSON cannot hold in it replaced by {@link unsentValue}: looked for down to
 * `depth` levels (0: the value whole), a cycle cut where it closes (`path`: the objects above).
 * Meant for the rare value whose `JSON.stringify` threw: it tries every level again.
 *
 * @example
 * sendable({ id: 'c1', value: 5n }, 1); // { id: 'c1', value: 'The value could not be sent: Do not know how to serialize a BigInt' }
 */
export function sendable(value: unknown, depth: number, path: object[] = []): unknown {
  let failure: unknown;
  try {
    JSON.stringify(value);
    return value;
  } catch (error) {
    failure = error;
  }
  if (depth > 0 && typeof value === 'object' && value !== null && !path.includes(value)) {
    path.push(value);
    try {
      if (typeof (value as { toJSON?: unknown }).toJSON !== 'function') {
        if (isArray(value)) return value.map((item) => sendable(item, depth - 1, path));
        const out: Record<string, unknown> = {};
        for (const key of Object.keys(value)) out[key] = sendable((value as Record<string, unknown>)[key], depth - 1, path);
        return out;
      }
    } catch {
      // A getter or a proxy that throws: the value is replaced whole.
    } finally {
      path.pop();
    }
  }
  return unsentValue(failure);
}

/**
 * `event` as every wire format and the journal send it when JSON cannot hold it whole: a tool
 * result JSON cannot hold as an error result saying so ({@link unsentResult}), a call's
 * arguments (`tool-call`, `permission-request`) as {@link unsentArguments}, and any other such
 * value as {@link unsentValue} in its place. The event itself when JSON holds it.
 *
 * @example
 * sendableEvent({ type: 'tool-result', callId: 'c1', result: 10n, isError: false }); // { …, result: 'The tool result could not be sent: …', isError: true }
 */
export function sendableEvent(event: object): object {
  const fields = event as Record<string, unknown>;
  let out = fields;
  if (fields.type === 'tool-result') {
    const problem = jsonProblem(fields.result);
    if (problem !== undefined) out = { ...fields, result: unsentResult(problem), isError: true };
  } else if (fields.type === 'tool-call' || fields.type === 'permission-request') {
    const problem = jsonProblem(fields.args);
    if (problem !== undefined) out = { ...fields, args: unsentArguments(problem) };
  }
  return sendable(out, SENDABLE_DEPTH) as object;
}
