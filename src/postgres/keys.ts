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

/**
 * The hash chain of a session's messages (each message's JSON text): entry i is the hex SHA-256 of
 * entry i - 1 and message i, so that equal chains at position n mean equal first n messages.
 */
export function messageChain(texts: readonly string[]): string[] {
  const out = new Array<string>(texts.length);
  let previous = '';
  for (let i = 0; i < texts.length; i++) {
    previous = createHash('sha256').update(previous).update('\n').update(texts[i], 'utf8').digest('hex');
    out[i] = previous;
  }
  return out;
}
