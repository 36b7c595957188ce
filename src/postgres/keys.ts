import { createHash } from 'node:crypto';

/**
 * An id as PostgreSQL text can hold it: its JSON string body (quotes, backslashes, control
 * characters such as NUL, and unpaired UTF-16 surrogates escaped), so distinct ids stay distinct
 * and every one is well-formed UTF-8 without NUL.
 */
export function idText(id: string): string {
  return JSON.stringify(id).slice(1, -1);
}

/** The key of an id in the tables: SHA-256 of {@link idText} (an id may be longer than an index entry holds). */
export function keyOf(id: string): Buffer {
  return createHash('sha256').update(idText(id), 'utf8').digest();
}
