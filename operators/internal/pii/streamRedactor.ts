/**
 * Redaction of text streamed in deltas, with a bounded look-behind: what is emitted equals the
 * redaction of the whole text whenever no stretch between safe boundaries is longer than it.
 */
import { mayHoldPii, toConfig, type PiiConfig, type PiiOptions } from './config';
import { isSafeBoundary, NO_BUILTIN_FITS_BELOW, noBuiltinFits } from './detectors';
import { detect, type PiiMatch } from './findPii';
import { applyMatches, type PiiCount } from './redact';
import { keepShape } from '../../../src/internal/keepShape';

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

/**
 * Every character after which a cut may be safe (see {@link isSafeBoundary}, whose list it is
 * made from), and a few more: a space is matched whatever precedes it at the start of the search.
 * A text it does not match has no safe boundary.
 */
const MAY_BE_SAFE = new RegExp(
  `[${asciiAfterWhichSafe()}]|[\\u0080-\\ud7ff\\udc00-\\uffff]|(?<![0-9)]) `, // non-ASCII but a high surrogate; a space
  'g',
);

/** The ASCII characters after which a cut is always safe, as a regex character class's body. */
function asciiAfterWhichSafe(): string {
  let body = '';
  for (let c = 0; c < 128; c++) {
    if (c !== 32 && isSafeBoundary(c, 32)) body += `\\u${c.toString(16).padStart(4, '0')}`;
  }
  return body;
}

/** Minimum number of emitted characters kept as left context after a forced cut. */
const MIN_CONTEXT = 16;

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
  if (!kept) {
    kept = true;
    keepShape(new StreamRedactorImpl(cfg, lookBehind));
  }
  return new StreamRedactorImpl(cfg, lookBehind);
}

let kept = false;

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
  /**
   * Whether `pending` may hold a value (a trigger character or run); false only when known clean.
   * The fast path takes a dirty `pending` while it is shorter than `shortWindow`: such a window is
   * checked whole with `noBuiltinFits`, as the general path's detectors would first.
   */
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
  /** A window (held text and delta) shorter than this may be judged by `noBuiltinFits` alone, without a forced cut. */
  private readonly shortWindow: number;

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
    this.shortWindow = Math.min(NO_BUILTIN_FITS_BELOW, lookBehind + 1);
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
      let suspect = this.dirty;
      let run = this.tailRun;
      let safeAt = -1;
      let prev = pending === '' ? this.lastEmitted : pending.charCodeAt(pending.length - 1);
      const n = delta.length;
      for (let i = 0; i < n; i++) {
        const c = delta.charCodeAt(i);
        if (c < 128) {
          const k = triggers[c];
          if (k === 0) run = 0;
          else if (k & 1) {
            // A trigger in a short window (`v2 `, `a@b `) is judged below, without the detectors.
            if (pending.length + n >= this.shortWindow) return this.slow(delta);
            suspect = true;
            if (!(k & 2)) run = 0;
            else if (++run >= runMin) return this.slow(delta);
          } else if (k & 2) {
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
      // The held text and the delta, joined once (for the check, then for what goes out or is held).
      let window: string | undefined;
      if (suspect) {
        if (pending.length + n >= this.shortWindow) return this.slow(delta);
        window = pending === '' ? delta : pending + delta;
        if (!noBuiltinFits(window)) {
          this.pending = window;
          return this.cut(false);
        }
      }
      this.tailRun = run;
      if (safeAt === n && pending === '') {
        // Nothing can be a value, nothing held, ends on a safe boundary: the very same string goes out.
        this.lastEmitted = prev;
        return delta;
      }
      if (safeAt > 0) {
        const head = safeAt === n ? delta : delta.slice(0, safeAt);
        const out = pending === '' ? head : safeAt === n && window !== undefined ? window : pending + head;
        this.lastEmitted = delta.charCodeAt(safeAt - 1);
        const rest = safeAt === n ? '' : delta.slice(safeAt);
        this.pending = rest;
        if (suspect) this.dirty = rest !== '' && mayHoldPii(rest, this.cfg);
        return rest.length > this.lookBehind ? out + this.cut(false) : out;
      }
      this.pending = window ?? (pending === '' ? delta : pending + delta);
      this.dirty = suspect;
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
    this.fast =
      this.structural && !this.passthrough && (!this.dirty || this.pending.length < this.shortWindow) && this.context === '' && this.continues === null;
  }

  private slow(delta: string): string {
    this.pending = this.pending === '' ? delta : this.pending + delta;
    return this.cut(false);
  }

  /**
   * Position after the last safe boundary in `pending[floor - 1, end)`, else -1. The boundaries of
   * `isSafeBoundary`, read from the trigger table (bits 4 and 8): a window without one (an
   * identifier, base64) is read whole on every delta.
   */
  private lastSafeCut(end: number, floor: number): number {
    const pending = this.pending;
    const from = floor > 1 ? floor - 1 : 0;
    if (end === pending.length) {
      // The regex engine reads a window without a boundary faster than this loop does.
      MAY_BE_SAFE.lastIndex = from;
      const found = MAY_BE_SAFE.test(pending);
      MAY_BE_SAFE.lastIndex = 0;
      if (!found) return -1;
    }
    const table = this.triggers;
    for (let i = end - 1; i >= from; i--) {
      const c = pending.charCodeAt(i);
      if (c >= 128) {
        if ((c & 0xfc00) !== 0xd800) return i + 1;
        continue;
      }
      const k = table[c];
      if (k & 4) return i + 1;
      if (k & 8) {
        const prev = i > 0 ? pending.charCodeAt(i - 1) : this.lastEmitted;
        if (prev !== 41 && (prev < 48 || prev > 57)) return i + 1;
      }
    }
    return -1;
  }

  /** Recomputes `dirty` and `tailRun` for the current `pending`. */
  private rescan(): void {
    const pending = this.pending;
    this.dirty = this.context !== '' || mayHoldPii(pending, this.cfg);
    // Only compared with `runMin`: a longer run (an identifier, base64) is not read to its start.
    const runMin = this.runMin;
    let run = 0;
    for (let i = pending.length - 1; i >= 0 && run < runMin; i--) {
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

    let matches: PiiMatch[] | undefined; // made with the first match: most windows hold none
    const text = this.context === '' ? pending : this.context + pending;
    const off = text.length - len;
    const candidates = detect(text, cfg);
    for (let i = 0; i < candidates.length; i++) {
      const c = candidates[i];
      if (c.end <= off) continue;
      const start = Math.max(c.start, off) - off;
      const end = c.end - off;
      // A value straddling a forced cut is emitted whole (as far as seen).
      if (start < h && end > h) h = end;
      if (end > h) continue;
      const d = cfg.detectors[c.p];
      (matches ??= []).push({ type: d.type, start, end, value: pending.slice(start, end), strategy: d.strategy });
    }
    const last = matches !== undefined ? matches[matches.length - 1] : undefined;
    // The counts are made with the first match: most calls replace nothing.
    const out =
      matches === undefined
        ? h === len
          ? pending
          : pending.slice(0, h)
        : applyMatches(pending, matches, 0, h, (this.replaced ??= new Map<string, PiiCount>()));

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
