import type { AgentEvent, AgentResponse, RunEndReason } from '../events/types';
import type { ContentPart, Message, ToolCallPart } from '../messages/message';
import { UnparsedArguments } from '../messages/unparsedArguments';
import type { ModelSettings, ToolChoice, ToolSpec, Usage } from '../model/types';
import type { StoredState } from '../state/stateBag';
import { JournalFormatError } from './errors';
import { errorMessage } from '../internal/errorMessage';

/**
 * The newest journal format this package writes; it reads this version and older ones. A record
 * carries the version of the format that gave its kind the shape it has: format 2 changed the
 * `deltas` record only (its texts joined, with each one's length, where format 1 held an array
 * with one string per delta, about three times the cost per delta to write and to read), so every
 * other kind is still written as format 1, and a journal with no deltas reads on older versions.
 *
 * @example
 * if (record.version > JOURNAL_FORMAT_VERSION) throw new Error('written by a newer rx-agent');
 */
export const JOURNAL_FORMAT_VERSION = 2;

/** @internal The version of every record kind but `deltas`: format 1 gave them the shape they have. */
export const FIRST_FORMAT_VERSION = 1;

/** What a `deltas` record of either format holds besides its texts. */
interface DeltasRecord {
  readonly version: number;
  readonly kind: 'deltas';
  /** Consecutive `text-delta` (or `reasoning-delta`) events of one iteration, the first with `seq`, then seq + 1… */
  readonly type: 'text-delta' | 'reasoning-delta';
  readonly iteration: number;
  readonly seq: number;
}

/** State of both scopes as a record keeps it: each scope's values by key. */
type ScopedState = { readonly run: Record<string, StoredState>; readonly session: Record<string, StoredState> };

/**
 * One record of a run's journal: plain JSON, so any store can keep it as text. Every record
 * carries the format `version` it was written with; a reader refuses a newer one
 * ({@link JournalFormatError}) rather than guess.
 *
 * - `start`: the run's first record (its id, session, input, how it waits for answers, the
 *   observers' `context`, such as the trace it belongs to, its starting shared `state`, and the
 *   specs of its own client tools).
 * - `event`: an event of the run, with its `seq` (1, 2, 3… per run).
 * - `deltas`: consecutive text (or reasoning) deltas of an iteration in one record: the events
 *   they stand for are exactly those the run sent, one per text, with consecutive `seq`.
 * - `turn`: the turn as `beforeMessageTurn` left it (its messages, instructions, settings, tool names).
 * - `model-answer`: an iteration's model answer (resuming never calls the model for it again).
 * - `tool-start` / `tool-outcome`: a call is about to run / its result (what the model reads).
 * - `request`: a request is open, with its absolute `deadline` (ms since the epoch) if any.
 * - `answer`: the answer the run took for a request.
 * - `checkpoint`: the loop at an iteration boundary: the messages added since the last checkpoint
 *   (or `turn`), middleware state of both scopes, usage and counters.
 * - `end`: the run is over (`reason` as in `run-end`, `suspended` excepted): a store applies its
 *   retention from here.
 *
 * @example
 * const record: JournalRecord = { version: 1, kind: 'tool-start', iteration: 0, callId: 'c1', name: 'pay' };
 */
