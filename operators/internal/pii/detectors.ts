/**
 * The built-in PII detectors (each a finder of spans, the characters a value may continue with,
 * and the characters one of which every value needs) and the finders of custom detectors. Pure
 * TypeScript, no rxjs.
 *
 * Overlaps are resolved elsewhere (findPii): the longest match wins; ties go to the type listed
 * first ({@link PII_TYPES} order, then custom detectors in order).
 */
import { isArray } from '../../../src/internal/isArray';

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

const MAC_RE = /(?<![0-9A-Fa-f])(?<![0-9A-Fa-f][:-])[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(?:\1[0-9A-Fa-f]{2}){4}(?![0-9A-Fa-f])(?![:-][0-9A-Fa-f])/g;

/** scheme://user:password@host[/path] — the whole URL is the value. */
const URL_RE =
  /(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*:\/\/[A-Za-z0-9._~%!$&()*+,;=-]*:[A-Za-z0-9._~%!$&()*+,;=:-]*@[A-Za-z0-9._~%!$&()*+,;=:@[\]-]+(?:[/?#][A-Za-z0-9._~%!$&()*+,;=:@/?#[\]-]*)?/g;
const URL_TRAILING = /[.,;:!?)\]}]/;

/** @internal The key shapes; {@link runStartFinder} tries it only where a run starts. */
export const API_KEY_RE = new RegExp(
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

/** Whether char code `c` is one of `[A-Za-z0-9_-]`, the characters of a key's run. */
function isRunChar(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 45;
}

/**
 * The finder of `re`, whose matches start where a `[A-Za-z0-9_-]` run starts (its look-behind says
 * so), tried only there with a sticky copy: the regex engine tried every position of a long run
 * (an identifier, base64), each alternative at each, about 1 µs for a 130-character window.
 */
function runStartFinder(re: RegExp, prefixes: RegExp): (text: string) => PiiSpan[] {
  const sticky = new RegExp(re.source, 'y');
  return (text) => {
    const out: PiiSpan[] = [];
    // Most windows hold no key's prefix: the regex engine says so in one pass.
    if (!prefixes.test(text)) return out;
    const n = text.length;
    let i = 0;
    while (i < n) {
      while (i < n && !isRunChar(text.charCodeAt(i))) i++;
      if (i === n) break;
      sticky.lastIndex = i;
      const m = sticky.exec(text);
      if (m !== null && m[0].length > 0) {
        out.push({ start: i, end: i + m[0].length });
        i += m[0].length; // the match's look-ahead says no run character follows
        continue;
      }
      while (i < n && isRunChar(text.charCodeAt(i))) i++;
    }
    sticky.lastIndex = 0;
    return out;
  };
}

/** Whether char code `c` is an ASCII digit. */
export function isDigit(c: number): boolean {
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

/** A built-in type's detector. */
export interface BuiltinSpec {
  find: (text: string) => PiiSpan[];
  continues: (code: number) => boolean;
  /** Characters one of which every value of this type contains. */
  triggers: string;
  /** A value may instead be recognised by a [A-Za-z0-9_-] run of at least this length. */
  runMin: number;
  /** ASCII digits every value of this type holds (its finder checks them too, when called alone). */
  minDigits: number;
}

const DIGITS = '0123456789';

/** Whether `text` holds at least `n` ASCII digits. */
function digitsAtLeast(text: string, n: number): boolean {
  if (text.length < n) return false;
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57 && ++count >= n) return true;
  }
  return false;
}

/** The number of ASCII digits in `text`, counted up to `cap` (a text with more counts as `cap`). */
export function countDigits(text: string, cap: number): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57 && ++count >= cap) return count;
  }
  return count;
}

/** Whether `text` holds a run of at least `n` `[A-Za-z0-9_-]` characters. */
function runAtLeast(text: string, n: number): boolean {
  if (text.length < n) return false;
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if ((c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 45) {
      if (++run >= n) return true;
    } else run = 0;
  }
  return false;
}

/** Whether `text` holds at least `n` of char `c`. */
function countAtLeast(text: string, c: string, n: number): boolean {
  let at = -1;
  for (let k = 0; k < n; k++) if ((at = text.indexOf(c, at + 1)) < 0) return false;
  return true;
}

/** The length from which {@link noBuiltinFits} is always false (the shortest key or MAC run). */
export const NO_BUILTIN_FITS_BELOW = 15;

/**
 * Whether no built-in value fits in `text`: shorter than any key or MAC run (15), fewer than 4
 * digits or 3 dots (an IP), fewer than 8 digits (phone, SSN, card), no `@` before a `.` (email),
 * no `://` and `@` (URL). One pass over a short window, so that a streamed window such as
 * `v2 a@b ` runs no finder at all.
 *
 * @example
 * noBuiltinFits('v2 a@b '); // true
 * noBuiltinFits('a@b.io'); // false
 */
