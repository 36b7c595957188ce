import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Readable, pipeline } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { Observable, config, finalize, from, lastValueFrom, map, toArray, type Subscription } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentEventType } from '../../src/index';
import { decodeSSE, encodeSSE, sseHeaders, toSSEStream, type SSESource } from '../../src/http/sse';
import { ofType } from '../../src/bindings/ofType';
import { toAsyncIterable } from '../../src/bindings/toAsyncIterable';
import { toReadableStream } from '../../src/bindings/toReadableStream';
import { scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { Rng, fuzzSeeds } from '../support/random';

/*
 * Seeded random cases for the bindings (docs/guide/streaming-to-a-ui.md, docs/guarantees.md).
 * Each case draws, from its seed: events of every type (and custom ones) whose strings hold line
 * breaks, unicode and long runs, and values JSON cannot hold; how the wire is written (line ends,
 * comments, `id:`/`retry:` lines, several `data:` lines, a BOM, no final blank line); where the
 * bytes are cut and how they are delivered; malformed frames; and when the consumer leaves.
 *
 * A failing case names its seed; replay one with `FUZZ_SEED=<seed> npx jest spec/bindings/invariants.spec.ts`
 * (`FUZZ_CASES=<n>` runs more cases per block).
 */

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

const { replay, perBlock, seedsFrom } = fuzzSeeds(60);

/** Runs every seed, then fails naming each seed that broke an invariant (and the first failure in full). */
async function checkSeeds(seeds: readonly number[], run: (seed: number) => Promise<void>): Promise<void> {
  const failures: string[] = [];
  for (const seed of seeds) {
    try {
      await run(seed);
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      failures.push(`seed ${seed} (replay: FUZZ_SEED=${seed}): ${failures.length === 0 ? text : text.split('\n')[0]}`);
    }
  }
  if (failures.length > 0) throw new Error(`${failures.length} of ${seeds.length} case(s) broke an invariant:\n${failures.join('\n')}`);
}

/** What the cases covered, printed with `FUZZ_STATS=1`. */
const stats = new Map<string, number>();
const tally = (...keys: string[]) => keys.forEach((k) => stats.set(k, (stats.get(k) ?? 0) + 1));
afterAll(() => {
  if (process.env.FUZZ_STATS)
    console.log(
      [...stats]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, n]) => `${k}: ${n}`)
        .join('\n'),
    );
});

