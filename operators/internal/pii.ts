/**
 * PII detection and redaction engine behind the `piiRedaction` operator (pure TypeScript, no rxjs).
 *
 * - {@link resolvePiiConfig} validates `{ rules?, custom? }` once into a {@link PiiConfig}.
 * - {@link findPii} lists the matches of a text (overlaps resolved), {@link redactText} replaces them.
 * - {@link createStreamRedactor} does the same for text streamed in deltas, with a bounded look-behind.
 *
 * Rules: every built-in type is active with its default strategy ({@link DEFAULT_PII_RULES}) unless
 * `rules` gives it another one, or `false` to turn it off (so a rule for one type never turns off
 * the blocking of another; entries whose value is `undefined` keep the default).
 * `custom` detectors are always active, after the built-in ones. Overlaps: the longest match wins;
 * ties go to the type listed first ({@link PII_TYPES} order, then custom detectors in order).
 */
import { sha256Hex } from './sha256';
import { isArray } from '../../src/internal/isArray';

// ---------------------------------------------------------------------------------------------
// Public types and constants
// ---------------------------------------------------------------------------------------------

/**
 * The built-in PII types, in priority order (ties between overlapping matches of equal length go
 * to the type listed first).
 *
 * @example
 * PII_TYPES.includes('email'); // true
 */
export const PII_TYPES = ['email', 'creditCard', 'ssn', 'phone', 'ip', 'mac', 'url', 'apiKey'] as const;

/**
 * A built-in PII type.
 *
 * @example
 * const type: PiiType = 'creditCard';
 */
export type PiiType = (typeof PII_TYPES)[number];

/**
 * The strategies: `redact` → `[REDACTED_EMAIL]`, `mask` → `u***@example.com`, `hash` →
 * `<ip_hash:1a2b3c4d>`, `block` → throw {@link PiiDetectedError}.
 *
 * @example
 * PII_STRATEGIES.includes('mask'); // true
 */
export const PII_STRATEGIES = ['redact', 'mask', 'hash', 'block'] as const;

/**
 * What to do with a detected value.
 *
 * @example
 * const strategy: PiiStrategy = 'hash';
 */
export type PiiStrategy = (typeof PII_STRATEGIES)[number];

/**
 * The strategy of every built-in type that `rules` does not mention.
 *
 * @example
 * DEFAULT_PII_RULES.creditCard; // 'block'
 */
export const DEFAULT_PII_RULES: Readonly<Record<PiiType, PiiStrategy>> = Object.freeze({
  email: 'redact',
  creditCard: 'block',
  ssn: 'block',
  phone: 'mask',
  ip: 'hash',
  mac: 'redact',
  url: 'redact',
  apiKey: 'redact',
});

/**
 * A half-open range `[start, end)` of UTF-16 code units, as returned by a custom detector function.
 *
 * @example
 * const span: PiiSpan = { start: 4, end: 14 };
 */
export interface PiiSpan {
  start: number;
  end: number;
}

/**
 * A custom detector function: every range of `text` holding a value.
 *
 * @example
 * const detector: PiiDetectorFn = (text) => (text.includes('secret') ? [{ start: text.indexOf('secret'), end: text.indexOf('secret') + 6 }] : []);
 */
export type PiiDetectorFn = (text: string) => ReadonlyArray<PiiSpan>;

/**
 * A user-defined PII type. A `RegExp` finds every match whether or not it has the `g` flag (it is
 * copied, so the caller's `lastIndex` is never touched); empty matches are ignored. `strategy`
 * defaults to `redact`.
 *
 * @example
 * const employeeId: CustomPiiDetector = { name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'redact' };
 */
export interface CustomPiiDetector {
  name: string;
  detector: RegExp | PiiDetectorFn;
  strategy?: PiiStrategy;
}

/**
 * The options of `piiRedaction` that drive detection (see the module comment for how `rules`
 * changes the default strategies).
 *
 * @example
 * const options: PiiOptions = { rules: { email: 'mask', ip: 'hash' }, custom: [employeeId] };
 */
export interface PiiOptions {
  rules?: Partial<Record<PiiType, PiiStrategy | false>>;
  custom?: ReadonlyArray<CustomPiiDetector>;
}