export type JournalRecord =
  | {
      readonly version: number;
      readonly kind: 'start';
      readonly runId: string;
      readonly sessionId?: string;
      readonly agent: string;
      readonly input: readonly Message[];
      readonly onRequest: 'wait' | 'suspend';
      /**
       * Context the run's observers asked to keep (telemetry's W3C `traceparent`, `tracestate`), so
       * that the run resumed in another process continues it. Optional: journals written without
       * it read as before, so it needs no new format version.
       */
      readonly context?: Readonly<Record<string, string>>;
      /**
       * The run's starting values of shared state (its `state` option) as the schemas parsed them,
       * by scope as a checkpoint holds state: a run resumed before its first checkpoint starts from
       * them again. Optional: journals written without it read as before.
       */
      readonly state?: ScopedState;
      /**
       * The specs (name, description, JSON Schema) of the client tools the run was given for itself
       * (`RunOptions.tools`, AG-UI's tools): a resume rebuilds them, so the model is offered them
       * again. Optional: journals written without it read as before.
       */
      readonly clientTools?: readonly ToolSpec[];
    }
  | {
      readonly version: number;
      readonly kind: 'event';
      readonly event: AgentEvent & { readonly seq: number };
      /** Set for a `tool-call` event whose arguments were not JSON: they are kept as their text (`args`), and this is why they did not parse. */
      readonly unparsed?: UnparsedCalls;
    }
  | (DeltasRecord & {
      /** The deltas' texts, joined (format 2). */
      readonly text: string;
      /** Each delta's length in `text`, in UTF-16 code units as `String.length` counts (format 2). */
      readonly lengths: readonly number[];
    })
  | (DeltasRecord & {
      /** Each delta's text (format 1, still read). */
      readonly texts: readonly string[];
    })
  | {
      readonly version: number;
      readonly kind: 'turn';
      readonly messages: readonly Message[];
      readonly unparsed?: UnparsedCalls;
      readonly instructions?: string;
      readonly settings: ModelSettings;
      readonly toolChoice?: ToolChoice;
      readonly tools: readonly string[];
    }
  | {
      readonly version: number;
      readonly kind: 'model-answer';
      readonly iteration: number;
      readonly message: Message;
      readonly usage?: Usage;
      readonly unparsed?: UnparsedCalls;
    }
  | { readonly version: number; readonly kind: 'tool-start'; readonly iteration: number; readonly callId: string; readonly name: string }
  | {
      readonly version: number;
      readonly kind: 'tool-outcome';
      readonly iteration: number;
      readonly callId: string;
      readonly name: string;
      readonly result: unknown;
      readonly isError: boolean;
      /**
       * Middleware state of both scopes once the call's `afterFunction` hooks ran, when they (or
       * the iteration's earlier hooks) changed it since the last checkpoint or outcome: a resume
       * that reuses the outcome restores it, as the hooks are not run again.
       */
      readonly state?: ScopedState;
    }
  | { readonly version: number; readonly kind: 'request'; readonly requestId: string; readonly type: string; readonly deadline?: number }
  | { readonly version: number; readonly kind: 'answer'; readonly requestId: string; readonly response: AgentResponse }
  | {
      readonly version: number;
      readonly kind: 'checkpoint';
      /** The iteration that runs next. */
      readonly iteration: number;
      readonly messages: readonly Message[];
      readonly unparsed?: UnparsedCalls;
      /**
       * Set when a middleware rewrote earlier messages: `messages` is then the whole list (history
       * included) and `turnStart` where the turn begins in it.
       */
      readonly replace?: boolean;
      readonly turnStart?: number;
      readonly state: ScopedState;
      readonly usage: Usage;
      readonly functionCalls: number;
      /** Set when the loop is over (afterMessageTurn and the end are left). */
      readonly done?: { readonly reason: RunEndReason; readonly terminationReason?: string };
    }
  | { readonly version: number; readonly kind: 'end'; readonly reason: Exclude<RunEndReason, 'suspended'> };

/**
 * The tool calls of a record whose arguments were not valid JSON (an {@link UnparsedArguments}),
 * by call id: why they did not parse. The record keeps their `args` as the model's text (plain
 * JSON, whatever the store does with it), and a reader makes them {@link UnparsedArguments} again,
 * so a resumed run and a replay see the calls exactly as the live run did.
 *
 * @example
 * const unparsed: UnparsedCalls = { c1: "Expected ',' or '}' after property value in JSON at position 8" };
 */
export type UnparsedCalls = Readonly<Record<string, string>>;

/**
 * `messages` as a record keeps them: the arguments of calls that were not JSON as their text, and
 * why they did not parse (undefined when every call's arguments were JSON: the messages as they are).
 *
 * @example
 * const { messages, unparsed } = plainMessages(loop.log.since(start));
 */
export function plainMessages(messages: readonly Message[]): { messages: readonly Message[]; unparsed: UnparsedCalls | undefined } {
  let unparsed: Record<string, string> | undefined;
  let out: Message[] | undefined;
  for (let i = 0; i < messages.length; i++) {
    const { content } = messages[i];
    if (!content.some(isUnparsedCall)) continue;
    unparsed ??= {};
    out ??= messages.slice();
    for (const part of content) if (isUnparsedCall(part)) unparsed[part.callId] = part.args.reason;
    out[i] = { ...messages[i], content: content.map((part) => (isUnparsedCall(part) ? { ...part, args: part.args.text } : part)) };
  }
  return { messages: out ?? messages, unparsed };
}