function check(condition: boolean, message: string): void {
  if (!condition) throw new Error(message);
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The values, and the error or the hang, of an Observable: never waits longer than `ms`. */
function settle<T>(source: Observable<T>, ms = 4000): Promise<{ values: T[]; error?: unknown; hung?: true }> {
  return new Promise((resolve) => {
    const values: T[] = [];
    let done = false;
    let guard: ReturnType<typeof setTimeout> | undefined;
    const finish = (outcome: { values: T[]; error?: unknown; hung?: true }) => {
      if (done) return;
      done = true;
      if (guard) clearTimeout(guard);
      resolve(outcome);
    };
    const subscription = source.subscribe({
      next: (value) => values.push(value),
      error: (error: unknown) => finish({ values, error }),
      complete: () => finish({ values }),
    });
    if (!done) {
      guard = setTimeout(() => {
        subscription.unsubscribe();
        finish({ values, hung: true });
      }, ms);
    }
  });
}

// rxjs reports what a consumer throws, or an error nobody hears, asynchronously: none may happen here.
const unhandledByRx: unknown[] = [];
let previousOnUnhandledError: typeof config.onUnhandledError;
beforeAll(() => {
  previousOnUnhandledError = config.onUnhandledError;
  config.onUnhandledError = (error) => unhandledByRx.push(error);
});
afterAll(() => {
  config.onUnhandledError = previousOnUnhandledError;
});
afterEach(() => {
  const seen = unhandledByRx.splice(0);
  if (seen.length > 0) throw new Error(`an error reached rxjs's onUnhandledError: ${String((seen[0] as Error)?.stack ?? seen[0])}`);
});

// ---------------------------------------------------------------------------------------------
// Random events
// ---------------------------------------------------------------------------------------------

const TYPE_SET = {
  'run-start': true,
  'iteration-start': true,
  'text-delta': true,
  'reasoning-delta': true,
  'tool-input-start': true,
  'tool-input-delta': true,
  'tool-progress': true,
  'tool-call': true,
  'tool-result': true,
  'iteration-end': true,
  'permission-request': true,
  'continuation-request': true,
  'model-retry': true,
  error: true,
  'request-expired': true,
  'run-end': true,
  'state-changed': true,
  'circuit-breaker-triggered': true,
  'error-threshold-exceeded': true,
  'skill-activated': true,
  'cost-recorded': true,
  'agent-run-started': true,
  'agent-run-completed': true,
  'model-fallback': true,
  'tool-call-limit-exceeded': true,
  'pii-detected': true,
  'context-edited': true,
  summarized: true,
  'summary-skipped': true,
  'tool-selection': true,
  'todos-updated': true,
  'output-delta': true,
} satisfies Record<AgentEventType, true>;
const BUILT_IN_TYPES = Object.keys(TYPE_SET) as AgentEventType[];
/** Types of events of the user's own (no line break: encodeSSE refuses those). */
const CUSTOM_TYPES = [
  'audit-logged',
  'x:y',
  ' spaced',
  'ünï-😀',
  'data',
  'event',
  'message',
  ':colon',
  'id',
  'retry',
  '\ufeffbom',
  'a\u2028b',
  'tab\there',
  '\ud800lone',
  'e\u0301',
];

const WORDS = ['Hello', 'world', ' ', 'x', '42', '{', '}', '[', '"', '\\', '\\n', '\t', '</script>', '{"type":"run-end"}'];
const LINE_BREAKS = ['\n', '\r', '\r\n', '\n\n', '\r\r\n', '\n\r', '\r\n\r\n'];
const UNICODE = [
  'é',
  'e\u0301',
  'ß',
  '€',
  '日本語',
  '😀',
  '🎉',
  '𝄞',
  '👩‍👩‍👧',
  '\u2028',
  '\u2029',
  '\u0085',
  '\ufeff',
  '\u0000',
  '\u001f',
  '\u007f',
  '\ud800',
  '\udfff',
  'Z̤͔ͧ̑̓',
  '\ufffd',
];
const SSE_LOOKALIKES = ['data: ', 'data:', 'event: x', ': comment', 'id: 7', 'retry: 10', ':', 'data: {"type":"run-end"}'];

function randomText(rng: Rng, allowLong = true): string {
  let text = rng.chance(0.15) ? '\ufeff' : '';
  const n = rng.int(0, 8);
  for (let i = 0; i < n; i++) {
    const pool = rng.pick([WORDS, LINE_BREAKS, UNICODE, SSE_LOOKALIKES]);
    text += rng.pick(pool);
  }
  if (allowLong && rng.chance(0.02)) {
    const unit = rng.pick(['x', 'ü', '😀', 'a\r\nb', 'e\u0301']);
    text += unit.repeat(rng.int(5_000, 60_000));
  }
  return text;
}

/** A value JSON holds, or holds lossily (NaN, -0, undefined fields, a Date: the wire carries what JSON makes of them). */
function randomJson(rng: Rng, depth = 2): unknown {
  switch (rng.int(0, depth > 0 ? 8 : 5)) {
    case 0:
      return null;
    case 1:
      return rng.chance(0.5);
    case 2:
      return rng.pick([0, -1, 1.5, 1e21, 2 ** 53, Number.MIN_VALUE, -0, NaN, Infinity]);
    case 3:
    case 4:
      return randomText(rng, false);
    case 5:
      return rng.chance(0.1) ? new Date(rng.int(0, 2e12)) : rng.int(-1000, 1000);
    case 6:
      return Array.from({ length: rng.int(0, 4) }, () => randomJson(rng, depth - 1));
    default: {
      const object: Record<string, unknown> = {};
      const n = rng.int(0, 4);
      for (let i = 0; i < n; i++) {
        const key = randomText(rng, false);
        if (key === '__proto__') continue;
        object[key] = rng.chance(0.1) ? undefined : randomJson(rng, depth - 1);
      }
      return object;
    }
  }
}

/** A value JSON cannot hold: a BigInt, a cycle, a toJSON that throws (maybe nested). */
function unjsonable(rng: Rng): unknown {
  let value: unknown;
  switch (rng.int(0, 2)) {
    case 0:
      value = BigInt(rng.int(0, 1_000_000));
      break;
    case 1: {
      const cycle: Record<string, unknown> = { a: randomText(rng, false) };
      cycle.self = cycle;
      value = cycle;
      break;
    }
    default:
      value = {
        toJSON() {
          throw new Error('toJSON refused');
        },
      };
  }
  return rng.chance(0.5) ? { nested: [1, value] } : value;
}

const NOT_SENT = /(BigInt|circular|toJSON refused)/;
const usage = (rng: Rng) => ({ inputTokens: rng.int(0, 100_000), outputTokens: rng.int(0, 100_000) });
const errorInfo = (rng: Rng) => ({
  name: rng.pick(['Error', 'ModelError', 'ToolError']),
  message: randomText(rng),
  ...(rng.chance(0.3) ? { status: rng.pick([429, 500, 503]) } : {}),
});

interface Drawn {
  event: AgentEvent;
  /** What decodeSSE must give back: the event as JSON holds it, or its documented stand-in. */
  expected: unknown;
  /** The event goes out with a stand-in. */
  standIn: boolean;
}

/** A random event; `standIn` puts a value JSON cannot hold where encodeSSE documents a stand-in. */
function randomEvent(rng: Rng, runId: string, standIn = rng.chance(0.1)): Drawn {
  const custom = rng.chance(0.1);
  const type: string = custom ? rng.pick(CUSTOM_TYPES) : rng.pick(BUILT_IN_TYPES);
  const iteration = rng.int(0, 20);
  let fields: Record<string, unknown>;
  let replaced: Record<string, unknown> | undefined;
  switch (type as AgentEventType) {
    case 'run-start':
      fields = rng.chance(0.5) ? { sessionId: randomText(rng) } : {};
      break;
    case 'iteration-start':
      fields = { iteration };
      break;
    case 'text-delta':
    case 'reasoning-delta':
      fields = { iteration, text: randomText(rng) };
      break;
    case 'tool-call':
      fields = { iteration, callId: randomText(rng, false), name: randomText(rng, false), args: randomJson(rng) };
      if (standIn) {
        fields.args = unjsonable(rng);
        replaced = { args: expect.stringMatching(new RegExp(`^The arguments could not be sent: [^]*${NOT_SENT.source}`)) };
      }
      break;
    case 'tool-result':
      fields = { iteration, callId: randomText(rng, false), name: randomText(rng, false), result: randomJson(rng), isError: rng.chance(0.3) };
      if (standIn) {
        fields.result = unjsonable(rng);
        replaced = { result: expect.stringMatching(new RegExp(`^The tool result could not be sent: [^]*${NOT_SENT.source}`)), isError: true };
      }
      break;
    case 'iteration-end':
      fields = rng.chance(0.5) ? { iteration, usage: usage(rng) } : { iteration };
      break;
    case 'permission-request':
      fields = {
        requestId: randomText(rng, false),
        callId: 'c1',
        toolName: randomText(rng, false),
        args: randomJson(rng),
        ...(rng.chance(0.5) ? { description: randomText(rng) } : {}),
      };
      if (standIn) {
        fields.args = unjsonable(rng);
        replaced = { args: expect.stringMatching(new RegExp(`^The arguments could not be sent: [^]*${NOT_SENT.source}`)) };
      }
      break;
    case 'continuation-request':
      fields = { requestId: 'req_1', iteration, limit: rng.int(1, 50) };
      break;
    case 'model-retry':
      fields = { iteration, attempt: rng.int(1, 5), error: errorInfo(rng), delayMs: rng.int(0, 60_000) };
      break;
    case 'error':
      fields = {
        error: errorInfo(rng),
        source: rng.pick(['model', 'tool', 'middleware', 'run']),
        ...(rng.chance(0.3) ? { middleware: randomText(rng, false) } : {}),
      };
      break;
    case 'request-expired':
      fields = { requestId: 'req_1', reason: rng.pick(['timeout', 'cancelled']) };
      break;
    case 'run-end':
      fields = {
        reason: rng.pick(['completed', 'terminated', 'max-iterations', 'cancelled', 'error']),
        text: randomText(rng),
        usage: usage(rng),
        ...(rng.chance(0.3) ? { terminationReason: randomText(rng) } : {}),
      };
      break;
    case 'circuit-breaker-triggered':
      fields = { toolName: randomText(rng, false), count: rng.int(1, 9), iteration };
      break;
    case 'error-threshold-exceeded':
      fields = { consecutiveErrors: rng.int(1, 9), maxAllowed: rng.int(1, 9), lastError: randomText(rng) };
      break;
    case 'skill-activated':
      fields = { skill: randomText(rng) };
      break;
    case 'cost-recorded':
      fields = { inputTokens: rng.int(0, 9999), outputTokens: rng.int(0, 9999), cost: rng.next(), totalCost: rng.next() * 10 };
      break;
    case 'agent-run-started':
      fields = { inputMessageCount: rng.int(0, 9), ...(rng.chance(0.5) ? { sessionId: randomText(rng) } : {}) };
      break;
    case 'agent-run-completed':
      fields = {
        durationMs: rng.next() * 1000,
        iterations: rng.int(0, 9),
        functionCalls: rng.int(0, 9),
        success: rng.chance(0.5),
        ...(rng.chance(0.3) ? { terminationReason: randomText(rng) } : {}),
      };
      break;
    case 'model-fallback':
      fields = { from: 0, to: 1, error: errorInfo(rng) };
      break;
    case 'tool-call-limit-exceeded':
      fields = {
        scope: rng.pick(['thread', 'run']),
        count: rng.int(1, 9),
        limit: rng.int(1, 9),
        ...(rng.chance(0.5) ? { toolName: randomText(rng, false) } : {}),
      };
      break;
    case 'pii-detected':
      fields = { piiType: randomText(rng, false), strategy: rng.pick(['redact', 'mask', 'hash', 'block']), count: rng.int(1, 9) };
      break;
    case 'context-edited':
      fields = { cleared: rng.int(0, 9), tokensBefore: rng.int(0, 9999), tokensAfter: rng.int(0, 9999) };
      break;
    case 'summarized':
      fields = { messagesBefore: rng.int(0, 99), messagesAfter: rng.int(0, 9) };
      break;
    case 'summary-skipped':
      fields = { reason: rng.pick(['no-text', 'content-filter']) };
      break;
    case 'tool-selection':
      fields = { selected: [randomText(rng, false)], ignored: [randomText(rng, false), randomText(rng, false)] };
      break;
    case 'todos-updated':
      fields = {
        todos: Array.from({ length: rng.int(0, 3) }, () => ({ content: randomText(rng), status: rng.pick(['pending', 'in_progress', 'completed']) })),
      };
      break;
    default:
      fields = { payload: randomJson(rng), note: randomText(rng) };
  }
  const event = { type, runId, ...fields } as unknown as AgentEvent;
  const asJson = JSON.parse(JSON.stringify(replaced ? { ...event, ...Object.fromEntries(Object.keys(replaced).map((k) => [k, 0])) } : event)) as Record<
    string,
    unknown
  >;
  return { event, expected: replaced ? { ...asJson, ...replaced } : asJson, standIn: replaced !== undefined };
}

/** An event JSON cannot hold where no stand-in is documented: encodeSSE errors on it. */
/** An event encodeSSE refuses: its type is not a non-empty string, or has a line break (a value JSON cannot hold is sent as a stand-in). */
function poisonEvent(rng: Rng, runId: string): AgentEvent {
  const payload = rng.chance(0.5) ? unjsonable(rng) : randomJson(rng, 2);
  return rng.pick([
    () => ({ type: '', runId, payload }),
    () => ({ type: `${rng.pick(CUSTOM_TYPES)}\n${rng.pick(['data: {}', 'x', ''])}`, runId, payload }),
    () => ({ type: BigInt(rng.int(0, 9)), runId, payload }),
  ])() as unknown as AgentEvent;
}

// ---------------------------------------------------------------------------------------------
// The wire: how frames are written, cut and delivered
// ---------------------------------------------------------------------------------------------

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { ignoreBOM: true });

