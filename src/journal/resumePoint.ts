import type { AgentEvent, AgentResponse, PendingRequest, RunEndReason } from '../events/types';
import type { Message } from '../messages/message';
import type { ModelSettings, ToolChoice, ToolSpec, Usage } from '../model/types';
import type { StoredState } from '../state/stateBag';
import { JournalFormatError } from './errors';
import { checkRecord, deltaCount, restoreMessages, type JournalEntry, type JournalRecord } from './records';

/** The loop as the last checkpoint left it. */
export interface Checkpoint {
  /** The iteration that runs next. */
  readonly iteration: number;
  /** The turn's messages (history excluded), or, when `replace`, the whole list. */
  readonly messages: readonly Message[];
  readonly replace: boolean;
  readonly turnStart: number | undefined;
  readonly state: { readonly run: Record<string, StoredState>; readonly session: Record<string, StoredState> };
  readonly usage: Usage;
  readonly functionCalls: number;
  readonly done: { readonly reason: RunEndReason; readonly terminationReason?: string } | undefined;
}

/**
 * @internal What a run's journal says: how it started, where it stopped, and what of the
 * interrupted iteration is done already. Read once when a run is resumed, answered or looked up.
 */
export interface ResumePoint {
  readonly runId: string;
  readonly sessionId: string | undefined;
  readonly input: readonly Message[];
  readonly onRequest: 'wait' | 'suspend';
  /** The `context` of the start record (its string entries), if any. */
  readonly context: Readonly<Record<string, string>> | undefined;
  /** The starting values of shared state the start record holds, if any (a run resumed before its first checkpoint starts from them). */
  readonly state: Checkpoint['state'] | undefined;
  /** The specs of the run's own client tools the start record holds, if any (a resume offers them again). */
  readonly clientTools: readonly ToolSpec[] | undefined;
  /** The journal's last position, and the last event's seq. */
  readonly position: number;
  readonly seq: number;
  /** Set when the journal holds an `end` record. */
  readonly ended: Exclude<RunEndReason, 'suspended'> | undefined;
  /** The last event is `run-end` with reason `suspended`. */
  readonly suspended: boolean;
  readonly turn:
    | {
        readonly instructions: string | undefined;
        readonly settings: ModelSettings;
        readonly toolChoice: ToolChoice | undefined;
        readonly tools: readonly string[];
      }
    | undefined;
  readonly checkpoint: Checkpoint | undefined;
  /** The model's answer in the iteration after the checkpoint. */
  readonly modelAnswer: { readonly message: Message; readonly usage: Usage | undefined } | undefined;
  /** Calls of that iteration whose start is journaled, and those whose outcome is. */
  readonly toolStarts: ReadonlySet<string>;
  readonly toolOutcomes: ReadonlyMap<string, { readonly result: unknown; readonly isError: boolean }>;
  /** Middleware state as the last journaled outcome of that iteration that carries it left it. */
  readonly toolState: Checkpoint['state'] | undefined;
  /** Every request of the run, with its deadline; the answers the run took; the ids that expired. */
  readonly requests: ReadonlyMap<string, PendingRequest>;
  readonly answers: ReadonlyMap<string, AgentResponse>;
  readonly expired: ReadonlySet<string>;
  /**
   * Set when the iteration after the checkpoint has no journaled model answer but its model had
   * begun to stream (text, reasoning or tool input since its last `model-retry` or
   * `model-fallback`): `retries` counts the retries journaled in that iteration.
   */
  readonly partialStream: { readonly retries: number } | undefined;
  /** Keys of the events journaled since the checkpoint (see {@link eventKey}): a resumed run does not send them again. */
  readonly sentSinceCheckpoint: ReadonlySet<string>;
}

/**
 * The key of an event that a resumed iteration could send a second time (its start, a call, a
 * result, a request, an expiry); undefined for any other event.
 */
export function eventKey(event: AgentEvent): string | undefined {
  const e = event as { type: string; callId?: unknown; requestId?: unknown; iteration?: unknown };
  if (e.type === 'iteration-start') return `iteration-start|${String(e.iteration)}`;
  if (e.type === 'tool-call' || e.type === 'tool-result') return `${e.type}|${String(e.callId)}`;
  if (typeof e.requestId === 'string') return `${e.type}|${e.requestId}`;
  return undefined;
}

/** The requests still waiting at the journal's end: asked, neither answered nor expired. */
export function pendingRequests(point: ResumePoint): PendingRequest[] {
  const out: PendingRequest[] = [];
  for (const [requestId, request] of point.requests) {
    if (!point.answers.has(requestId) && !point.expired.has(requestId)) out.push(request);
  }
  return out;
}

/**
 * Reads a run's journal entries into a {@link ResumePoint}; throws a `JournalFormatError` for a
 * record this package cannot read (a newer format, not a record, a gap in the positions).
 */
