import { interval, type SchedulerLike, type Subscription } from 'rxjs';
import type { AgentEvent } from '../events/types';
import { settle } from '../internal/settle';
import { isPlainJson, PLAIN_SCAN_DEPTH, SENDABLE_DEPTH, sendable, sendableEvent } from '../internal/unsent';
import { keepShape } from '../internal/keepShape';
import { TextBuilder } from '../internal/textBuilder';
import { UnparsedArguments } from '../messages/unparsedArguments';
import { JournalConflictError, RunBusyError } from './errors';
import { FIRST_FORMAT_VERSION, JOURNAL_FORMAT_VERSION, type JournalRecord } from './records';
import type { AgentStore } from './store';
import { unencodable } from './unencodable';

/** A record as the runtime writes it: the format version is added here. */
export type NewRecord = JournalRecord extends infer R ? (R extends JournalRecord ? Omit<R, 'version'> : never) : never;

/**
 * @internal The journal of one run being run by this process: records are buffered and written
 * in batches (one append per `flush`, appends one after another with the expected position), and
 * the run's lease is held and renewed meanwhile. A write that fails stops every later one: the
 * run is told once (`onFailure`) and the journal keeps what was written before (the run is left
 * interrupted, to be resumed). A record JSON cannot hold (a state value holding a `BigInt`) is
 * refused before a store sees it (`record` answers the error, for the step that made it to fail
 * the run with): a resume would meet it again, so the run ends for good, its events and its `end`
 * record still written, nothing else.
 */
export class RunJournal {
  /** Records to write; the deltas being gathered stay open until the write. */
  private buffer: Array<JournalRecord | OpenDeltas> = [];
  private writing = false;
  private waiters: Array<{ ok: () => void; fail: (error: unknown) => void }> = [];
  private renewal: Subscription | undefined;
  /** The write due `flushMs` after a record came into an empty buffer (or the last such write). */
  private flushDue: Subscription | undefined;
  private released = false;
  /** Set once a write failed (or the lease was lost): nothing more is written. */
  failure: { readonly error: unknown } | undefined;
  /** Set once a record JSON cannot hold was refused: only events and the `end` record are written from then on. */
  refusal: { readonly error: TypeError } | undefined;
  /** The `end` record is buffered: a wait for it to be stored is not refused. */
  private ending = false;
  /** Told once of a failed write or a lost lease (not after a refused record: the run is failing with it). */
  onFailure: ((error: unknown) => void) | undefined;

  constructor(
    readonly store: AgentStore,
    readonly runId: string,
    /** This process's id for the lease. */
    readonly owner: string,
    private readonly leaseMs: number,
    private readonly scheduler: SchedulerLike,
    /** The journal's last position written, and the last event's seq. */
    public position: number,
    public seq: number,
    /** How long a record may wait in the buffer before it is written (`Infinity`: until the next write the run asks for). */
    private readonly flushMs = Infinity,
  ) {}

  /** Takes the run's lease (a `RunBusyError` when another process holds it), then keeps renewing it. */
  acquire(ok: () => void, fail: (error: unknown) => void): void {
    const { store, runId, owner, leaseMs } = this;
    settle(
      () => store.acquireLease(runId, owner, leaseMs),
      (claim) => {
        if (!claim.acquired) return fail(new RunBusyError(runId, claim.lease.owner, claim.lease.expiresAt));
        if (this.released) {
          // The run was left while the store answered: let the lease go at once.
          settle(
            () => store.releaseLease(runId, owner),
            () => undefined,
            () => undefined,
          );
          return;
        }
        const every = Math.max(1, Math.floor(leaseMs / 3));
        this.renewal = interval(every, this.scheduler).subscribe(() => this.renew());
        ok();
      },
      fail,
    );
  }

  private renew(): void {
    if (this.released || this.failure) return;
    settle(
      () => this.store.renewLease(this.runId, this.owner, this.leaseMs),
      (held) => {
        if (!held && !this.released) this.fail(new Error(`Run '${this.runId}' lost its lease (another process may be running it)`));
      },
      (error) => this.fail(error),
    );
  }

