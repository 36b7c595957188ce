import { z } from 'zod';
import { MessageSchema, withIds, type ContentPart, type Message, type ToolCallPart } from '../messages/message';
import { UnparsedArguments } from '../messages/unparsedArguments';
import type { StoredState } from '../state/stateBag';
import { zodIssues } from '../internal/zodIssues';

/**
 * A session as plain JSON: history and session-scoped middleware state.
 *
 * @example
 * const snapshot: SessionSnapshot = session.snapshot(); // { version: 1, id, messages, state }
 */
export interface SessionSnapshot {
  /** The snapshot format's version. */
  readonly version: 1;
  readonly id: string;
  readonly messages: readonly Message[];
  readonly state: Readonly<Record<string, StoredState>>;
}

// `value` may be missing: JSON drops a state whose value is `undefined`.
const StoredStateSchema = z.object({ version: z.number().int().positive(), value: z.unknown().optional() });

/** zod schema of a {@link SessionSnapshot}. */
export const SessionSnapshotSchema = z.object({
  version: z.literal(1),
  id: z.string().min(1),
  messages: z.array(MessageSchema),
  state: z.record(z.string(), StoredStateSchema),
});

/** zod schema of a session turn's state entries. */
export const StoredStatesSchema = z.record(z.string(), StoredStateSchema);

/**
 * Checks a snapshot with zod; messages without an id (a snapshot of an earlier version) get one.
 *
 * @example
 * const snapshot = parseSnapshot(JSON.parse(text));
 */
export function parseSnapshot(value: unknown, what = 'session snapshot'): SessionSnapshot {
  const parsed = SessionSnapshotSchema.safeParse(value);
  if (!parsed.success) {
    throw new TypeError(`Invalid ${what}: ${zodIssues(parsed.error)}`);
  }
  keepProtoKey((value as { state: object }).state, parsed.data.state, what);
  const snapshot = parsed.data as SessionSnapshot;
  const messages = withIds(snapshot.messages);
  return messages === snapshot.messages ? snapshot : { ...snapshot, messages };
}

/** zod's record leaves out an own key named `__proto__` (JSON.parse makes one): put it back, checked. */
export function keepProtoKey(raw: object, parsed: Record<string, unknown>, what: string): void {
  const own = Object.getOwnPropertyDescriptor(raw, '__proto__');
  if (!own) return;
  const entry = StoredStateSchema.safeParse(own.value);
  if (!entry.success) throw new TypeError(`Invalid ${what}: ${zodIssues(entry.error)} (state '__proto__')`);
  Object.defineProperty(parsed, '__proto__', { value: entry.data, enumerable: true, writable: true, configurable: true });
}

/**
 * The messages with a tool call's arguments that were not JSON (an {@link UnparsedArguments}) as
 * the model's text, what a JSON round trip makes of them: a snapshot is plain data, also for a
 * store that keeps objects without serialising them (structured clone drops the class). Changes
 * `messages` in place and answers it.
 */
export function plainMessages(messages: Message[]): Message[] {
  for (let i = 0; i < messages.length; i++) {
    const { content } = messages[i];
    if (content.some(isUnparsedCall)) {
      messages[i] = { ...messages[i], content: content.map((part) => (isUnparsedCall(part) ? { ...part, args: part.args.text } : part)) };
    }
  }
  return messages;
}

function isUnparsedCall(part: ContentPart): part is ToolCallPart & { args: UnparsedArguments } {
  return part.type === 'tool-call' && part.args instanceof UnparsedArguments;
}
