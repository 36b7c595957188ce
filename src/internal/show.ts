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
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