  /**
   * Buffers a record, or refuses one JSON cannot hold ({@link unencodable}) and answers why: the
   * step that made it fails the run with that error (a `start` record's refusal is `durable()`'s
   * failure: the run is refused before it starts, and nothing is written). After a refusal only
   * the `end` record is kept, and a wait for anything else to be stored fails.
   */
  record(record: NewRecord): TypeError | undefined {
    if (this.refusal !== undefined && record.kind !== 'end') return undefined;
    const full = { version: FIRST_FORMAT_VERSION, ...record } as JournalRecord;
    if (full.kind === 'end') this.ending = true;
    const error = unencodable(this.runId, full);
    if (error === undefined) {
      this.push(full);
      return undefined;
    }
    this.refusal = { error };
    // What waits for a write (a call's start) does not go on: the run is over.
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter.fail(error);
    return error;
  }

  /**
   * Gives `event` the run's next seq and buffers it. Consecutive text (or reasoning) deltas of an
   * iteration share one `deltas` record, their texts joined: no object and no serialisation per
   * delta (the events they stand for are unchanged).
   */
  event(event: AgentEvent): void {
    const seq = ++this.seq;
    (event as { seq?: number }).seq = seq;
    if (event.type === 'text-delta' || event.type === 'reasoning-delta') {
      const buffer = this.buffer;
      const open = buffer[buffer.length - 1];
      if (open instanceof OpenDeltas && open.type === event.type && open.iteration === event.iteration) {
        open.add(event.text);
        return;
      }
      const record = new OpenDeltas(event.type, event.iteration, seq);
      record.add(event.text);
      this.push(record);
      return;
    }
    if (event.type === 'tool-call' && event.args instanceof UnparsedArguments) {
      // Plain JSON in the journal: the model's text, and why it did not parse (a reader restores it).
      const plain = { ...event, args: event.args.text, seq };
      this.push({ version: FIRST_FORMAT_VERSION, kind: 'event', event: plain, unparsed: { [event.callId]: event.args.reason } });
      return;
    }
    // A store is handed JSON: what JSON cannot hold in an event is kept as the wire formats send it (the live consumer has the value itself).
    let kept: AgentEvent;
    try {
      kept = isPlainJson(event, PLAIN_SCAN_DEPTH) ? event : (sendableEvent(event) as AgentEvent);
    } catch {
      kept = sendable(event, SENDABLE_DEPTH) as AgentEvent; // a getter that throws: sendable replaces what it guards
    }
    this.push({ version: FIRST_FORMAT_VERSION, kind: 'event', event: kept as AgentEvent & { seq: number } });
  }

  /**
   * Buffers a record; the first one since the last timed write arms the next, `flushMs` later, so
   * that what streams between the writes the run asks for (an iteration's text, a tool's input)
   * reaches the store, and a follower in another process, while it streams. At most one timer is
   * pending: nothing per event.
   */
  private push(record: JournalRecord | OpenDeltas): void {
    this.buffer.push(record);
    if (this.flushDue === undefined && this.flushMs !== Infinity && !this.released && !this.failure) {
      this.flushDue = this.scheduler.schedule(() => {
        this.flushDue = undefined;
        this.flush();
      }, this.flushMs);
    }
  }

  /** Writes what is buffered. */
  flush(): void {
    if (this.writing || this.failure) return;
    const buffered = this.buffer;
    if (buffered.length === 0) return this.drained();
    this.buffer = [];
    const records = toWrite(buffered);
    this.writing = true;
    const expected = this.position;
    settle(
      () => this.store.append(this.runId, expected, records),
      (position) => {
        this.writing = false;
        if (position !== expected + records.length) {
          return this.fail(new JournalConflictError(this.runId, expected, typeof position === 'number' ? position - records.length : NaN));
        }
        this.position = position;
        this.flush();
      },
      (error) => {
        this.writing = false;
        this.fail(error);
      },
    );
  }