export function noBuiltinFits(text: string): boolean {
  const n = text.length;
  if (n >= NO_BUILTIN_FITS_BELOW) return false;
  let digits = 0;
  let dots = 0;
  let at = -1;
  let lastDot = -1;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57) digits++;
    else if (c === 46) {
      dots++;
      lastDot = i;
    } else if (c === 64 && at < 0) at = i;
  }
  if (digits >= 8 || (digits >= 4 && dots >= 3)) return false;
  if (at >= 0 && (lastDot > at || text.indexOf('://') >= 0)) return false;
  return true;
}

// Each finder first checks, without a regular expression, what every value of its type needs (its
// shortest length, its digits, its `@` before a `.`…): a short window of streamed text (`v2 a@b `)
// usually has none of it, and a finder that cannot match costs a few character reads.
const findEmails = regexFinder(EMAIL_RE);
const findSsns = regexFinder(SSN_RE);
const findIps = regexFinder(IP_RE);
const findMacs = regexFinder(MAC_RE);
// What every alternative of API_KEY_RE starts with.
const findKeys = runStartFinder(API_KEY_RE, /sk-|[spr]k_|A[KS]IA|gh[pousr]_|github_pat_|xox[abprs]-|AIza|eyJ/);

/** The detector of each built-in type. */
export const BUILTINS: Readonly<Record<PiiType, BuiltinSpec>> = {
  // x@y.zz: an `@`, then a `.`
  email: {
    find: (text) => {
      const at = text.length >= 6 ? text.indexOf('@') : -1;
      return at >= 0 && text.lastIndexOf('.') > at ? findEmails(text) : [];
    },
    continues: asciiClass(/[A-Za-z0-9._%+@-]/),
    triggers: '@',
    runMin: Infinity,
    minDigits: 0,
  },
  creditCard: { find: (text) => (digitsAtLeast(text, 13) ? findCards(text) : []), continues: isDigit, triggers: DIGITS, runMin: Infinity, minDigits: 13 },
  // ddd-dd-dddd
  ssn: {
    find: (text) => (text.length >= 11 && text.indexOf('-') >= 0 && digitsAtLeast(text, 9) ? findSsns(text) : []),
    continues: isDigit,
    triggers: DIGITS,
    runMin: Infinity,
    minDigits: 9,
  },
  // ten digits (North-American) or eight to fifteen after a `+`
  phone: { find: (text) => (digitsAtLeast(text, 8) ? findPhones(text) : []), continues: isDigit, triggers: DIGITS, runMin: Infinity, minDigits: 8 },
  // d.d.d.d
  ip: {
    find: (text) => (text.length >= 7 && countAtLeast(text, '.', 3) && digitsAtLeast(text, 4) ? findIps(text) : []),
    continues: asciiClass(/[0-9.]/),
    triggers: DIGITS,
    runMin: Infinity,
    minDigits: 4,
  },
  // aa:bb:… has ':'; aa-bb-cc-dd-ee-ff is a 17-char [A-Za-z0-9_-] run.
  mac: {
    find: (text) => (text.length >= 17 && (text.indexOf(':') >= 0 || text.indexOf('-') >= 0) ? findMacs(text) : []),
    continues: asciiClass(/[0-9A-Fa-f:-]/),
    triggers: ':',
    runMin: 17,
    minDigits: 0,
  },
  // s://u:p@h
  url: {
    find: (text) => (text.indexOf('://') >= 0 && text.indexOf('@') >= 0 ? findUrls(text) : []),
    continues: asciiClass(/[A-Za-z0-9._~%!$&()*+,;=:@/?#[\]-]/),
    triggers: '@',
    runMin: Infinity,
    minDigits: 0,
  },
  // Every key shape holds a [A-Za-z0-9_-] run of 15+ chars (xoxb- + 10; JWT header eyJ + 12).
  apiKey: { find: (text) => (runAtLeast(text, 15) ? findKeys(text) : []), continues: asciiClass(/[A-Za-z0-9_.-]/), triggers: '', runMin: 15, minDigits: 0 },
};

/** The characters a custom value cut by a forced stream emission may continue with. */
export const customContinues = asciiClass(/[A-Za-z0-9_-]/);
/** The characters of the runs that `runMin` counts. */
export const RUN_CHARS = /[A-Za-z0-9_-]/;

/**
 * The finder of a custom detector: a private global copy of its RegExp, or its function with every
 * span it returns checked (a RangeError names the detector and the span).
 */
export function customFinder(name: string, detector: RegExp | PiiDetectorFn): (text: string) => PiiSpan[] {
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
        throw new RangeError(`Custom PII detector "${name}" returned an invalid span ${JSON.stringify(span)} for a text of length ${text.length}`);
      }
      if (start < end) out.push({ start, end });
    }
    return out;
  };
}

/**
 * Whether a cut right after char `c` (preceded by `prev`) is safe with built-in types: no value
 * contains `c` and no detector's look-around tells `c` from the start/end of the text. True for
 * tab/CR/LF, `"'<>\`^{|}\\`, non-ASCII (but not a high surrogate), and a space not preceded by a
 * digit or `)` (the only spaces inside values: card/phone digit groups and `(555) 123`).
 */
export function isSafeBoundary(c: number, prev: number): boolean {
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