/** Rewrites an encodeSSE text (LF line ends, one data line per frame) in ways the SSE rules make equivalent. */
function rewriteWire(rng: Rng, lf: string, frameCount: number): { text: string; variant: string[] } {
  const variant: string[] = [];
  let text = lf;
  if (rng.chance(0.25)) {
    variant.push('several data lines');
    // (Split on LF only: JSON may hold U+2028, which a regex's `$` would take for a line end.)
    text = text
      .split('\n')
      .map((line) => {
        if (!line.startsWith('data: ')) return line;
        const pretty = JSON.stringify(JSON.parse(line.slice(6)), null, rng.int(0, 2) === 0 ? '\t' : 1);
        return pretty
          .split('\n')
          .map((l) => (rng.chance(0.5) ? `data: ${l}` : `data:${l}`))
          .join('\n');
      })
      .join('\n');
  }
  if (rng.chance(0.3)) {
    variant.push('comments and other fields');
    const extras = [
      ': ping',
      ':',
      ': data: {"type":"nope"}',
      'id: 7',
      'id',
      'retry: 1000',
      'retry: x',
      'foo: bar',
      'ignored',
      'event2: x',
      ' data: {}',
      `: ${randomText(rng, false).replace(/[\r\n]/g, '')}`,
    ];
    const lines = text.split('\n');
    const out: string[] = [];
    for (let i = 0; i < lines.length; i++) {
      // Not after the last line: that would make the final blank line a line of its own.
      if (i < lines.length - 1 && rng.chance(0.15)) out.push(rng.pick(extras));
      out.push(lines[i]);
    }
    text = out.join('\n');
  }
  if (frameCount > 0 && rng.chance(0.1)) {
    variant.push('blank lines between frames');
    text = text.replace(/\n\n/g, () => (rng.chance(0.5) ? '\n\n\n' : '\n\n'));
  }
  if (frameCount > 0 && rng.chance(0.2)) {
    const cut = rng.int(1, 2);
    variant.push(cut === 1 ? 'no final blank line' : 'no final line break');
    text = text.slice(0, -cut);
  }
  const ends = rng.int(0, 3);
  if (ends > 0) {
    variant.push(['', 'CRLF', 'CR', 'mixed line ends'][ends]);
    let out = '';
    let lastWasCR = false;
    for (const ch of text) {
      if (ch !== '\n') {
        out += ch;
        lastWasCR = false;
        continue;
      }
      // A CR then an LF would be one line break, not two.
      const end: string = ends === 1 ? '\r\n' : ends === 2 ? '\r' : lastWasCR ? rng.pick(['\r', '\r\n']) : rng.pick(['\n', '\r', '\r\n']);
      out += end;
      lastWasCR = end === '\r';
    }
    text = out;
  }
  if (rng.chance(0.15)) {
    variant.push('BOM');
    text = '\ufeff' + text;
  }
  return { text, variant };
}

/** Random cut points in [0, length], many of them where cuts hurt; duplicates make empty chunks. */
function cutPoints(rng: Rng, length: number, interesting: (p: number) => boolean): number[] {
  if (length === 0) return [];
  if (length < 3000 && rng.chance(0.1)) {
    const all: number[] = [];
    for (let p = rng.int(1, 3); p < length; p += rng.int(1, 3)) all.push(p);
    return all;
  }
  const hot: number[] = [];
  for (let p = 1; p < length && hot.length < 5000; p++) if (interesting(p)) hot.push(p);
  const n = rng.int(0, 40) + (rng.chance(0.2) ? rng.int(0, 300) : 0);
  const cuts: number[] = [];
  for (let i = 0; i < n; i++) cuts.push(hot.length > 0 && rng.chance(0.6) ? rng.pick(hot) : rng.int(0, length));
  return cuts.sort((a, b) => a - b);
}

function startsAt(text: string | Uint8Array, p: number, word: string): boolean {
  for (let i = 0; i < word.length; i++) {
    const c = typeof text === 'string' ? text.charCodeAt(p + i) : text[p + i];
    if (c !== word.charCodeAt(i)) return false;
  }
  return true;
}
/** Inside `data:` (or `event:`), between a CR and its LF. */
function nearField(text: string | Uint8Array, p: number): boolean {
  for (let k = 1; k <= 5; k++) if (p - k >= 0 && (startsAt(text, p - k, 'data:') || startsAt(text, p - k, 'event:'))) return true;
  const at = (i: number) => (typeof text === 'string' ? text.charCodeAt(i) : text[i]);
  return at(p - 1) === 13 && at(p) === 10;
}

function cutBytes(rng: Rng, bytes: Uint8Array): Uint8Array[] {
  // A continuation byte (10xxxxxx) starts no character: a cut there is inside a multi-byte sequence.
  const cuts = cutPoints(rng, bytes.length, (p) => (bytes[p] & 0xc0) === 0x80 || nearField(bytes, p));
  const chunks: Uint8Array[] = [];
  let from = 0;
  for (const c of cuts) {
    chunks.push(bytes.subarray(from, c));
    from = c;
  }
  chunks.push(bytes.subarray(from));
  return chunks;
}

const isHigh = (c: number) => c >= 0xd800 && c <= 0xdbff;
const isLow = (c: number) => c >= 0xdc00 && c <= 0xdfff;

/** Cuts a text, even between the halves of a surrogate pair unless `wholeChars`. */
function cutText(rng: Rng, text: string, wholeChars: boolean): string[] {
  const splitsPair = (p: number) => isHigh(text.charCodeAt(p - 1)) && isLow(text.charCodeAt(p));
  const cuts = cutPoints(rng, text.length, (p) => splitsPair(p) || nearField(text, p)).filter((p) => !(wholeChars && splitsPair(p)));
  const chunks: string[] = [];
  let from = 0;
  for (const c of cuts) {
    chunks.push(text.slice(from, c));
    from = c;
  }
  chunks.push(text.slice(from));
  return chunks;
}

interface SourceCounters {
  pulls: number;
  cancels: number;
  afterCancel: number;
  nexts: number;
  returns: number;
  afterReturn: number;
}
const counters = (): SourceCounters => ({ pulls: 0, cancels: 0, afterCancel: 0, nexts: 0, returns: 0, afterReturn: 0 });

/** How a test source misbehaves: it fails after so many chunks, or its cancel / return throws or rejects. */
interface Misbehaviour {
  failAfter?: { chunks: number; error: Error };
  stop?: 'throws' | 'rejects';
}

/** A byte stream read chunk by chunk (highWaterMark 0: a chunk is pulled only when read); `endless` never closes. */
function pullStream<T>(chunks: readonly T[], count: SourceCounters, endless = false, bad: Misbehaviour = {}): ReadableStream<T> {
  let i = 0;
  return new ReadableStream<T>(
    {
      pull(controller) {
        if (count.cancels > 0) count.afterCancel++;
        count.pulls++;
        if (bad.failAfter && i === Math.min(bad.failAfter.chunks, chunks.length)) controller.error(bad.failAfter.error);
        else if (i < chunks.length) controller.enqueue(chunks[i++]);
        else if (endless) return new Promise<void>(() => {});
        else controller.close();
        return undefined;
      },
      cancel() {
        count.cancels++;
        if (bad.stop === 'throws') throw new Error('cancel failed');
        if (bad.stop === 'rejects') return Promise.reject(new Error('cancel rejected'));
        return undefined;
      },
    },
    { highWaterMark: 0 },
  );
}

/** An async iterable whose `next()` and `return()` are counted; `endless` waits after the last chunk until returned. */
function countingIterable<T>(chunks: readonly T[], count: SourceCounters, endless = false, bad: Misbehaviour = {}): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator](): AsyncIterator<T> {
      let i = 0;
      let wake: ((r: IteratorResult<T>) => void) | undefined;
      return {
        next() {
          if (count.returns > 0) count.afterReturn++;
          count.nexts++;
          if (bad.failAfter && i === Math.min(bad.failAfter.chunks, chunks.length)) return Promise.reject(bad.failAfter.error);
          if (i < chunks.length) return Promise.resolve({ value: chunks[i++], done: false });
          if (endless) return new Promise<IteratorResult<T>>((resolve) => (wake = resolve));
          return Promise.resolve({ value: undefined, done: true });
        },
        return() {
          count.returns++;
          wake?.({ value: undefined, done: true });
          if (bad.stop === 'throws') throw new Error('return failed');
          if (bad.stop === 'rejects') return Promise.reject(new Error('return rejected'));
          return Promise.resolve({ value: undefined, done: true });
        },
      };
    },
  };
}

type Delivery =
  'stream (pulled)' | 'stream (all at once)' | 'async generator of bytes' | 'iterator of bytes' | 'iterator of strings' | 'iterator of strings and bytes';
const DELIVERIES: readonly Delivery[] = [
  'stream (pulled)',
  'stream (all at once)',
  'async generator of bytes',
  'iterator of bytes',
  'iterator of strings',
  'iterator of strings and bytes',
];

/** The text as a decodeSSE source, cut at random: the source, how many chunks, and the chunks. */
function deliver(
  rng: Rng,
  text: string,
  how: Delivery,
  count: SourceCounters,
  bad: Misbehaviour = {},
): { source: SSESource; chunks: number; pieces: Array<string | Uint8Array> } {
  const { source, pieces } = deliverPieces(rng, text, how, count, bad);
  return { source, chunks: pieces.length, pieces };
}

