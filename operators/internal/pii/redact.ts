/**
 * Redaction: the replacement of each strategy, and a whole text redacted at once.
 */
import { sha256Hex } from '../sha256';
import { toUpperSnake, type PiiConfig, type PiiOptions, type PiiStrategy } from './config';
import { isDigit } from './detectors';
import { findPii, type PiiMatch } from './findPii';

/**
 * How many values of one type were handled, and with which strategy.
 *
 * @example
 * const count: PiiCount = { strategy: 'redact', count: 2 };
 */
export interface PiiCount {
  strategy: PiiStrategy;
  count: number;
}

/**
 * The result of {@link redactText}: the new text and, per type (in order of first occurrence),
 * the strategy and number of values replaced.
 *
 * @example
 * const { text, counts } = redactText('a@b.io', config); // text '[REDACTED_EMAIL]', counts.get('email') { strategy: 'redact', count: 1 }
 */
export interface RedactResult {
  text: string;
  counts: Map<string, PiiCount>;
}

/**
 * Raised by the `block` strategy. The message names the type only, never the value; `count` is
 * the number of values of that type in the text being processed.
 *
 * @example
 * try { redactText('card 4111 1111 1111 1111', resolvePiiConfig()); } catch (e) { (e as PiiDetectedError).piiType; } // 'creditCard'
 */
export class PiiDetectedError extends Error {
  override readonly name: string = 'PiiDetectedError';
  constructor(
    readonly piiType: string,
    readonly count = 1,
  ) {
    super(`PII detected: ${piiType}`);
  }
}

function lastDigits(value: string, n: number): string {
  let out = '';
  for (let i = value.length - 1; i >= 0 && out.length < n; i--) {
    if (isDigit(value.charCodeAt(i))) out = value[i] + out;
  }
  return out;
}

/**
 * The text that replaces `value` of `type` under `strategy`: `redact` → `[REDACTED_<TYPE>]`;
 * `mask` → `u***@example.com` (email), `****-****-****-0366` (card), `***-***-1234` (phone), else the
 * last 4 characters kept and the rest `*` (all `*` when 4 or fewer); `hash` → `<type_hash:8 hex of
 * sha256>`; `block` throws {@link PiiDetectedError}.
 *
 * @example
 * piiReplacement('ip', 'hash', '10.0.0.1'); // '<ip_hash:…8 hex…>'
 */
export function piiReplacement(type: string, strategy: PiiStrategy, value: string): string {
  switch (strategy) {
    case 'redact':
      return `[REDACTED_${toUpperSnake(type)}]`;
    case 'hash':
      return `<${type}_hash:${sha256Hex(value).slice(0, 8)}>`;
    case 'block':
      throw new PiiDetectedError(type);
    case 'mask': {
      if (type === 'email') {
        const at = value.lastIndexOf('@');
        if (at > 0) return `${value[0]}***${value.slice(at)}`;
      } else if (type === 'creditCard') {
        return `****-****-****-${lastDigits(value, 4)}`;
      } else if (type === 'phone') {
        return `***-***-${lastDigits(value, 4)}`;
      }
      return value.length <= 4 ? '*'.repeat(value.length) : '*'.repeat(value.length - 4) + value.slice(-4);
    }
  }
}

function countBlocked(matches: ReadonlyArray<{ type: string }>, type: string): number {
  let n = 0;
  for (const m of matches) if (m.type === type) n++;
  return n;
}

function countMatch(counts: Map<string, PiiCount>, m: PiiMatch): void {
  const c = counts.get(m.type);
  if (c) c.count++;
  else counts.set(m.type, { strategy: m.strategy, count: 1 });
}

/** Replaces the (sorted, disjoint) `matches` lying in `[from, to)` of `text`; throws on the first `block`. */
export function applyMatches(text: string, matches: ReadonlyArray<PiiMatch>, from: number, to: number, counts: Map<string, PiiCount>): string {
  for (const m of matches) {
    if (m.strategy !== 'block') continue;
    // The other types found with it are counted too, so that they are reported with the block.
    for (const other of matches) if (other.strategy !== 'block') countMatch(counts, other);
    throw new PiiDetectedError(m.type, countBlocked(matches, m.type));
  }
  let out = '';
  let at = from;
  for (const m of matches) {
    out += text.slice(at, m.start) + piiReplacement(m.type, m.strategy, m.value);
    at = m.end;
    countMatch(counts, m);
  }
  return at === from && from === 0 && to === text.length ? text : out + text.slice(at, to);
}

/**
 * Replaces every value in `text` by its strategy's replacement. Throws {@link PiiDetectedError}
 * for the first `block` match (nothing is returned then).
 *
 * @example
 * redactText('mail john@example.com', { rules: { email: 'redact' } }).text; // 'mail [REDACTED_EMAIL]'
 */
export function redactText(text: string, config?: PiiConfig | PiiOptions): RedactResult {
  const counts = new Map<string, PiiCount>();
  return { text: applyMatches(text, findPii(text, config), 0, text.length, counts), counts };
}
