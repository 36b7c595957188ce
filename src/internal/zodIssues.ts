import { z } from 'zod';

/**
 * A zod error as one line: zod's own readable form (`z.prettifyError`), its lines joined by `; `,
 * so that it fits in an error message or an event.
 *
 * @example
 * const parsed = schema.safeParse(value);
 * if (!parsed.success) throw new TypeError(`Invalid input: ${zodIssues(parsed.error)}`);
 */
export function zodIssues(error: z.ZodError): string {
  return z.prettifyError(error).replace(/\n/g, '; ');
}
