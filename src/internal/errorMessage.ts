/**
 * The message of any thrown value: an Error's message, a string as is, anything else as JSON.
 *
 * @example
 * `Model request failed: ${errorMessage(error)}`
 */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}
