import { show } from './show';

/**
 * The message of any thrown value: an Error's message, a string as is, anything else as
 * {@link show} prints it (JSON, or its string form when JSON cannot hold it).
 *
 * @example
 * `Model request failed: ${errorMessage(error)}`
 */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  return typeof error === 'string' ? error : show(error);
}