/**
 * @internal One active detector of a resolved config (its priority is its index in `detectors`).
 *
 * @example
 * resolvePiiConfig({}).detectors.find((d) => d.type === 'ip')!.find('at 10.0.0.1'); // [{ start: 3, end: 11 }]
 */
export interface PiiDetectorEntry {
  readonly type: string;
  readonly strategy: PiiStrategy;
  readonly custom: boolean;
  readonly find: (text: string) => PiiSpan[];
  /** Characters that may still belong to a value cut by a forced stream emission. */
  readonly continues: (code: number) => boolean;
}

/**
 * A validated, immutable detection config, made by {@link resolvePiiConfig}. `active` lists the
 * active types in priority order with their strategies.
 *
 * @example
 * const config: PiiConfig = resolvePiiConfig({ rules: { email: 'mask', phone: false } });
 * config.active; // [{ type: 'email', strategy: 'mask' }, { type: 'creditCard', strategy: 'block' }, …] (no phone)
 */
export interface PiiConfig {
  readonly kind: 'PiiConfig';
  readonly active: ReadonlyArray<{ readonly type: string; readonly strategy: PiiStrategy }>;
  /** @internal */
  readonly detectors: ReadonlyArray<PiiDetectorEntry>;
  /** @internal True when a custom detector is active (no structural fast path then). */
  readonly hasCustom: boolean;
  /**
   * @internal Per ASCII char: 1 = a built-in value needs it, 2 = api-key/mac run char,
   * 4 = always a safe stream boundary, 8 = space.
   */
  readonly triggers: Uint8Array;
  /** @internal Length of a [A-Za-z0-9_-] run that may be a value (Infinity when irrelevant). */
  readonly runMin: number;
}

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

// ---------------------------------------------------------------------------------------------
// Built-in detectors
// ---------------------------------------------------------------------------------------------

// Module-level regexes are global and always reset (lastIndex 0) by `scan` before and after use.

const EMAIL_RE =
  /(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,63}(?![A-Za-z0-9-])/g;

/** Runs of digit groups separated by one space or dash; cards are picked inside them. */
const DIGIT_RUN_RE = /\d+(?:[ -]\d+)*/g;

const SSN_RE = /(?<!\d)(?<!\d-)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?!\d)(?!-\d)/g;

/** North-American: optional +1/1 prefix, (555) 123-4567, 555-123-4567, 555.123.4567, 555 123 4567. */
const PHONE_NANP_RE = /(?<![\w+=/@])(?<!\d[.-])(?:\+?1[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\d)(?![.-]\d)/g;

/** International: +CC then 2–6 groups (digit count checked to 8–15 afterwards). */
const PHONE_INTL_RE = /(?<![\w+=/@])\+[1-9]\d{0,2}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,4})){2,6}(?!\d)(?![.-]\d)/g;

const OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
const IP_RE = new RegExp(`(?<!\\d)(?<!\\d\\.)(?:${OCTET}\\.){3}${OCTET}(?!\\d)(?!\\.\\d)`, 'g');

