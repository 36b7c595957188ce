import type { Message } from './message';

/**
 * An immutable, append-only list of messages that shares one backing array between versions,
 * so appending is O(appended) and a loop of many iterations never copies its whole history.
 * A version whose end is behind the backing array's end copies on its next append (a branch).
 *
 * @example
 * const a = MessageLog.of([m1]); const b = a.append(m2); // a still has 1 message, b has 2
 */
export class MessageLog {
  static readonly empty = new MessageLog(Object.freeze([]) as unknown as Message[], 0);
  private snapshot: readonly Message[] | undefined;

  private constructor(
    private readonly backing: Message[],
    readonly length: number,
  ) {}

  static of(messages: readonly Message[]): MessageLog {
    return messages.length === 0 ? MessageLog.empty : new MessageLog(messages.slice(), messages.length);
  }

  append(...messages: readonly Message[]): MessageLog {
    return this.appendAll(messages);
  }

  /** {@link append} for messages already in an array. */
  appendAll(messages: readonly Message[]): MessageLog {
    if (messages.length === 0) return this;
    if (this.length === this.backing.length && this !== MessageLog.empty) {
      for (const m of messages) this.backing.push(m);
      return new MessageLog(this.backing, this.length + messages.length);
    }
    // A branch (or the first version): an array of the exact size, which later appends grow.
    const length = this.length + messages.length;
    const copy = new Array<Message>(length);
    for (let i = 0; i < this.length; i++) copy[i] = this.backing[i];
    for (let i = 0; i < messages.length; i++) copy[this.length + i] = messages[i];
    return new MessageLog(copy, length);
  }

  at(index: number): Message | undefined {
    const i = index < 0 ? this.length + index : index;
    return i >= 0 && i < this.length ? this.backing[i] : undefined;
  }

  /** The messages from `start` on, as a new array. */
  since(start: number): Message[] {
    return this.backing.slice(start, this.length);
  }

  /** The messages as a frozen array, built once per version (and only when asked for). */
  toArray(): readonly Message[] {
    return (this.snapshot ??= Object.freeze(this.backing.slice(0, this.length)));
  }

  /**
   * The messages without a copy, for a model call: the backing array itself while this version
   * is the newest one (the run appends to it only after the call), else {@link toArray}'s
   * snapshot. Copying the history for every call made a loop quadratic in its length.
   */
  view(): readonly Message[] {
    return this.length === this.backing.length ? this.backing : this.toArray();
  }
}
