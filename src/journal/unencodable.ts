import { errorMessage } from '../internal/errorMessage';
import { isArray } from '../internal/isArray';
import { jsonProblem } from '../internal/unsent';
import type { StoredState } from '../state/stateBag';
import { cannotHold, type JournalRecord } from './records';

/**
 * @internal The TypeError of a record the journal cannot hold, naming what in it JSON cannot hold
 * and what kind of value that is (`state 'total' holds a BigInt, which JSON cannot hold`); undefined
 * for a record JSON holds. The journal keeps such a record faithfully or not at all (a resume
 * reads it back as it was): no stand-in will do, and trying again meets the same value, so a run
 * that makes one ends for good. Events are not looked at (the journal keeps what JSON cannot hold
 * in one as a stand-in), nor a call's result (the run made it JSON).
 *
 * Each value is looked at with the wire formats' scan ({@link jsonProblem}: plain data is seen to be
 * JSON without writing it); where the value is and what it holds is looked for only in one that fails.
 *
 * @example
 * unencodable('r1', { version: 1, kind: 'checkpoint', …, state: { run: { total: { version: 1, value: 10n } }, session: {} } });
 * // TypeError: The journal of run 'r1' cannot hold its checkpoint record: state 'total' holds a BigInt, which JSON cannot hold (…)
 */
export function unencodable(runId: string, record: JournalRecord): TypeError | undefined {
  let why: string | undefined;
  try {
    why = recordProblem(record);
  } catch (error) {
    why = errorMessage(error); // a getter that throws (JSON.stringify would meet it too)
  }
  return why === undefined ? undefined : cannotHold(runId, record, why);
}

/** What in `record` JSON cannot hold, in words, else undefined. */
function recordProblem(record: JournalRecord): string | undefined {
  switch (record.kind) {
    case 'event':
    case 'deltas':
    case 'tool-start':
    case 'request':
    case 'end':
      return undefined; // stand-ins, or the run's own strings and numbers
  }
  const fields = record as unknown as Record<string, unknown>;
  for (const key of Object.keys(fields)) {
    if (key === 'result' && record.kind === 'tool-outcome') continue; // made JSON by the run (an error result saying so otherwise)
    const value = fields[key];
    let why: string | undefined;
    if (key === 'state') why = stateProblem(value as { run: Record<string, StoredState>; session: Record<string, StoredState> } | undefined);
    else if (key === 'messages' || key === 'input') why = messagesProblem(value as readonly unknown[]);
    else if (key === 'message') why = messagesProblem([value]);
    else {
      const problem = jsonProblem(value);
      if (problem !== undefined) why = held(`field '${key}'`, value, problem);
    }
    if (why !== undefined) return why;
  }
  return undefined;
}

/** The first state value of either scope JSON cannot hold, named by its key. */
function stateProblem(state: { run: Record<string, StoredState>; session: Record<string, StoredState> } | undefined): string | undefined {
  if (state === undefined) return undefined;
  for (const scope of [state.run, state.session]) {
    for (const key of Object.keys(scope)) {
      const value = scope[key].value;
      const problem = jsonProblem(value);
      if (problem !== undefined) return held(`state '${key}'`, value, problem);
    }
  }
  return undefined;
}

/** The first message JSON cannot hold, named by its call when one of its calls holds it. */
function messagesProblem(messages: readonly unknown[]): string | undefined {
  for (const message of messages) {
    const problem = jsonProblem(message);
    if (problem === undefined) continue;
    const content = (message as { content?: unknown }).content;
    if (isArray(content)) {
      for (const part of content) {
        const partProblem = jsonProblem(part);
        if (partProblem !== undefined) return held(partName(message, part), part, partProblem);
      }
    }
    return held(messageName(message), message, problem);
  }
  return undefined;
}

/** A message part in words: a call (its arguments) or its result by call id and tool, else its message. */
function partName(message: unknown, part: unknown): string {
  const { type, callId, name } = part as { type?: unknown; callId?: unknown; name?: unknown };
  if (type === 'tool-call') return `the call '${String(callId)}' of tool '${String(name)}'`;
  if (type === 'tool-result') return `the result of call '${String(callId)}' of tool '${String(name)}'`;
  return messageName(message);
}

/** `a user message`, `an assistant message`… */
function messageName(message: unknown): string {
  const role = String((message as { role?: unknown }).role);
  return `${/^[aeiou]/.test(role) ? 'an' : 'a'} ${role} message`;
}

/** `subject` holds what `value` holds, in words: `a BigInt`, `a cycle`, else JSON's own error. */
function held(subject: string, value: unknown, problem: unknown): string {
  let kind: string | undefined;
  try {
    kind = heldKind(value, []);
  } catch {
    kind = undefined; // a getter that throws: JSON's error says so
  }
  return kind === undefined ? `${subject} cannot be written as JSON: ${errorMessage(problem)}` : `${subject} holds ${kind}, which JSON cannot hold`;
}

/** How deep {@link heldKind} looks (a cycle is found where it closes, whatever the depth). */
const KIND_DEPTH = 64;

/**
 * What JSON cannot hold in `value`: `a BigInt` or `a cycle`, found in its own enumerable fields
 * (those JSON writes) with `path` the objects above; undefined when not found there (a `toJSON`
 * that throws, a boxed BigInt, deeper than {@link KIND_DEPTH}). Asked only of a value JSON failed on.
 */
function heldKind(value: unknown, path: object[]): string | undefined {
  if (typeof value === 'bigint') return typeof (BigInt.prototype as { toJSON?: unknown }).toJSON === 'function' ? undefined : 'a BigInt';
  if (typeof value !== 'object' || value === null) return undefined;
  if (path.includes(value)) return 'a cycle';
  if (path.length >= KIND_DEPTH || typeof (value as { toJSON?: unknown }).toJSON === 'function') return undefined;
  path.push(value);
  try {
    for (const key of Object.keys(value)) {
      const kind = heldKind((value as Record<string, unknown>)[key], path);
      if (kind !== undefined) return kind;
    }
    return undefined;
  } finally {
    path.pop();
  }
}