/** The chunks of {@link deliver}, and the source over them (`failAfter`: not for 'stream (all at once)'). */
function deliverPieces(
  rng: Rng,
  text: string,
  how: Delivery,
  count: SourceCounters,
  bad: Misbehaviour,
): { source: SSESource; pieces: Array<string | Uint8Array> } {
  switch (how) {
    case 'stream (pulled)': {
      const chunks = cutBytes(rng, enc.encode(text));
      return { source: pullStream(chunks, count, false, bad), pieces: chunks };
    }
    case 'stream (all at once)': {
      const chunks = cutBytes(rng, enc.encode(text));
      const source = new ReadableStream<Uint8Array>({
        start(controller) {
          for (const c of chunks) controller.enqueue(c);
          controller.close();
        },
        cancel: () => void count.cancels++,
      });
      return { source, pieces: chunks };
    }
    case 'async generator of bytes': {
      const chunks = cutBytes(rng, enc.encode(text));
      return {
        source: (async function* () {
          for (let i = 0; ; i++) {
            if (bad.failAfter && i === Math.min(bad.failAfter.chunks, chunks.length)) throw bad.failAfter.error;
            if (i >= chunks.length) return;
            yield chunks[i];
          }
        })(),
        pieces: chunks,
      };
    }
    case 'iterator of bytes': {
      const chunks = cutBytes(rng, enc.encode(text));
      return { source: countingIterable(chunks, count, false, bad), pieces: chunks };
    }
    case 'iterator of strings': {
      const chunks = cutText(rng, text, false);
      return { source: countingIterable(chunks, count, false, bad), pieces: chunks };
    }
    case 'iterator of strings and bytes': {
      // Cut at whole characters, each piece sent as text or as its bytes (cut again anywhere).
      const chunks: Array<string | Uint8Array> = [];
      for (const piece of cutText(rng, text, true)) {
        if (rng.chance(0.5)) chunks.push(piece);
        else chunks.push(...cutBytes(rng, enc.encode(piece)));
      }
      return { source: countingIterable(chunks, count, false, bad), pieces: chunks };
    }
  }
}

/** The text of the first `n` chunks (a character cut at the end does not matter: it ends no line). */
function textOf(pieces: ReadonlyArray<string | Uint8Array>, n: number): string {
  const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  return pieces
    .slice(0, n)
    .map((p) => (typeof p === 'string' ? p : decoder.decode(p, { stream: true })))
    .join('');
}

const encodeFrames = (events: readonly AgentEvent[]) => settle(from(events).pipe(encodeSSE()));

async function readBytes(stream: ReadableStream<Uint8Array>): Promise<{ chunks: Uint8Array[]; error?: unknown }> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  try {
    for (let r = await reader.read(); !r.done; r = await reader.read()) chunks.push(r.value);
  } catch (error) {
    return { chunks, error };
  }
  return { chunks };
}

