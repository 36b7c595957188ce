/**
 * A value as an error message shows it: strings quoted, numbers and `null`/`undefined` as they are,
 * functions as `a function`, anything else as JSON (or its string form when JSON cannot hold it).
 *
 * @example
 * throw new TypeError(`ms must be a number, got ${show('10')}`); // … got "10"
 */
export function show(value: unknown): string {
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  try {
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- JSON has no text for it (a symbol, a toJSON giving undefined): its own string form
    return JSON.stringify(value) ?? String(value);
  } catch {
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- JSON cannot hold it (a bigint, a cycle): its own string form
    return String(value);
  }
}