  /**
   * Writes what is buffered and continues once all of it is in the store (at once with a store that
   * answers at once). After a refused record, only the `end` record is waited for: anything else fails.
   */
  durable(ok: () => void, fail: (error: unknown) => void): void {
    if (this.failure) return fail(this.failure.error);
    if (this.refusal && !this.ending) return fail(this.refusal.error);
    this.waiters.push({ ok, fail });
    this.flush();
  }

  private drained(): void {
    const waiters = this.waiters;
    if (waiters.length === 0) return;
    this.waiters = [];
    for (const waiter of waiters) waiter.ok();
  }

  /**
   * The store failed the run otherwise than by a write (its notifications of answers or cancels
   * failed): as after a failed write, nothing more is written and the run is told once.
   */
  storeFailed(error: unknown): void {
    this.fail(error);
  }

  private fail(error: unknown): void {
    if (this.failure) return;
    this.failure = { error };
    this.buffer = [];
    this.flushDue?.unsubscribe();
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter.fail(error);
    if (!this.refusal) this.onFailure?.(error); // after a refusal, the run is failing already
  }

  /**
   * Stops renewing and lets the lease go once the writes in flight are done (whatever they did);
   * `done` is called once the store has answered the release (at once when it was let go before),
   * or after `leaseMs` when it does not answer: the lease has expired by then.
   */
  release(done?: () => void): void {
    if (this.released) return done?.();
    this.released = true;
    this.renewal?.unsubscribe();
    this.flushDue?.unsubscribe();
    let waiting = done;
    let expiry: Subscription | undefined;
    const finished = () => {
      const then = waiting;
      waiting = undefined;
      expiry?.unsubscribe();
      then?.();
    };
    const letGo = () =>
      settle(
        () => this.store.releaseLease(this.runId, this.owner),
        finished,
        finished, // the lease then expires by itself
      );
    if (this.writing) this.waiters.push({ ok: letGo, fail: letGo });
    else letGo();
    if (waiting) expiry = this.scheduler.schedule(finished, this.leaseMs);
  }
}

/**
 * The records of one append: open deltas closed, and a `model-answer` left out when a checkpoint
 * follows it in the same append. A reader drops the answer at the checkpoint anyway (what comes
 * after it belongs to the next iteration), and the append is all or nothing, so the journal reads
 * the same without it; a final answer's text is then written three times (its deltas, the
 * checkpoint's messages, `run-end`), not four.
 */
function toWrite(buffered: ReadonlyArray<JournalRecord | OpenDeltas>): JournalRecord[] {
  const records: JournalRecord[] = [];
  let checkpointAfter = false;
  for (let i = buffered.length - 1; i >= 0; i--) {
    const record = buffered[i];
    if (record instanceof OpenDeltas) records.push(record.close());
    else if (record.kind === 'model-answer' && checkpointAfter) continue;
    else {
      if (record.kind === 'checkpoint') checkpointAfter = true;
      records.push(record);
    }
  }
  return records.reverse();
}

let keptDeltas = false;

/**
 * The `deltas` record of one iteration while its deltas come: their texts gathered in flat chunks
 * ({@link TextBuilder}, so nothing holds one string per delta until the write) and each one's
 * length. Closed into the plain record when the journal writes it.
 */
class OpenDeltas {
  private readonly text = new TextBuilder();
  private readonly lengths: number[] = [];

  constructor(
    readonly type: 'text-delta' | 'reasoning-delta',
    readonly iteration: number,
    readonly seq: number,
  ) {
    if (!keptDeltas) {
      keptDeltas = true; // before: the kept one's own constructor comes here too
      keepShape(new OpenDeltas(type, 0, 0));
    }
  }

  add(text: string): void {
    this.text.append(text);
    this.lengths.push(text.length);
  }

  close(): JournalRecord {
    const { type, iteration, seq, lengths } = this;
    return { version: JOURNAL_FORMAT_VERSION, kind: 'deltas', type, iteration, seq, text: this.text.toString(), lengths };
  }
}