function concatBytes(chunks: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.compare(a, b) === 0;
const short = (value: unknown) => {
  const s = JSON.stringify(value) ?? String(value);
  return s.length > 300 ? `${s.slice(0, 300)}…` : s;
};

/** Two runs of one seed make their own message ids: compared without them. */
const withoutMessageId = (event: unknown): unknown =>
  event !== null && typeof event === 'object' && Object.hasOwn(event, 'messageId') ? { ...event, messageId: undefined } : event;
const withoutMessageIds = (value: unknown): unknown => (Array.isArray(value) ? value.map(withoutMessageId) : withoutMessageId(value));

function expectEqual(actual: unknown, expected: unknown, what: string): void {
  try {
    expect(withoutMessageIds(actual)).toEqual(withoutMessageIds(expected));
  } catch (error) {
    throw new Error(`${what}:\n${(error as Error).message}`);
  }
}

// ---------------------------------------------------------------------------------------------
// A reference SSE reader (the HTML rules plus the documented tolerances of docs/guarantees.md), for malformed input
// ---------------------------------------------------------------------------------------------

interface Reference {
  events: unknown[];
  error?: { kind: 'bad JSON' | 'not an object'; type: string };
  /** The error comes from the end of the stream (its last line, or the frame the end completes). */
  errorAtEnd: boolean;
  /** How many of the events the end of the stream delivers (0 or 1). */
  atEnd?: number;
}

function referenceDecode(text: string, ended = true): Reference {
  const body = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  const parts = body.split(/\r\n|\r|\n/);
  const events: unknown[] = [];
  let data: string[] = [];
  let type = '';
  let endEvents = 0;
  const line = (l: string, atEnd: boolean): Reference | undefined => {
    if (l === '') {
      const d = data;
      const t = type || 'message';
      data = [];
      type = '';
      if (d.length === 0) return undefined;
      let value: unknown;
      try {
        value = JSON.parse(d.join('\n'));
      } catch {
        return { events, error: { kind: 'bad JSON', type: t }, errorAtEnd: atEnd };
      }
      if (value === null || typeof value !== 'object' || Array.isArray(value)) return { events, error: { kind: 'not an object', type: t }, errorAtEnd: atEnd };
      const event = value as { type?: unknown };
      if (typeof event.type !== 'string') event.type = t;
      events.push(event);
      if (atEnd) endEvents++;
      return undefined;
    }
    if (l.startsWith(':')) return undefined;
    const colon = l.indexOf(':');
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? '' : l.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') type = value;
    return undefined;
  };
  for (let i = 0; i < parts.length - 1; i++) {
    const stop = line(parts[i], false);
    if (stop) return stop;
  }
  // Cut off by an error: what no line break ended is lost.
  if (!ended) return { events, errorAtEnd: false };
  // The end: the last line without its line break, then the frame it leaves open.
  const last = parts[parts.length - 1];
  if (last !== '') {
    const stop = line(last, true);
    if (stop) return stop;
  }
  return line('', true) ?? { events, errorAtEnd: false, atEnd: endEvents };
}

/** Random SSE-ish input: valid frames, bad JSON, data that is not an object, frames without data, odd fields. */
function randomMalformed(rng: Rng): { text: string; lines: string[] } {
  const lines: string[] = [];
  const n = rng.int(1, 14);
  for (let i = 0; i < n; i++) {
    const kind = rng.int(0, 12);
    if (kind <= 3) {
      const { event } = randomEvent(rng, 'r', false);
      if (rng.chance(0.7)) lines.push(`event: ${rng.chance(0.8) ? event.type : rng.pick(CUSTOM_TYPES)}`);
      const json = JSON.stringify(rng.chance(0.15) ? { ...event, type: undefined } : event);
      if (rng.chance(0.2))
        lines.push(
          ...JSON.stringify(JSON.parse(json), null, 1)
            .split('\n')
            .map((l) => `data:${l}`),
        );
      else lines.push(`data: ${json}`);
      lines.push('');
    } else if (kind === 4) {
      if (rng.chance(0.6)) lines.push(`event: ${rng.pick([...CUSTOM_TYPES, 'tool-call', ''])}`);
      lines.push(`data: ${rng.pick(['{"type": "tool-call", oops}', '{', '[DONE]', 'undefined', 'NaN', '', '{"a":1}}', "{'a':1}", '{"type":"x"', '\u00a0{}'])}`);
      if (rng.chance(0.8)) lines.push('');
    } else if (kind === 5) {
      lines.push(`event: ${rng.pick(CUSTOM_TYPES)}`);
      lines.push(`data: ${rng.pick(['42', '"text"', 'null', '[1,2]', 'true', '[]', '-0'])}`);
      lines.push('');
    } else if (kind === 6) {
      lines.push(`event: ${rng.pick(CUSTOM_TYPES)}`, ...(rng.chance(0.5) ? ['id: 3'] : []), ''); // no data
    } else if (kind === 7) {
      lines.push(rng.pick(['id: 1', 'id', 'id: \u0000', 'retry: 3000', 'retry: soon', 'retry']));
    } else if (kind === 8) {
      lines.push(rng.pick([': comment', ':', ':: x', ': data: {}']));
    } else if (kind === 9) {
      lines.push(rng.pick(['foo: bar', 'DATA: {}', 'Event: x', ' data: {}', 'data ', 'event', 'nocolon']));
    } else if (kind === 10) {
      lines.push('data'); // a data line with an empty value
    } else if (kind === 11) {
      lines.push('');
    } else {
      lines.push(`data: {"type":"${rng.pick(['custom', 'text-delta'])}","runId":"r","n":${rng.int(0, 9)}}`);
    }
  }
  let text = '';
  let lastWasCR = false;
  for (let i = 0; i < lines.length; i++) {
    text += lines[i];
    if (i === lines.length - 1 && rng.chance(0.3)) break; // no line break at the very end
    const end: string = lastWasCR && lines[i] === '' ? rng.pick(['\r', '\r\n']) : rng.pick(['\n', '\n', '\r', '\r\n']);
    text += end;
    lastWasCR = end === '\r';
  }
  if (rng.chance(0.1)) text = '\ufeff' + text;
  return { text, lines };
}

// ---------------------------------------------------------------------------------------------
// The suites
// ---------------------------------------------------------------------------------------------

describe('encodeSSE / toSSEStream then decodeSSE, over random events, wires, cuts and deliveries', () => {
  it('gives back every event (or its documented stand-in), in order, and nothing else', async () => {
    await checkSeeds(seedsFrom(1000), async (seed) => {
      const rng = new Rng(seed);
      const runId = rng.chance(0.8) ? `run-${seed}` : randomText(rng, false);
      const drawn = Array.from({ length: rng.int(0, 25) }, () => randomEvent(rng, runId));
      const events = drawn.map((d) => d.event);
      const expected = drawn.map((d) => d.expected);

      // encodeSSE and toSSEStream write the same bytes.
      const frames = await encodeFrames(events);
      check(frames.error === undefined && !frames.hung, `encodeSSE failed: ${String(frames.error)}`);
      const lf = frames.values.join('');
      const body = await readBytes(toSSEStream(from(events)));
      check(body.error === undefined, `toSSEStream errored: ${String(body.error)}`);
      check(sameBytes(concatBytes(body.chunks), enc.encode(lf)), 'toSSEStream wrote other bytes than encodeSSE');

      const { text, variant } = rewriteWire(rng, lf, events.length);
      const how = rng.pick(DELIVERIES);
      const count = counters();
      const { source, chunks } = deliver(rng, text, how, count);
      const decoded = await settle(decodeSSE(source));
      const context = `${events.length} events, wire [${variant.join(', ')}], ${how} in ${chunks} chunks`;
      tally(`round trip: ${how}`, ...variant.map((v) => `round trip wire: ${v}`), ...(text.length > 100_000 ? ['round trip: long body'] : []));
      for (const d of drawn) tally(`event: ${BUILT_IN_TYPES.includes(d.event.type) ? d.event.type : 'custom'}`);
      tally(...drawn.filter((d) => d.standIn).map(() => 'round trip: stand-ins'));
      check(!decoded.hung, `decodeSSE hung (${context})`);
      check(decoded.error === undefined, `decodeSSE errored (${context}): ${String(decoded.error)}`);
      expectEqual(decoded.values, expected, `decoded events (${context})`);
      check(count.cancels === 0 && count.returns === 0, `a source read to its end was cancelled/returned (${context})`);
    });
  });

  it('decodes the body toSSEStream writes, cut again, and errors after the frames before an event encodeSSE refuses', async () => {
    await checkSeeds(seedsFrom(2000, Math.round(perBlock / 2)), async (seed) => {
      const rng = new Rng(seed);
      const drawn = Array.from({ length: rng.int(0, 12) }, () => randomEvent(rng, 'r'));
      const events = drawn.map((d) => d.event);
      const poisonAt = rng.chance(0.5) ? rng.int(0, events.length) : -1;
      if (poisonAt >= 0) events.splice(poisonAt, 0, poisonEvent(rng, 'r'));
      const expected = drawn.map((d) => d.expected).slice(0, poisonAt >= 0 ? poisonAt : undefined);

      // The body as it is, or each chunk cut again as a proxy might (by a reader of our own: a
      // pipeThrough would drop, by the Web streams rules, what waits in the transform when the body errors).
      const body = toSSEStream(from(events));
      const resplit = async function* () {
        const reader = body.getReader();
        for (let r = await reader.read(); !r.done; r = await reader.read()) yield* cutBytes(rng, r.value);
      };
      const direct = rng.chance(0.5);
      const decoded = await settle(decodeSSE(direct ? body : resplit()));
      check(!decoded.hung, 'decodeSSE hung');
      expectEqual(decoded.values, expected, 'decoded events');
      if (poisonAt < 0) check(decoded.error === undefined, `unexpected error: ${String(decoded.error)}`);
      else {
        check(decoded.error instanceof TypeError, `expected the encoder's error, got ${String(decoded.error)}`);
        check(/'type'|line break/.test((decoded.error as Error).message), `the error does not say why: ${(decoded.error as Error).message}`);
      }
    });
  });

  it('with heartbeats in virtual time: pings exactly every heartbeatMs while the events are quiet, which the decoder skips', async () => {
    await checkSeeds(seedsFrom(3000, Math.round(perBlock / 2)), async (seed) => {
      const rng = new Rng(seed);
      if (rng.chance(0.15)) {
        // Events that end as they are subscribed: no ping, nothing scheduled.
        const ts = new TestScheduler(() => {});
        const drawn = Array.from({ length: rng.int(0, 5) }, () => randomEvent(rng, 'r', false));
        const body = await readBytes(toSSEStream(from(drawn.map((d) => d.event)), { heartbeatMs: rng.int(1, 50), scheduler: ts }));
        check(ts.actions.length === 0, `${ts.actions.length} action(s) scheduled for events that had ended`);
        check(
          dec.decode(concatBytes(body.chunks)) === dec.decode(enc.encode((await encodeFrames(drawn.map((d) => d.event))).values.join(''))),
          'the body is not the frames',
        );
        return;
      }
      const ts = new TestScheduler(() => {});
      const hb = rng.int(3, 40);
      const drawn = Array.from({ length: rng.int(0, 10) }, () => randomEvent(rng, 'r', false));
      // Event times, none on a ping's time (which of the two comes first would then be the scheduler's choice).
      const nudge = (t: number) => (t > 0 && t % hb === 0 ? t + 1 : t);
      const times: number[] = [];
      let now = 0;
      for (let i = 0; i < drawn.length; i++) times.push((now = nudge(now + rng.int(0, 3 * hb))));
      const endAt = nudge(now + rng.int(0, 3 * hb));
      let tornDown = 0;
      let subscribed = 0;
      const events$ = new Observable<AgentEvent>((subscriber) => {
        subscribed++;
        const actions = drawn.map((d, i) => ts.schedule(() => subscriber.next(d.event), times[i]));
        actions.push(ts.schedule(() => subscriber.complete(), endAt));
        return () => {
          tornDown++;
          for (const a of actions) a.unsubscribe();
        };
      });
      const cancelAt = rng.chance(0.4) ? nudge(rng.int(0, endAt)) : undefined;

      const body$ = toSSEStream(events$, { heartbeatMs: hb, scheduler: ts });
      await tick();
      check(subscribed === 0, 'the body subscribed before it was read');
      const reader = body$.getReader();
      const chunks: Uint8Array[] = [];
      let readError: unknown;
      const reading = (async () => {
        for (let r = await reader.read(); !r.done; r = await reader.read()) chunks.push(r.value);
      })().catch((e: unknown) => (readError = e));
      await tick();
      check(subscribed === 1, `the body subscribed ${subscribed} time(s) on its first read`);
      ts.maxFrames = cancelAt ?? endAt + 10 * hb;
      ts.flush();
      await tick();
      if (cancelAt !== undefined) await reader.cancel();
      await reading;
      check(readError === undefined, `reading failed: ${String(readError)}`);
      check(tornDown === 1, `the events were torn down ${tornDown} time(s)`);
      check(ts.actions.length === 0, `${ts.actions.length} scheduled action(s) left (a heartbeat?)`);

      // The exact body: frames at their times, a ping at every multiple of hb before the end.
      const until = cancelAt ?? endAt;
      const timeline: Array<{ at: number; text: string }> = [];
      const frames = (await encodeFrames(drawn.map((d) => d.event))).values;
      drawn.forEach((_, i) => times[i] <= until && timeline.push({ at: times[i], text: frames[i] }));
      for (let at = hb; cancelAt !== undefined ? at <= cancelAt : at < endAt; at += hb) timeline.push({ at, text: ': ping\n\n' });
      timeline.sort((a, b) => a.at - b.at);
      const body = dec.decode(concatBytes(chunks));
      // (Through UTF-8: a lone surrogate in an `event:` line goes out as U+FFFD; the JSON escapes it.)
      const expectedBody = dec.decode(enc.encode(timeline.map((t) => t.text).join('')));
      check(
        body === expectedBody,
        `body ${short(body)}\nexpected ${short(expectedBody)} (hb ${hb}, times ${times.join(',')}, end ${endAt}, cancel ${cancelAt})`,
      );

      const count = counters();
      const decoded = await settle(decodeSSE(countingIterable(cutBytes(rng, concatBytes(chunks)), count)));
      const shown = drawn.filter((_, i) => times[i] <= until).map((d) => d.expected);
      expectEqual(decoded.values, shown, 'decoded events');
      check(decoded.error === undefined && !decoded.hung, `decodeSSE: ${String(decoded.error ?? 'hung')}`);
    });
  });
});

describe('decodeSSE on malformed input', () => {
  it("gives what the SSE rules and the docs say: the events before, then an error naming the event (or the source's error); never a hang", async () => {
    const kinds = new Map<string, number>();
    await checkSeeds(seedsFrom(4000, perBlock * 2), async (seed) => {
      const rng = new Rng(seed);
      const drawnInput = randomMalformed(rng);
      const lines = drawnInput.lines;
      // As UTF-8 carries it (a lone surrogate of an `event:` name becomes U+FFFD), for every delivery alike.
      const text = dec.decode(enc.encode(drawnInput.text));
      const how = rng.pick(DELIVERIES);
      const sourceError = new Error(`socket hang up ${seed}`);
      const bad: Misbehaviour = {
        ...(how !== 'stream (all at once)' && rng.chance(0.25) ? { failAfter: { chunks: rng.int(0, 40), error: sourceError } } : {}),
        ...(rng.chance(0.3) ? { stop: rng.pick(['throws', 'rejects'] as const) } : {}),
      };
      const count = counters();
      const { source, chunks, pieces } = deliver(rng, text, how, count, bad);
      const failedAt = bad.failAfter ? Math.min(bad.failAfter.chunks, pieces.length) : undefined;
      const ref = failedAt === undefined ? referenceDecode(text) : referenceDecode(textOf(pieces, failedAt), false);
      const outcome = ref.error ? ref.error.kind : failedAt !== undefined ? 'source error' : 'ok';
      kinds.set(outcome, (kinds.get(outcome) ?? 0) + 1);
      tally(`malformed: ${outcome}${ref.errorAtEnd ? ' at the end' : ''}`, ...(bad.stop ? [`malformed: stop ${bad.stop}`] : []));
      // Sometimes the consumer leaves inside next, on a random event.
      const leaveAt = ref.events.length > 0 && rng.chance(0.25) ? rng.int(0, ref.events.length - 1) : undefined;
      if (leaveAt !== undefined) {
        const seen: unknown[] = [];
        const errors: unknown[] = [];
        let ended = false;
        const subscription: Subscription = decodeSSE(source).subscribe({
          next: (event) => {
            seen.push(event);
            if (seen.length === leaveAt + 1) subscription.unsubscribe();
          },
          error: (e: unknown) => errors.push(e),
          complete: () => (ended = true),
        });
        for (let i = 0; i < 5 && !subscription.closed; i++) await new Promise((r) => setTimeout(r, 1));
        await tick();
        const context = `input ${short(lines)} (${how}, ${chunks} chunks, leaving on event ${leaveAt + 1})`;
        tally(`malformed: left in next${leaveAt >= ref.events.length - (ref.atEnd ?? 0) ? ' on the event the end delivers' : ''}`);
        check(subscription.closed, `the subscription is still open on ${context}`);
        expectEqual(seen, ref.events.slice(0, leaveAt + 1), `events until leaving, ${context}`);
        check(errors.length === 0 && !ended, `after leaving: ${errors.length} error(s), completed ${ended} on ${context}`);
        const stops = how === 'stream (pulled)' ? count.cancels : how.startsWith('iterator') ? count.returns : -1;
        // Leaving on the event the end of the stream delivers: the source has ended, nothing to stop.
        const expected = leaveAt >= ref.events.length - (ref.atEnd ?? 0) ? 0 : 1;
        if (stops >= 0) check(stops === expected, `the source was stopped ${stops} time(s), expected ${expected}, on ${context}`);
        check(count.afterCancel === 0 && count.afterReturn === 0, `the source was read after it was stopped on ${context}`);
        return;
      }
      const decoded = await settle(decodeSSE(source));
      await tick();
      const context = `input ${short(lines)} (${how}, ${chunks} chunks${failedAt !== undefined ? `, failing after ${failedAt}` : ''}${bad.stop ? `, stopping ${bad.stop}` : ''})`;
      check(!decoded.hung, `decodeSSE hung on ${context}`);
      expectEqual(decoded.values, ref.events, `events before the outcome, ${context}`);
      const stopped = how === 'stream (pulled)' || how === 'stream (all at once)' ? count.cancels : how.startsWith('iterator') ? count.returns : -1;
      if (!ref.error) {
        if (failedAt === undefined) check(decoded.error === undefined, `unexpected error ${String(decoded.error)} on ${context}`);
        else check(decoded.error === sourceError, `expected the source's error, got ${String(decoded.error)} on ${context}`);
        // A source that ended or failed by itself has nothing to stop.
        if (stopped >= 0) check(stopped === 0, `the source was stopped ${stopped} time(s) on ${context}`);
      } else {
        const error = decoded.error as Error;
        const prefix =
          ref.error.kind === 'bad JSON'
            ? `decodeSSE: bad JSON in the data of a '${ref.error.type}' event (`
            : `decodeSSE: the data of a '${ref.error.type}' event is not a JSON object: `;
        check(
          error instanceof (ref.error.kind === 'bad JSON' ? SyntaxError : TypeError),
          `expected a ${ref.error.kind} error, got ${String(error)} on ${context}`,
        );
        check(error.message.startsWith(prefix), `error ${JSON.stringify(error.message)} does not start with ${JSON.stringify(prefix)} on ${context}`);
        // An error before the end stops the source; one at its end has nothing left to stop.
        if (stopped >= 0 && how !== 'stream (all at once)')
          check(stopped === (ref.errorAtEnd ? 0 : 1), `the source was stopped ${stopped} time(s) (error at end: ${ref.errorAtEnd}) on ${context}`);
      }
      check(count.afterCancel === 0 && count.afterReturn === 0, `the source was read after it was stopped on ${context}`);
    });
    if (replay === undefined) for (const kind of ['ok', 'bad JSON', 'not an object', 'source error']) expect(kinds.get(kind) ?? 0).toBeGreaterThan(0);
  });
});

describe('leaving early', () => {
  it('unsubscribing from decodeSSE at a random point cancels the stream, or returns the iterator, exactly once', async () => {
    await checkSeeds(seedsFrom(5000), async (seed) => {
      const rng = new Rng(seed);
      const drawn = Array.from({ length: rng.int(1, 12) }, () => randomEvent(rng, 'r', false));
      const text = (await encodeFrames(drawn.map((d) => d.event))).values.join('');
      const count = counters();
      const overStream = rng.chance(0.5);
      const chunks = cutBytes(rng, enc.encode(text));
      // The source never ends: only leaving stops it (and its cancel / return may fail: nobody is listening then).
      const bad: Misbehaviour = rng.chance(0.3) ? { stop: rng.pick(['throws', 'rejects'] as const) } : {};
      const source: SSESource = overStream ? pullStream(chunks, count, true, bad) : countingIterable(chunks, count, true, bad);
      const mode = rng.pick(['in next', 'from outside', 'at once', 'after the last event'] as const);
      const leaveAfter = rng.int(0, drawn.length - 1);
      const seen: unknown[] = [];
      const errors: unknown[] = [];
      let subscription: Subscription | undefined;
      let left = false;
      const leave = () => {
        left = true;
        subscription?.unsubscribe();
      };
      await new Promise<void>((resolve) => {
        subscription = decodeSSE(source).subscribe({
          next: (event) => {
            seen.push(event);
            if (mode === 'in next' && seen.length === leaveAfter + 1) {
              leave();
              resolve();
            }
            if (mode === 'after the last event' && seen.length === drawn.length) setTimeout(() => (leave(), resolve()), rng.int(0, 2));
          },
          error: (e: unknown) => (errors.push(e), resolve()),
          complete: () => resolve(),
        });
        if (mode === 'at once') {
          leave();
          resolve();
        }
        if (mode === 'from outside') {
          const pulls = rng.int(0, chunks.length);
          const poll = () => ((overStream ? count.pulls : count.nexts) >= pulls ? (leave(), resolve()) : setImmediate(poll));
          poll();
        }
      });
      for (let i = 0; i < 3; i++) await tick();
      tally(`leave decodeSSE: ${mode} over ${overStream ? 'a stream' : 'an iterator'}${bad.stop ? `, stop ${bad.stop}` : ''}`);
      const context = `${mode}, after ${leaveAfter + 1} of ${drawn.length} events, over ${overStream ? 'a stream' : 'an iterator'} in ${chunks.length} chunks${bad.stop ? ` whose stop ${bad.stop}` : ''}`;
      check(left, `the decoder ended by itself (${context})`);
      check(errors.length === 0, `error: ${String(errors[0])} (${context})`);
      const stops = overStream ? count.cancels : count.returns;
      check(stops === 1, `the source was ${overStream ? 'cancelled' : 'returned'} ${stops} time(s) (${context})`);
      check(count.afterCancel === 0 && count.afterReturn === 0, `the source was read after it was stopped (${context})`);
      const expected = drawn.map((d) => d.expected);
      if (mode === 'in next') expectEqual(seen, expected.slice(0, leaveAfter + 1), `events (${context})`);
      else if (mode === 'after the last event') expectEqual(seen, expected, `events (${context})`);
      else expectEqual(seen, expected.slice(0, seen.length), `events (${context})`);
    });
  });

  it("cancelling toSSEStream's body unsubscribes a real run in virtual time: its teardown runs, a running tool is torn down, no timer is left", async () => {
    await checkSeeds(seedsFrom(6000, Math.round(perBlock / 2)), async (seed) => {
      const outcome = async (cancel: boolean) => {
        const rng = new Rng(seed);
        const ts = new TestScheduler(() => {});
        let active = 0;
        const slow = defineTool({
          name: 'slow',
          description: 'Answers after ms virtual ms',
          parameters: z.object({ ms: z.number(), say: z.string() }),
          execute: ({ ms, say }) =>
            new Observable<string>((subscriber) => {
              active++;
              const action = ts.schedule(() => (subscriber.next(say), subscriber.complete()), ms);
              return () => (active--, action.unsubscribe());
            }),
        });
        const turns: ScriptedTurn[] = [];
        const n = rng.int(1, 4);
        for (let i = 0; i < n; i++) {
          const delay = rng.int(1, 30);
          if (i < n - 1)
            turns.push({
              toolCalls: Array.from({ length: rng.int(1, 2) }, () => ({ name: 'slow', args: { ms: rng.int(1, 200), say: randomText(rng, false) } })),
              delay,
              usage: usage(rng),
            });
          else turns.push({ text: Array.from({ length: rng.int(1, 4) }, () => randomText(rng, false)), delay, usage: usage(rng) });
        }
        const agent = createAgent({ model: scriptedModel(turns, { scheduler: ts }), tools: [slow], scheduler: ts });
        const hb = rng.chance(0.5) ? rng.int(5, 50) : Infinity;
        let finalized = 0;
        const direct: AgentEvent[] = [];
        const events$ = agent.run('go', { runId: `run-${seed}` }).pipe(
          finalize(() => finalized++),
          map((e) => (direct.push(e), e)),
        );
        const reader = toSSEStream(events$, { heartbeatMs: hb, scheduler: ts }).getReader();
        const chunks: Uint8Array[] = [];
        const reading = (async () => {
          for (let r = await reader.read(); !r.done; r = await reader.read()) chunks.push(r.value);
        })();
        await tick();
        const cancelAt = rng.int(0, 400);
        ts.maxFrames = cancel ? cancelAt : 100_000;
        ts.flush();
        await tick();
        const endedBefore = finalized;
        const activeBefore = active;
        if (cancel) await reader.cancel();
        await reading;
        return { direct, chunks, finalized, endedBefore, activeBefore, active, left: ts.actions.length, hb, cancelAt };
      };
      const whole = await outcome(false);
      check(
        whole.finalized === 1 && whole.active === 0 && whole.left === 0,
        `a run read to its end: finalized ${whole.finalized}, tools running ${whole.active}, actions left ${whole.left}`,
      );
      const body = dec.decode(concatBytes(whole.chunks));
      const viaWire = await settle(decodeSSE(pullStream(cutBytes(new Rng(seed), concatBytes(whole.chunks)), counters())));
      expectEqual(viaWire.values, JSON.parse(JSON.stringify(whole.direct)), 'the run through the body');
      check(body.replace(/: ping\n\n/g, '') === (await encodeFrames(whole.direct)).values.join(''), 'the body without pings is not the frames of the run');

      const cut = await outcome(true);
      const context = `cancelled at virtual ${cut.cancelAt} ms (heartbeat ${cut.hb})`;
      tally(
        cut.endedBefore > 0
          ? 'body cancelled: after the run ended'
          : cut.activeBefore > 0
            ? 'body cancelled: while a tool ran'
            : 'body cancelled: mid-run, no tool running',
      );
      check(cut.finalized === 1, `the run's teardown ran ${cut.finalized} time(s), ${context}`);
      check(cut.active === 0, `${cut.active} tool(s) still running, ${context}`);
      check(cut.left === 0, `${cut.left} scheduled action(s) left, ${context}`);
      const cutDecoded = await settle(decodeSSE(pullStream(cut.chunks, counters())));
      expectEqual(cutDecoded.values, JSON.parse(JSON.stringify(cut.direct)), `the events sent before the cancel, ${context}`);
      expectEqual(cut.direct, whole.direct.slice(0, cut.direct.length), `the cancelled run is a prefix of the whole run, ${context}`);
    });
  });

  it('toAsyncIterable: break at a random point unsubscribes once, and nothing is emitted after', async () => {
    await checkSeeds(seedsFrom(7000), async (seed) => {
      const rng = new Rng(seed);
      const values = Array.from({ length: rng.int(0, 15) }, (_, i) => i);
      const timing = values.map(() => rng.pick(['sync', 'microtask', 'timer'] as const));
      const failWith = rng.chance(0.3) ? new Error(`boom ${seed}`) : undefined;
      let tornDown = 0;
      let afterTeardown = 0;
      let subscriptions = 0;
      const source = new Observable<number>((subscriber) => {
        subscriptions++;
        let closed = false;
        let i = 0;
        const step = (): void => {
          while (!closed && i < values.length) {
            const v = values[i++];
            const emit = () => {
              if (closed) afterTeardown++;
              else subscriber.next(v);
            };
            const t = timing[i - 1];
            if (t === 'sync') emit();
            else {
              if (t === 'microtask') queueMicrotask(() => (emit(), step()));
              else setTimeout(() => (emit(), step()), 0);
              return;
            }
          }
          if (!closed && i >= values.length) {
            if (failWith) subscriber.error(failWith);
            else subscriber.complete();
          }
        };
        step();
        return () => {
          closed = true;
          tornDown++;
        };
      });
      const breakAt = rng.chance(0.8) && values.length > 0 ? rng.int(0, values.length - 1) : -1;
      const seen: number[] = [];
      const iterator = toAsyncIterable(source);
      let thrown: unknown;
      try {
        for await (const v of iterator) {
          seen.push(v);
          if (seen.length - 1 === breakAt) break;
        }
      } catch (error) {
        thrown = error;
      }
      await new Promise((r) => setTimeout(r, 2));
      const context = `break after ${breakAt + 1} of ${values.length} (${timing.join(',')})${failWith ? ', then an error' : ''}`;
      check(thrown === (failWith && breakAt < 0 ? failWith : undefined), `the loop threw ${String(thrown)}, ${context}`);
      expectEqual(seen, breakAt >= 0 ? values.slice(0, breakAt + 1) : values, `values, ${context}`);
      check(subscriptions === 1 && tornDown === 1, `subscribed ${subscriptions}, torn down ${tornDown}, ${context}`);
      check(afterTeardown === 0 || breakAt >= 0, `values after the end, ${context}`);
      expectEqual(await iterator.next(), { value: undefined, done: true }, `next() after the loop, ${context}`);
      check(subscriptions === 1, `next() after leaving subscribed again, ${context}`);
    });
  });

  it('toReadableStream: cancel after a random number of reads unsubscribes once; an error comes after the values before it', async () => {
    await checkSeeds(seedsFrom(8000), async (seed) => {
      const rng = new Rng(seed);
      const drawn = Array.from({ length: rng.int(0, 10) }, () => randomEvent(rng, 'r', false).event);
      const failWith = rng.chance(0.3) ? new Error(`boom ${seed}`) : undefined;
      let tornDown = 0;
      let subscribed = 0;
      const asyncGaps = rng.chance(0.5);
      const source = new Observable<AgentEvent>((subscriber) => {
        subscribed++;
        let i = 0;
        let handle: ReturnType<typeof setTimeout> | undefined;
        const step = () => {
          while (i < drawn.length) {
            subscriber.next(drawn[i++]);
            if (asyncGaps && rng.chance(0.5)) {
              handle = setTimeout(step, 0);
              return;
            }
          }
          if (failWith) subscriber.error(failWith);
          else subscriber.complete();
        };
        step();
        return () => {
          tornDown++;
          clearTimeout(handle);
        };
      });
      const stream = toReadableStream(source);
      await tick();
      check(subscribed === 0, 'subscribed before the first read');
      const reader = stream.getReader();
      const reads = rng.chance(0.6) ? rng.int(0, drawn.length) : Infinity;
      const seen: AgentEvent[] = [];
      let error: unknown;
      let cancelError: unknown;
      try {
        while (seen.length < reads) {
          const r = await reader.read();
          if (r.done) break;
          seen.push(r.value);
        }
      } catch (e) {
        error = e;
      }
      // Cancelling a stream that has errored meanwhile rejects with its error (the Web streams rules).
      if (reads !== Infinity) await reader.cancel().catch((e: unknown) => (cancelError = e));
      await new Promise((r) => setTimeout(r, 2));
      const context = `${reads} read(s) of ${drawn.length}${failWith ? ', then an error' : ''}, ${asyncGaps ? 'with' : 'without'} gaps`;
      expectEqual(seen, drawn.slice(0, Math.min(reads, drawn.length)), `values, ${context}`);
      // Lazy: a stream cancelled before its first read never subscribes.
      const expectSubscribed = reads === 0 ? 0 : 1;
      check(subscribed === expectSubscribed, `subscribed ${subscribed} time(s), ${context}`);
      check(tornDown === expectSubscribed, `torn down ${tornDown} time(s), ${context}`);
      if (reads === Infinity && failWith) check(error === failWith, `expected the source's error after the values, got ${String(error)}, ${context}`);
      else check(error === undefined, `unexpected error ${String(error)}, ${context}`);
      check(cancelError === undefined || (cancelError === failWith && seen.length === drawn.length), `cancel rejected with ${String(cancelError)}, ${context}`);
    });
  });

  it('ofType keeps exactly the events of the given types, in order', async () => {
    await checkSeeds(seedsFrom(9000), async (seed) => {
      const rng = new Rng(seed);
      const events = Array.from({ length: rng.int(0, 30) }, () => randomEvent(rng, 'r', false).event);
      const types = Array.from({ length: rng.int(1, 4) }, () => (rng.chance(0.8) ? rng.pick(BUILT_IN_TYPES) : (rng.pick(CUSTOM_TYPES) as AgentEventType)));
      const kept = await lastValueFrom(from(events).pipe(ofType(...types), toArray()));
      expectEqual(
        kept,
        events.filter((e) => types.includes(e.type)),
        `ofType(${types.join(', ')})`,
      );
    });
    expect(() => ofType()).toThrow(TypeError);
  });
});

// ---------------------------------------------------------------------------------------------
// End to end: a real run over node:http
// ---------------------------------------------------------------------------------------------

describe('a real run over node:http, read with fetch and decodeSSE', () => {
  let server: Server;
  let base = '';
  const rng0 = new Rng(replay ?? 11_000);
  const sockets = new Set<Socket>();

  /** The same agent for a seed, every time (the scripted model keeps its own count of calls). */
  function agentFor(seed: number) {
    const rng = new Rng(seed);
    const echo = defineTool({
      name: 'echo',
      description: 'Echoes',
      parameters: z.object({ s: z.string() }),
      execute: async ({ s }) => ({ s, note: randomText(new Rng(seed + s.length), false), list: [1, 'ü😀', null] }),
    });
    const turns: ScriptedTurn[] = [];
    const n = rng.int(1, 3);
    for (let i = 0; i < n - 1; i++) {
      turns.push({
        reasoning: randomText(rng),
        toolCalls: Array.from({ length: rng.int(1, 2) }, () => ({ name: 'echo', args: { s: randomText(rng) } })),
        usage: usage(rng),
      });
    }
    turns.push({ text: Array.from({ length: rng.int(1, 5) }, () => randomText(rng)), usage: usage(rng) });
    return createAgent({ model: scriptedModel(turns), tools: [echo] });
  }

  /** Runs the server started and ended, by seed, for the client-leaves cases. */
  const serverSide = new Map<number, { ended: Promise<void>; closed: Promise<void> }>();

  /** An agent whose second tool call never finishes: a run that only the client's leaving ends. */
  function hangingAgentFor(seed: number) {
    const rng = new Rng(seed);
    const hang = defineTool({ name: 'hang', description: 'Never finishes', parameters: z.object({}), execute: () => new Observable<never>(() => {}) });
    return createAgent({
      model: scriptedModel([{ text: Array.from({ length: rng.int(1, 6) }, () => randomText(rng, false)), toolCalls: [{ name: 'hang', args: {} }] }]),
      tools: [hang],
    });
  }

  beforeAll(async () => {
    server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', base);
      const seed = Number(url.searchParams.get('seed'));
      res.writeHead(200, sseHeaders);
      let events$: Observable<AgentEvent> = agentFor(seed).run('go', { runId: `run-${seed}` });
      if (url.pathname === '/hang') {
        let ended!: () => void;
        let closed!: () => void;
        serverSide.set(seed, { ended: new Promise<void>((r) => (ended = r)), closed: new Promise<void>((r) => (closed = r)) });
        res.on('close', () => closed());
        events$ = hangingAgentFor(seed)
          .run('go', { runId: `run-${seed}` })
          .pipe(finalize(() => ended()));
      }
      const body = toSSEStream(events$, rng0.chance(0.5) ? { heartbeatMs: 5 } : {});
      pipeline(Readable.fromWeb(body as unknown as NodeReadableStream<Uint8Array>), res, () => {});
    });
    server.on('connection', (socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve, reject) => server.close((e) => (e ? reject(e) : resolve())));
    for (let i = 0; i < 10 && sockets.size > 0; i++) await tick();
    expect(sockets.size).toBe(0);
  });

  it('the client decodes the events of the same run without the wire', async () => {
    await checkSeeds(seedsFrom(10_000, Math.max(1, Math.round(perBlock / 10))), async (seed) => {
      const direct = await lastValueFrom(
        agentFor(seed)
          .run('go', { runId: `run-${seed}` })
          .pipe(toArray()),
      );
      check(
        direct.at(-1)?.type === 'run-end' && (direct.at(-1) as { reason: string }).reason === 'completed',
        `the run did not complete: ${short(direct.at(-1))}`,
      );
      const response = await fetch(`${base}/chat?seed=${seed}`);
      check(response.status === 200 && /^text\/event-stream/.test(response.headers.get('content-type') ?? ''), `status ${response.status}`);
      const received = await settle(decodeSSE(response.body!));
      check(!received.hung && received.error === undefined, `decodeSSE: ${String(received.error ?? 'hung')}`);
      expectEqual(received.values, JSON.parse(JSON.stringify(direct)), 'the events over the wire');
    });
  });

  it('a client that leaves at a random point aborts the request, and the server unsubscribes the run', async () => {
    await checkSeeds(seedsFrom(11_000, Math.max(1, Math.round(perBlock / 15))), async (seed) => {
      const rng = new Rng(seed ^ 0x5bd1e995);
      const direct: AgentEvent[] = [];
      // The same run without the wire, up to the call that hangs.
      const probe = hangingAgentFor(seed)
        .run('go', { runId: `run-${seed}` })
        .subscribe((e) => direct.push(e));
      await new Promise((r) => setTimeout(r, 5));
      probe.unsubscribe();
      const leaveAfter = rng.int(1, direct.length);
      const response = await fetch(`${base}/hang?seed=${seed}`);
      const seen: AgentEvent[] = [];
      const errors: unknown[] = [];
      await new Promise<void>((resolve) => {
        const subscription = decodeSSE(response.body!).subscribe({
          next: (event) => {
            seen.push(event);
            if (seen.length === leaveAfter) {
              subscription.unsubscribe();
              resolve();
            }
          },
          error: (e: unknown) => (errors.push(e), resolve()),
          complete: () => resolve(),
        });
      });
      const side = serverSide.get(seed);
      check(side !== undefined, 'the server saw no request');
      const guard = new Promise<string>((r) => setTimeout(() => r('timed out'), 2000).unref());
      const outcome = await Promise.race([Promise.all([side!.ended, side!.closed]).then(() => 'ok'), guard]);
      check(outcome === 'ok', `the server did not end the run and the response after the client left after ${leaveAfter} of ${direct.length} events`);
      check(errors.length === 0, `error: ${String(errors[0])}`);
      expectEqual(seen, JSON.parse(JSON.stringify(direct.slice(0, leaveAfter))), 'the events before leaving');
    });
  });
});