/**
 * The messages of a record as the run had them: the calls `unparsed` names get their
 * {@link UnparsedArguments} back.
 *
 * @example
 * const messages = restoreMessages(record.messages, record.unparsed);
 */
export function restoreMessages(messages: readonly Message[], unparsed: UnparsedCalls | undefined): readonly Message[] {
  if (unparsed === undefined || unparsed === null || typeof unparsed !== 'object') return messages;
  return messages.map((message) =>
    message.content.some((part) => isNamedCall(part, unparsed))
      ? { ...message, content: message.content.map((part) => (isNamedCall(part, unparsed) ? restoreCall(part, unparsed) : part)) }
      : message,
  );
}

function isUnparsedCall(part: ContentPart): part is ToolCallPart & { args: UnparsedArguments } {
  return part.type === 'tool-call' && part.args instanceof UnparsedArguments;
}

function isNamedCall(part: ContentPart, unparsed: UnparsedCalls): part is ToolCallPart {
  return part.type === 'tool-call' && typeof part.args === 'string' && Object.prototype.hasOwnProperty.call(unparsed, part.callId);
}

function restoreCall(part: ToolCallPart, unparsed: UnparsedCalls): ToolCallPart {
  return { ...part, args: new UnparsedArguments(part.args as string, String(unparsed[part.callId])) };
}

/**
 * The kinds of {@link JournalRecord}.
 *
 * @example
 * const isEnd = (kind: JournalRecordKind) => kind === 'end';
 */
export type JournalRecordKind = JournalRecord['kind'];

/**
 * A record as a store hands it back: with its `position` in the run's journal (1, 2, 3…, no gap).
 *
 * @example
 * store.read('run-1', 0) // [{ position: 1, record: { version: 1, kind: 'start', … } }, …]
 */
export interface JournalEntry {
  readonly position: number;
  readonly record: JournalRecord;
}

const KINDS: ReadonlySet<string> = new Set<JournalRecordKind>([
  'start',
  'event',
  'deltas',
  'turn',
  'model-answer',
  'tool-start',
  'tool-outcome',
  'request',
  'answer',
  'checkpoint',
  'end',
]);

/**
 * Checks a record read back from a store: a known kind and a format version this package reads.
 * Throws a {@link JournalFormatError} naming the run and the position otherwise.
 *
 * @example
 * const record = checkRecord('run-1', 7, JSON.parse(text));
 */
export function checkRecord(runId: string, position: number, value: unknown): JournalRecord {
  if (value === null || typeof value !== 'object') {
    throw new JournalFormatError(runId, position, `not a journal record (got ${value === null ? 'null' : typeof value})`);
  }
  const { version, kind } = value as { version?: unknown; kind?: unknown };
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 1) {
    throw new JournalFormatError(runId, position, 'the record has no format version');
  }
  if (version > JOURNAL_FORMAT_VERSION) {
    throw new JournalFormatError(
      runId,
      position,
      `written by journal format version ${version}; this version of rx-agent reads up to ${JOURNAL_FORMAT_VERSION} (upgrade it to resume this run)`,
    );
  }
  if (typeof kind !== 'string' || !KINDS.has(kind)) {
    throw new JournalFormatError(runId, position, `unknown record kind ${JSON.stringify(kind)}`);
  }
  if (kind === 'event') {
    const event = (value as { event?: { type?: unknown; seq?: unknown } }).event;
    if (!event || typeof event.type !== 'string' || typeof event.seq !== 'number') {
      throw new JournalFormatError(runId, position, 'an event record without an event and its seq');
    }
  }
  if (kind === 'deltas') {
    const { type, texts, seq, text, lengths } = value as { type?: unknown; texts?: unknown; seq?: unknown; text?: unknown; lengths?: unknown };
    // One shape or the other (readers tell them apart by `texts`): format 1's texts, or format 2's text and lengths.
    const shaped = texts === undefined ? typeof text === 'string' && Array.isArray(lengths) : Array.isArray(texts) && texts.every((t) => typeof t === 'string');
    if ((type !== 'text-delta' && type !== 'reasoning-delta') || typeof seq !== 'number' || !shaped) {
      throw new JournalFormatError(runId, position, 'a deltas record without its type, seq and texts');
    }
    if (texts === undefined && !lengthsFit(text as string, lengths as unknown[])) {
      throw new JournalFormatError(runId, position, "a deltas record whose lengths do not add up to its text's");
    }
  }
  return value as JournalRecord;
}

