/**
 * Finding the values of a text: every active detector's spans, overlaps resolved (the longest
 * match wins; ties go to the type listed first).
 */
import { mayHoldPii, toConfig, type PiiConfig, type PiiOptions, type PiiStrategy } from './config';
import { countDigits, noBuiltinFits } from './detectors';

/** The most digits a built-in type needs (a card's 13): counting further tells no finder anything. */
const MOST_DIGITS_NEEDED = 13;
/** Whether a text holds a digit at all: the regex engine reads a text without one faster than a loop. */
const HAS_DIGIT = /[0-9]/;

/**
 * One detected value: `[start, end)` in the text, the raw `value`, and the strategy that applies.
 *
 * @example
 * findPii('mail a@b.io', resolvePiiConfig())[0]; // { type: 'email', start: 5, end: 11, value: 'a@b.io', strategy: 'redact' }
 */
export interface PiiMatch {
  type: string;
  start: number;
  end: number;
  value: string;
  strategy: PiiStrategy;
}

/** A span found by detector `p` (its priority: its index in the config's detectors). */
export interface Candidate {
  p: number;
  start: number;
  end: number;
}

/** The spans of `text` that the config's detectors find, overlaps resolved, sorted by start. */
export function detect(text: string, config: PiiConfig): Candidate[] {
  const detectors = config.detectors;
  if (detectors.length === 0 || (!config.hasCustom && (!mayHoldPii(text, config) || noBuiltinFits(text)))) return [];
  const candidates: Candidate[] = [];
  // One count of the digits for every finder that needs some (a card, a phone, an SSN, an IP): a
  // streamed window of an identifier or base64 was read once per finder, on every delta.
  const digits = HAS_DIGIT.test(text) ? countDigits(text, MOST_DIGITS_NEEDED) : 0;
  for (let p = 0; p < detectors.length; p++) {
    if (digits < detectors[p].minDigits) continue;
    const spans = detectors[p].find(text);
    for (let i = 0; i < spans.length; i++) candidates.push({ p, start: spans[i].start, end: spans[i].end });
  }
  if (candidates.length <= 1) return candidates;
  // Longest first, then the type listed first, then leftmost; keep what overlaps nothing kept.
  candidates.sort((a, b) => b.end - b.start - (a.end - a.start) || a.p - b.p || a.start - b.start);
  const kept: Candidate[] = []; // sorted by start, pairwise disjoint
  for (const c of candidates) {
    let lo = 0;
    let hi = kept.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (kept[mid].start < c.start) lo = mid + 1;
      else hi = mid;
    }
    if (lo > 0 && kept[lo - 1].end > c.start) continue;
    if (lo < kept.length && kept[lo].start < c.end) continue;
    kept.splice(lo, 0, c);
  }
  return kept;
}

/**
 * Every value in `text`, in text order, after overlap resolution (the longest match wins; ties go
 * to the type listed first). Does not throw for `block` matches; they are returned like the others.
 *
 * @example
 * findPii('call 555-123-4567', { rules: { phone: 'mask' } }); // [{ type: 'phone', start: 5, end: 17, value: '555-123-4567', strategy: 'mask' }]
 */
export function findPii(text: string, config?: PiiConfig | PiiOptions): PiiMatch[] {
  const cfg = toConfig(config);
  return detect(text, cfg).map((c) => {
    const d = cfg.detectors[c.p];
    return { type: d.type, start: c.start, end: c.end, value: text.slice(c.start, c.end), strategy: d.strategy };
  });
}