export function readResumePoint(runId: string, entries: readonly JournalEntry[]): ResumePoint {
  let start: Extract<JournalRecord, { kind: 'start' }> | undefined;
  let turn: ResumePoint['turn'];
  let checkpoint: Checkpoint | undefined;
  let messages: Message[] = [];
  let replace = false;
  let turnStart: number | undefined;
  let modelAnswer: ResumePoint['modelAnswer'];
  let toolStarts = new Set<string>();
  let toolOutcomes = new Map<string, { result: unknown; isError: boolean }>();
  let toolState: Checkpoint['state'] | undefined;
  let sent = new Set<string>();
  let streamed = false;
  let retries = 0;
  const requests = new Map<string, PendingRequest>();
  const answers = new Map<string, AgentResponse>();
  const expired = new Set<string>();
  let seq = 0;
  let ended: ResumePoint['ended'];
  let suspended = false;
  let position = 0;
  for (const entry of entries) {
    if (!entry || entry.position !== position + 1) {
      throw new JournalFormatError(runId, position + 1, `entries out of order (got position ${String(entry?.position)})`);
    }
    position = entry.position;
    const record = checkRecord(runId, position, entry.record);
    if (position === 1 && record.kind !== 'start') throw new JournalFormatError(runId, 1, `the first record is '${record.kind}', not 'start'`);
    switch (record.kind) {
      case 'start':
        if (start) throw new JournalFormatError(runId, position, 'a second start record');
        if (record.state !== undefined && !isScopedState(record.state)) {
          throw new JournalFormatError(runId, position, "a start record whose 'state' is not { run, session } of stored values");
        }
        if (record.clientTools !== undefined && !isSpecList(record.clientTools)) {
          throw new JournalFormatError(runId, position, "a start record whose 'clientTools' is not a list of { name, description, parameters }");
        }
        start = record;
        break;
      case 'event': {
        const event = record.event;
        if (event.seq !== seq + 1) throw new JournalFormatError(runId, position, `event seq ${event.seq} follows seq ${seq}`);
        seq = event.seq;
        suspended = event.type === 'run-end' && event.reason === 'suspended';
        if (event.type === 'request-expired') expired.add(event.requestId);
        else if (expired.size > 0 && typeof (event as { requestId?: unknown }).requestId === 'string') {
          expired.delete((event as { requestId: string }).requestId); // asked again (its waiter had left): it waits
        }
        if (event.type === 'tool-input-start' || event.type === 'tool-input-delta') streamed = true;
        else if (event.type === 'model-retry' || event.type === 'model-fallback') {
          streamed = false;
          retries++;
        }
        const key = eventKey(event);
        if (key !== undefined) sent.add(key);
        break;
      }
      case 'deltas':
        if (record.seq !== seq + 1) throw new JournalFormatError(runId, position, `event seq ${record.seq} follows seq ${seq}`);
        seq += deltaCount(record);
        suspended = false;
        streamed = true;
        break;
      case 'turn':
        turn = { instructions: record.instructions, settings: record.settings, toolChoice: record.toolChoice, tools: record.tools };
        break;
      case 'model-answer':
        modelAnswer = { message: record.unparsed ? restoreMessages([record.message], record.unparsed)[0] : record.message, usage: record.usage };
        break;
      case 'tool-start':
        toolStarts.add(record.callId);
        break;
      case 'tool-outcome':
        toolOutcomes.set(record.callId, { result: record.result, isError: record.isError });
        if (record.state) toolState = record.state;
        break;
      case 'request':
        requests.set(
          record.requestId,
          record.deadline === undefined
            ? { requestId: record.requestId, type: record.type }
            : { requestId: record.requestId, type: record.type, deadline: record.deadline },
        );
        break;
      case 'answer':
        answers.set(record.requestId, record.response);
        break;
      case 'checkpoint':
        if (record.replace) {
          messages = [...restoreMessages(record.messages, record.unparsed)];
          replace = true;
          turnStart = record.turnStart;
        } else {
          messages = messages.concat(restoreMessages(record.messages, record.unparsed));
        }
        checkpoint = {
          iteration: record.iteration,
          messages,
          replace,
          turnStart,
          state: record.state,
          usage: record.usage,
          functionCalls: record.functionCalls,
          done: record.done,
        };
        // What follows belongs to the next iteration.
        modelAnswer = undefined;
        toolStarts = new Set();
        toolOutcomes = new Map();
        toolState = undefined;
        sent = new Set();
        streamed = false;
        retries = 0;
        break;
      case 'end':
        ended = record.reason;
        break;
    }
  }
  if (!start) throw new JournalFormatError(runId, 1, 'the journal has no start record');
  return {
    runId,
    sessionId: start.sessionId,
    input: start.input,
    onRequest: start.onRequest,
    context: stringMap(start.context),
    state: start.state,
    clientTools: start.clientTools,
    position,
    seq,
    ended,
    suspended,
    turn,
    checkpoint,
    modelAnswer,
    toolStarts,
    toolOutcomes,
    toolState,
    requests,
    answers,
    expired,
    partialStream: streamed && !modelAnswer ? { retries } : undefined,
    sentSinceCheckpoint: sent,
  };
}

/** The string entries of a start record's `context` (a store hands back whatever JSON it kept). */
function stringMap(value: unknown): Readonly<Record<string, string>> | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const entries = Object.entries(value as Record<string, unknown>).filter((entry): entry is [string, string] => typeof entry[1] === 'string');
  return entries.length > 0 ? Object.fromEntries(entries) : undefined;
}

/** State of both scopes as a record holds it: `{ run, session }`, each stored value `{ version, value }` by key. */
function isScopedState(value: unknown): value is Checkpoint['state'] {
  if (value === null || typeof value !== 'object') return false;
  const { run, session } = value as { run?: unknown; session?: unknown };
  return [run, session].every(
    (scope) =>
      scope !== null &&
      typeof scope === 'object' &&
      !Array.isArray(scope) &&
      Object.values(scope).every((stored: unknown) => stored !== null && typeof stored === 'object' && typeof (stored as StoredState).version === 'number'),
  );
}

/** Tool specs as a start record holds them: `{ name, description, parameters }`, the parameters a JSON Schema object. */
function isSpecList(value: unknown): value is readonly ToolSpec[] {
  return (
    Array.isArray(value) &&
    value.every((spec: unknown) => {
      if (spec === null || typeof spec !== 'object') return false;
      const { name, description, parameters } = spec as Partial<Record<keyof ToolSpec, unknown>>;
      return typeof name === 'string' && typeof description === 'string' && parameters !== null && typeof parameters === 'object';
    })
  );
}