/**
 * The events a journal record stands for (none for a record that is not an event).
 *
 * @example
 * recordEvents('run-1', { version: 2, kind: 'deltas', type: 'text-delta', iteration: 0, seq: 4, text: 'Hello', lengths: [3, 2] });
 * // [{ type: 'text-delta', runId: 'run-1', iteration: 0, text: 'Hel', seq: 4 }, { …, text: 'lo', seq: 5 }]
 */
export function recordEvents(runId: string, record: JournalRecord): AgentEvent[] {
  if (record.kind === 'event') {
    const { event, unparsed } = record;
    if (unparsed !== undefined && event.type === 'tool-call' && typeof event.args === 'string' && typeof unparsed[event.callId] === 'string') {
      return [{ ...event, args: new UnparsedArguments(event.args, unparsed[event.callId]) }];
    }
    return [event];
  }
  if (record.kind !== 'deltas') return [];
  const { type, iteration, seq } = record;
  if ('texts' in record) return record.texts.map((text, i) => ({ type, runId, iteration, text, seq: seq + i }));
  const { text, lengths } = record;
  const events = new Array<AgentEvent>(lengths.length);
  let at = 0;
  for (let i = 0; i < lengths.length; i++) {
    const end = at + lengths[i];
    events[i] = { type, runId, iteration, text: text.slice(at, end), seq: seq + i };
    at = end;
  }
  return events;
}

/**
 * How many delta events a `deltas` record stands for, whichever format wrote it.
 *
 * @example
 * deltaCount({ version: 2, kind: 'deltas', type: 'text-delta', iteration: 0, seq: 4, text: 'Hello', lengths: [3, 2] }); // 2
 */
export function deltaCount(record: JournalRecord & { readonly kind: 'deltas' }): number {
  return 'texts' in record ? record.texts.length : record.lengths.length;
}

/** Whether `lengths` are whole numbers that add up to the length of `text`. */
function lengthsFit(text: string, lengths: readonly unknown[]): boolean {
  let total = 0;
  for (const length of lengths) {
    if (typeof length !== 'number' || !Number.isInteger(length) || length < 0) return false;
    total += length;
  }
  return total === text.length;
}

/**
 * A record as the JSON text a store keeps. A record JSON cannot hold (a state value holding a
 * `BigInt` or a cycle) is a TypeError that names the run, the record and why: what a journaled run
 * keeps must be JSON. (A run never hands a store one: it keeps what JSON cannot hold in an event
 * as the string `The value could not be sent: …`, and ends for good on any other such record,
 * which it refuses with the same TypeError before a store sees it.)
 *
 * @example
 * recordText('r1', { version: 1, kind: 'tool-start', iteration: 0, callId: 'c1', name: 'pay' }); // '{"version":1,"kind":"tool-start",…}'
 */
export function recordText(runId: string, record: JournalRecord): string {
  try {
    return JSON.stringify(record);
  } catch (error) {
    throw cannotHold(runId, record, errorMessage(error));
  }
}

/**
 * @internal The TypeError of a journal that cannot hold `record`, saying `why` (what
 * {@link recordText} throws; what a run's journal refuses a record with before a store sees it).
 *
 * @example
 * cannotHold('r1', checkpoint, "state 'total' holds a BigInt, which JSON cannot hold");
 * // TypeError: The journal of run 'r1' cannot hold its checkpoint record: state 'total' holds a BigInt, … (what a journaled run keeps must be JSON: …)
 */
export function cannotHold(runId: string, record: JournalRecord, why: string): TypeError {
  const what =
    record.kind === 'event'
      ? `'${record.event.type}' event`
      : record.kind === 'tool-outcome' || record.kind === 'tool-start'
        ? `${record.kind} record of tool '${record.name}'`
        : `${record.kind} record`;
  return new TypeError(
    `The journal of run '${runId}' cannot hold its ${what}: ${why} (what a journaled run keeps must be JSON: a BigInt as a string, a cyclic object as plain data)`,
  );
}