const MAC_RE =
  /(?<![0-9A-Fa-f])(?<![0-9A-Fa-f][:-])[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(?:\1[0-9A-Fa-f]{2}){4}(?![0-9A-Fa-f])(?![:-][0-9A-Fa-f])/g;

/** scheme://user:password@host[/path] — the whole URL is the value. */
const URL_RE =
  /(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*:\/\/[A-Za-z0-9._~%!$&()*+,;=-]*:[A-Za-z0-9._~%!$&()*+,;=:-]*@[A-Za-z0-9._~%!$&()*+,;=:@[\]-]+(?:[/?#][A-Za-z0-9._~%!$&()*+,;=:@/?#[\]-]*)?/g;
const URL_TRAILING = /[.,;:!?)\]}]/;

const API_KEY_RE = new RegExp(
  '(?<![A-Za-z0-9_-])(?:' +
    [
      'sk-(?=[A-Za-z0-9_-]*\\d)[A-Za-z0-9_-]{20,}', // OpenAI sk-..., sk-proj-... (and sk-ant-...)
      '(?:AKIA|ASIA)[0-9A-Z]{16}', // AWS access key id
      'gh[pousr]_[A-Za-z0-9]{36}', // GitHub tokens
      'github_pat_[A-Za-z0-9_]{22,}', // GitHub fine-grained tokens
      'xox[abprs]-(?=[A-Za-z0-9-]*\\d)[A-Za-z0-9-]{10,}', // Slack
      'AIza[0-9A-Za-z_-]{35}', // Google API key
      '(?:sk|pk|rk)_(?:live|test)_[0-9A-Za-z]{16,}', // Stripe
      // JWT-looking: header.payload.signature; also header.eyJpayload alone, so a token longer than
      // the stream look-behind is recognised before its signature arrives.
      'eyJ[A-Za-z0-9_-]{12,}\\.(?:eyJ[A-Za-z0-9_-]{7,}(?:\\.[A-Za-z0-9_-]+)?|[A-Za-z0-9_-]{10,}\\.[A-Za-z0-9_-]{10,})',
    ].join('|') +
    ')(?![A-Za-z0-9_-])',
  'g',
);

/** Runs `re` (global) over `text`, calling `each` per non-empty match; lastIndex is always left at 0. */
function scan(re: RegExp, text: string, each: (m: RegExpExecArray) => void): void {
  re.lastIndex = 0;
  try {
    let m: RegExpExecArray | null;
    while ((m = re.exec(text)) !== null) {
      if (m[0].length === 0) {
        re.lastIndex++;
        continue;
      }
      each(m);
    }
  } finally {
    re.lastIndex = 0;
  }
}

function regexFinder(re: RegExp): (text: string) => PiiSpan[] {
  return (text) => {
    const out: PiiSpan[] = [];
    scan(re, text, (m) => out.push({ start: m.index, end: m.index + m[0].length }));
    return out;
  };
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

function luhn(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let n = digits.charCodeAt(i) - 48;
    if (double) {
      n *= 2;
      if (n > 9) n -= 9;
    }
    sum += n;
    double = !double;
  }
  return sum % 10 === 0;
}

/**
 * Credit cards: inside each run of digit groups, every range of whole groups with 13–19 digits that
 * passes Luhn is a candidate; the longest (then leftmost) ranges win. A group is never split, so a
 * card is never found inside a longer unbroken digit run.
 */
function findCards(text: string): PiiSpan[] {
  const out: PiiSpan[] = [];
  scan(DIGIT_RUN_RE, text, (m) => {
    const run = m[0];
    const starts: number[] = [];
    const ends: number[] = [];
    let digitCount = 0;
    for (let i = 0; i < run.length; i++) {
      const s = i;
      while (i < run.length && isDigit(run.charCodeAt(i))) i++;
      starts.push(s);
      ends.push(i);
      digitCount += i - s;
    }
    if (digitCount < 13) return;
    const candidates: Array<{ a: number; b: number; n: number }> = [];
    for (let a = 0; a < starts.length; a++) {
      let digits = '';
      for (let b = a; b < starts.length; b++) {
        digits += run.slice(starts[b], ends[b]);
        if (digits.length > 19) break;
        if (digits.length >= 13 && luhn(digits)) candidates.push({ a, b, n: digits.length });
      }
    }
    candidates.sort((x, y) => y.n - x.n || x.a - y.a);
    const taken = new Uint8Array(starts.length);
    const found: PiiSpan[] = [];
    next: for (const c of candidates) {
      for (let g = c.a; g <= c.b; g++) if (taken[g]) continue next;
      taken.fill(1, c.a, c.b + 1);
      found.push({ start: m.index + starts[c.a], end: m.index + ends[c.b] });
    }
    found.sort((x, y) => x.start - y.start);
    for (const f of found) out.push(f);
  });
  return out;
}

function findPhones(text: string): PiiSpan[] {
  const out = regexFinder(PHONE_NANP_RE)(text);
  scan(PHONE_INTL_RE, text, (m) => {
    let digits = 0;
    for (let i = 0; i < m[0].length; i++) if (isDigit(m[0].charCodeAt(i))) digits++;
    if (digits >= 8 && digits <= 15) out.push({ start: m.index, end: m.index + m[0].length });
  });
  return out;
}

function findUrls(text: string): PiiSpan[] {
  const out: PiiSpan[] = [];
  scan(URL_RE, text, (m) => {
    let end = m.index + m[0].length;
    while (end > m.index && URL_TRAILING.test(text[end - 1])) end--;
    const at = m[0].lastIndexOf('@', end - m.index - 1);
    if (at >= 0 && m.index + at + 1 < end) out.push({ start: m.index, end });
  });
  return out;
}

const asciiClass =
  (re: RegExp) =>
  (code: number): boolean =>
    code < 128 && re.test(String.fromCharCode(code));

interface BuiltinSpec {
  find: (text: string) => PiiSpan[];
  continues: (code: number) => boolean;
  /** Characters one of which every value of this type contains. */
  triggers: string;
  /** A value may instead be recognised by a [A-Za-z0-9_-] run of at least this length. */
  runMin: number;
}

const DIGITS = '0123456789';

const BUILTINS: Readonly<Record<PiiType, BuiltinSpec>> = {
  email: { find: regexFinder(EMAIL_RE), continues: asciiClass(/[A-Za-z0-9._%+@-]/), triggers: '@', runMin: Infinity },
  creditCard: { find: findCards, continues: isDigit, triggers: DIGITS, runMin: Infinity },
  ssn: { find: regexFinder(SSN_RE), continues: isDigit, triggers: DIGITS, runMin: Infinity },
  phone: { find: findPhones, continues: isDigit, triggers: DIGITS, runMin: Infinity },
  ip: { find: regexFinder(IP_RE), continues: asciiClass(/[0-9.]/), triggers: DIGITS, runMin: Infinity },
  // aa:bb:… has ':'; aa-bb-cc-dd-ee-ff is a 17-char [A-Za-z0-9_-] run.
  mac: { find: regexFinder(MAC_RE), continues: asciiClass(/[0-9A-Fa-f:-]/), triggers: ':', runMin: 17 },
  url: { find: findUrls, continues: asciiClass(/[A-Za-z0-9._~%!$&()*+,;=:@/?#[\]-]/), triggers: '@', runMin: Infinity },
  // Every key shape holds a [A-Za-z0-9_-] run of 15+ chars (xoxb- + 10; JWT header eyJ + 12).
  apiKey: { find: regexFinder(API_KEY_RE), continues: asciiClass(/[A-Za-z0-9_.-]/), triggers: '', runMin: 15 },
};

const customContinues = asciiClass(/[A-Za-z0-9_-]/);
const RUN_CHARS = /[A-Za-z0-9_-]/;

// ---------------------------------------------------------------------------------------------
// Config
// ---------------------------------------------------------------------------------------------

function isStrategy(s: unknown): s is PiiStrategy {
  return typeof s === 'string' && (PII_STRATEGIES as readonly string[]).includes(s);
}

function isBuiltinType(s: string): s is PiiType {
  return (PII_TYPES as readonly string[]).includes(s);
}

function customFinder(name: string, detector: RegExp | PiiDetectorFn): (text: string) => PiiSpan[] {
  if (detector instanceof RegExp) {
    // A private copy: global (to find all), never sticky; the caller's RegExp is never used.
    const re = new RegExp(detector.source, detector.flags.replace(/[gy]/g, '') + 'g');
    return regexFinder(re);
  }
  return (text) => {
    const spans = detector(text);
    if (!isArray(spans)) throw new TypeError(`Custom PII detector "${name}" must return an array of { start, end }`);
    const out: PiiSpan[] = [];
    for (const span of spans) {
      const start = span?.start;
      const end = span?.end;
      if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end > text.length || start > end) {
        throw new RangeError(
          `Custom PII detector "${name}" returned an invalid span ${JSON.stringify(span)} for a text of length ${text.length}`,
        );
      }
      if (start < end) out.push({ start, end });
    }
    return out;
  };
}

/**
 * Validates `{ rules?, custom? }` into a {@link PiiConfig}. Every built-in type is active with its
 * default strategy unless `rules` gives another strategy or `false` (off). Throws a `TypeError`
 * for an unknown type or strategy, a custom detector without a name, with a duplicate or built-in
 * name, or without a RegExp/function detector.
 *
 * @example
 * const config = resolvePiiConfig({ rules: { email: 'mask' }, custom: [{ name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'hash' }] });
 */
export function resolvePiiConfig(options: PiiOptions = {}): PiiConfig {
  if (options === null || typeof options !== 'object') throw new TypeError('PII options must be an object');
  const { rules, custom = [] } = options;
  if (rules !== undefined && (rules === null || typeof rules !== 'object' || Array.isArray(rules))) {
    throw new TypeError('PII `rules` must be an object mapping a PII type to a strategy');
  }
  if (!isArray(custom)) throw new TypeError('PII `custom` must be an array of { name, detector, strategy }');

  if (rules !== undefined) {
    for (const [type, strategy] of Object.entries(rules)) {
      if (!isBuiltinType(type)) {
        throw new TypeError(`Unknown PII type "${type}" in rules; expected one of: ${PII_TYPES.join(', ')}`);
      }
      if (strategy !== undefined && strategy !== false && !isStrategy(strategy)) {
        throw new TypeError(`Unknown strategy "${String(strategy)}" for PII type "${type}"; expected one of: ${PII_STRATEGIES.join(', ')}, or false to turn the type off`);
      }
    }
  }

  const detectors: PiiDetectorEntry[] = [];
  const triggers = new Uint8Array(128);
  let runMin = Infinity;
  for (const type of PII_TYPES) {
    const strategy = rules?.[type] ?? DEFAULT_PII_RULES[type];
    if (strategy === false) continue;
    const spec = BUILTINS[type];
    detectors.push(Object.freeze({ type, strategy, custom: false, find: spec.find, continues: spec.continues }));
    for (let i = 0; i < spec.triggers.length; i++) triggers[spec.triggers.charCodeAt(i)] |= 1;
    runMin = Math.min(runMin, spec.runMin);
  }
  if (runMin !== Infinity) {
    for (let c = 0; c < 128; c++) if (RUN_CHARS.test(String.fromCharCode(c))) triggers[c] |= 2;
  }
  // Stream boundaries (see isSafeBoundary): 4 = always safe after it, 8 = space.
  for (let c = 0; c < 128; c++) if (c !== 32 && isSafeBoundary(c, 32)) triggers[c] |= 4;
  triggers[32] |= 8;

  const names = new Set<string>();
  custom.forEach((entry, index) => {
    if (entry === null || typeof entry !== 'object') throw new TypeError(`Custom PII detector at index ${index} must be an object`);
    const { name, detector, strategy = 'redact' } = entry;
    if (typeof name !== 'string' || name.trim() === '') {
      throw new TypeError(`Custom PII detector at index ${index} has no name`);
    }
    if (toUpperSnake(name) === '') throw new TypeError(`Custom PII detector name "${name}" needs a letter or digit`);
    if (isBuiltinType(name)) throw new TypeError(`Custom PII detector "${name}" has the name of a built-in type`);
    if (names.has(name)) throw new TypeError(`Custom PII detector "${name}" is defined twice`);
    names.add(name);
    if (!(detector instanceof RegExp) && typeof detector !== 'function') {
      throw new TypeError(`Custom PII detector "${name}" needs a RegExp or a function (text) => Array<{ start, end }>`);
    }
    if (!isStrategy(strategy)) {
      throw new TypeError(`Unknown strategy "${String(strategy)}" for custom PII detector "${name}"; expected one of: ${PII_STRATEGIES.join(', ')}`);
    }
    detectors.push(Object.freeze({ type: name, strategy, custom: true, find: customFinder(name, detector), continues: customContinues }));
  });

  return Object.freeze({
    kind: 'PiiConfig' as const,
    active: Object.freeze(detectors.map((d) => Object.freeze({ type: d.type, strategy: d.strategy }))),
    detectors: Object.freeze(detectors),
    hasCustom: names.size > 0,
    triggers,
    runMin,
  });
}

const DEFAULT_CONFIG = resolvePiiConfig();

function toConfig(config: PiiConfig | PiiOptions | undefined): PiiConfig {
  if (config === undefined) return DEFAULT_CONFIG;
  return (config as Partial<PiiConfig>).kind === 'PiiConfig' ? (config as PiiConfig) : resolvePiiConfig(config as PiiOptions);
}

/** Whether `text` holds a character/run that a value of an active built-in type needs. */
function mayHoldPii(text: string, config: PiiConfig): boolean {
  const table = config.triggers;
  const runMin = config.runMin;
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const k = c < 128 ? table[c] : 0;
    if (k & 1) return true;
    if (k & 2) {
      if (++run >= runMin) return true;
    } else run = 0;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Detection and replacement
// ---------------------------------------------------------------------------------------------

interface Candidate {
  p: number;
  start: number;
  end: number;
}

function detect(text: string, config: PiiConfig): Candidate[] {
  const detectors = config.detectors;
  if (detectors.length === 0 || (!config.hasCustom && !mayHoldPii(text, config))) return [];
  const candidates: Candidate[] = [];
  for (let p = 0; p < detectors.length; p++) {
    for (const span of detectors[p].find(text)) candidates.push({ p, start: span.start, end: span.end });
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

/**
 * `creditCard` → `CREDIT_CARD`, `apiKey` → `API_KEY`, `employee-id` → `EMPLOYEE_ID`.
 *
 * @example
 * toUpperSnake('employeeId'); // 'EMPLOYEE_ID'
 */
export function toUpperSnake(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .replace(/[^A-Za-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .toUpperCase();
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
function applyMatches(
  text: string,
  matches: ReadonlyArray<PiiMatch>,
  from: number,
  to: number,
  counts: Map<string, PiiCount>,
): string {
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

// ---------------------------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------------------------

/**
 * Redacts text that arrives in deltas. `push` returns what is safe to emit now ('' when it holds
 * everything back), `flush` the rest at the end; `counts` accumulates what was replaced; `held` is
 * the number of characters held back. See {@link createStreamRedactor}.
 *
 * @example
 * const r: StreamRedactor = createStreamRedactor(config);
 * r.push('mail me at jo') + r.push('hn@example.com now') + r.flush(); // 'mail me at [REDACTED_EMAIL] now'
 */
export interface StreamRedactor {
  push(delta: string): string;
  flush(): string;
  readonly counts: ReadonlyMap<string, PiiCount>;
  readonly held: number;
}

const NOTHING_REPLACED: ReadonlyMap<string, PiiCount> = new Map();

/** Minimum number of emitted characters kept as left context after a forced cut. */
const MIN_CONTEXT = 16;

/**
 * Whether a cut right after char `c` (preceded by `prev`) is safe with built-in types: no value
 * contains `c` and no detector's look-around tells `c` from the start/end of the text. True for
 * tab/CR/LF, `"'<>\`^{|}\\`, non-ASCII (but not a high surrogate), and a space not preceded by a
 * digit or `)` (the only spaces inside values: card/phone digit groups and `(555) 123`).
 */
function isSafeBoundary(c: number, prev: number): boolean {
  if (c >= 128) return c < 0xd800 || c > 0xdbff;
  switch (c) {
    case 32:
      return !isDigit(prev) && prev !== 41;
    case 9:
    case 10:
    case 13:
    case 34:
    case 39:
    case 60:
    case 62:
    case 92:
    case 94:
    case 96:
    case 123:
    case 124:
    case 125:
      return true;
    default:
      return false;
  }
}

/**
 * A redactor for streamed text.
 *
 * With built-in types only, text is cut after a safe boundary (whitespace no value can span — a
 * space not preceded by a digit or `)`, tab, CR, LF — or a character no value contains: non-ASCII,
 * `"'<>\`^{|}\\`). A delta with no character any active value needs (digits, `@`, `:`, a
 * `[A-Za-z0-9_-]` run of 15+) is emitted at once up to its last safe boundary — as the same string
 * instance when it ends on one and nothing is held — without running any detector; otherwise the
 * detectors run on the held window. The output then equals `redactText` on the whole text
 * whenever no stretch between safe boundaries is longer than `lookBehind`.
 *
 * Never more than `lookBehind` characters are held: past that, the oldest characters are emitted
 * (a value already recognised across that point is emitted replaced as far as seen, and its
 * continuation characters are swallowed while they keep coming). Custom detectors always hold back
 * the last `lookBehind` characters, so a custom value up to that length is caught.
 * `block` throws {@link PiiDetectedError} when the blocked value is about to be emitted.
 *
 * @example
 * const r = createStreamRedactor(resolvePiiConfig({ rules: { email: 'redact' } }));
 * r.push('mail me at jo'); // 'mail me at '
 * r.push('hn@example.com now'); // '[REDACTED_EMAIL] '
 * r.flush(); // 'now'
 */
export function createStreamRedactor(config?: PiiConfig | PiiOptions, lookBehind = 64): StreamRedactor {
  const cfg = toConfig(config);
  if (!Number.isInteger(lookBehind) || lookBehind < 0) {
    throw new RangeError(`lookBehind must be a non-negative integer, got ${String(lookBehind)}`);
  }
  return new StreamRedactorImpl(cfg, lookBehind);
}

/**
 * The state of {@link createStreamRedactor}: a class with fixed fields (one hidden class, so the
 * per-delta `push` reads plain fields), rather than closure variables behind an object literal.
 */
class StreamRedactorImpl implements StreamRedactor {
  /** Made when something is first replaced: most model calls replace nothing. */
  private replaced: Map<string, PiiCount> | undefined = undefined;
  /** Received, not yet emitted. */
  private pending = '';
  /**
   * Raw emitted text since the last safe cut, kept only after a forced cut ('' = emitted text ends
   * at a safe cut), at most `maxContext` chars: detectors see structures cut by a forced emission
   * whole again.
   */
  private context = '';
  /** Code of the last raw character emitted (32 at the start). */
  private lastEmitted = 32;
  /** Whether `pending` may hold a value (a trigger character or run); false only when known clean. */
  private dirty = false;
  /** Length of the `[A-Za-z0-9_-]` run at the end of `pending`. */
  private tailRun = 0;
  /** Continuation characters of a value cut by a forced emission, swallowed while they last. */
  private continues: ((code: number) => boolean) | null = null;
  /**
   * Whether a delta may take the trigger-table fast path: built-in types only (at least one), `pending` known
   * clean, no context kept after a forced cut, no continuation being swallowed. Kept in step with
   * `dirty`, `context` and `continues` (one field read per delta instead of four).
   */
  private fast: boolean;
  private readonly passthrough: boolean;
  private readonly structural: boolean;
  private readonly triggers: Uint8Array;
  private readonly runMin: number;
  private readonly maxContext: number;

  constructor(
    private readonly cfg: PiiConfig,
    private readonly lookBehind: number,
  ) {
    this.passthrough = cfg.detectors.length === 0;
    this.structural = !cfg.hasCustom;
    this.fast = this.structural && !this.passthrough;
    this.triggers = cfg.triggers;
    this.runMin = cfg.runMin;
    this.maxContext = Math.max(MIN_CONTEXT, lookBehind);
  }

  get held(): number {
    return this.pending.length;
  }

  get counts(): ReadonlyMap<string, PiiCount> {
    return this.replaced ?? NOTHING_REPLACED;
  }

  flush(): string {
    return this.cut(true);
  }

  push(delta: string): string {
    if (this.fast) {
      // Fast path: one pass over the delta for trigger characters/runs and the last safe boundary.
      const triggers = this.triggers;
      const runMin = this.runMin;
      const pending = this.pending;
      let run = this.tailRun;
      let safeAt = -1;
      let prev = pending === '' ? this.lastEmitted : pending.charCodeAt(pending.length - 1);
      const n = delta.length;
      for (let i = 0; i < n; i++) {
        const c = delta.charCodeAt(i);
        if (c < 128) {
          const k = triggers[c];
          if (k === 0) run = 0;
          else if (k & 1) return this.slow(delta);
          else if (k & 2) {
            if (++run >= runMin) return this.slow(delta);
          } else {
            run = 0;
            if (k & 4 || (k & 8 && prev !== 41 && (prev < 48 || prev > 57))) safeAt = i + 1;
          }
        } else {
          run = 0;
          if ((c & 0xfc00) !== 0xd800) safeAt = i + 1;
        }
        prev = c;
      }
      if (n === 0) return delta;
      this.tailRun = run;
      if (safeAt === n && pending === '') {
        // Clean, nothing held, ends on a safe boundary: the very same string goes out.
        this.lastEmitted = prev;
        return delta;
      }
      if (safeAt > 0) {
        const head = safeAt === n ? delta : delta.slice(0, safeAt);
        const out = pending === '' ? head : pending + head;
        this.lastEmitted = delta.charCodeAt(safeAt - 1);
        this.pending = safeAt === n ? '' : delta.slice(safeAt);
        return this.pending.length > this.lookBehind ? out + this.cut(false) : out;
      }
      this.pending = pending === '' ? delta : pending + delta;
      return this.pending.length > this.lookBehind ? this.cut(false) : '';
    }
    if (this.passthrough || delta === '') return delta;
    if (this.continues !== null) {
      const continues = this.continues;
      let i = 0;
      while (i < delta.length && continues(delta.charCodeAt(i))) i++;
      if (i > 0) {
        this.context = (this.context + delta.slice(0, i)).slice(-this.maxContext);
        this.lastEmitted = delta.charCodeAt(i - 1);
        if (i === delta.length) return '';
        delta = delta.slice(i);
      }
      this.continues = null;
      this.updateFast();
      if (this.fast) return this.push(delta);
    }
    return this.slow(delta);
  }

  private updateFast(): void {
    this.fast = this.structural && !this.passthrough && !this.dirty && this.context === '' && this.continues === null;
  }

  private slow(delta: string): string {
    this.pending = this.pending === '' ? delta : this.pending + delta;
    return this.cut(false);
  }

  /** Position after the last safe boundary in `pending[floor - 1, end)`, else -1. */
  private lastSafeCut(end: number, floor: number): number {
    const pending = this.pending;
    for (let i = end - 1; i >= floor - 1 && i >= 0; i--) {
      if (isSafeBoundary(pending.charCodeAt(i), i > 0 ? pending.charCodeAt(i - 1) : this.lastEmitted)) return i + 1;
    }
    return -1;
  }

  /** Recomputes `dirty` and `tailRun` for the current `pending`. */
  private rescan(): void {
    const pending = this.pending;
    this.dirty = this.context !== '' || mayHoldPii(pending, this.cfg);
    let run = 0;
    for (let i = pending.length - 1; i >= 0; i--) {
      const c = pending.charCodeAt(i);
      if (c < 128 && this.triggers[c] & 2) run++;
      else break;
    }
    this.tailRun = run;
    this.updateFast();
  }

  /** The general path: detectors on the window, emit up to the cut. */
  private cut(final: boolean): string {
    const cfg = this.cfg;
    const pending = this.pending;
    const len = pending.length;
    if (len === 0) return '';
    let h = len;
    let safe = true;
    if (!final) {
      const floor = len - this.lookBehind;
      const hs = this.structural ? this.lastSafeCut(len, floor) : -1;
      if (hs >= 0 && hs >= floor) h = hs;
      else {
        safe = false;
        h = Math.max(0, floor);
        // Do not split a surrogate pair.
        if (h > 0 && h < len && (pending.charCodeAt(h - 1) & 0xfc00) === 0xd800) h++;
      }
      if (h === 0) {
        this.rescan();
        return '';
      }
    }

    const matches: PiiMatch[] = [];
    const text = this.context === '' ? pending : this.context + pending;
    const off = text.length - len;
    for (const c of detect(text, cfg)) {
      if (c.end <= off) continue;
      const start = Math.max(c.start, off) - off;
      const end = c.end - off;
      // A value straddling a forced cut is emitted whole (as far as seen).
      if (start < h && end > h) h = end;
      if (end > h) continue;
      const d = cfg.detectors[c.p];
      matches.push({ type: d.type, start, end, value: pending.slice(start, end), strategy: d.strategy });
    }
    const last = matches.length > 0 ? matches[matches.length - 1] : undefined;
    // The counts are made with the first match: most calls replace nothing.
    const out = matches.length === 0 ? (h === len ? pending : pending.slice(0, h)) : applyMatches(pending, matches, 0, h, (this.replaced ??= new Map<string, PiiCount>()));

    if (final) {
      this.pending = '';
      this.context = '';
      this.continues = null;
      this.lastEmitted = 32;
      this.dirty = false;
      this.tailRun = 0;
      this.updateFast();
      return out;
    }
    if (last !== undefined && last.end === len && h === len) {
      this.continues = cfg.detectors.find((d) => d.type === last.type)!.continues;
    }
    if (safe) this.context = '';
    else {
      const s = this.lastSafeCut(h, 0);
      const context = s > 0 ? pending.slice(s, h) : this.context + pending.slice(0, h);
      this.context = context.length > this.maxContext ? context.slice(-this.maxContext) : context;
    }
    this.lastEmitted = pending.charCodeAt(h - 1);
    this.pending = h === len ? '' : pending.slice(h);
    this.rescan();
    return out;
  }
}
