/** Characters JSON.stringify escapes in a string (and lone surrogates, which it writes as \u escapes). */
// eslint-disable-next-line no-control-regex -- U+0000..U+001F are exactly the characters JSON must escape
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** Up to this length a loop over the characters beats the regular expression's call (a streamed delta is a few characters). */
const SHORT = 32;

/**
 * Whether `JSON.stringify(text)` escapes anything in `text`: when not, it writes `"<text>"`.
 *
 * @example
 * needsJsonEscape('tok '); // false
 * needsJsonEscape('say "hi"'); // true
 */
export function needsJsonEscape(text: string): boolean {
  const length = text.length;
  if (length > SHORT) return NEEDS_ESCAPE.test(text);
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return true;
  }
  return false;
}

/**
 * `JSON.stringify(text)`, without its cost for the common text that needs no escape (a streamed
 * delta of plain words): the same output, byte for byte.
 *
 * @example
 * jsonString('tok '); // '"tok "'
 */
export function jsonString(text: string): string {
  return needsJsonEscape(text) ? JSON.stringify(text) : `"${text}"`;
}
