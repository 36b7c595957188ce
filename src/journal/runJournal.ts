import { interval, type SchedulerLike, type Subscription } from 'rxjs';
import type { AgentEvent } from '../events/types';
import { settle } from '../internal/settle';
import { isPlainJson, PLAIN_SCAN_DEPTH, SENDABLE_DEPTH, sendable, sendableEvent } from '../internal/unsent';
import { UnparsedArguments } from '../messages/unparsedArguments';
import { JournalConflictError, RunBusyError } from './errors';
import { JOURNAL_FORMAT_VERSION, type JournalRecord } from './records';
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
  private buffer: JournalRecord[] = [];
  /** The deltas record being filled, while it is the buffer's last. */
  private deltas: (JournalRecord & { readonly kind: 'deltas'; readonly texts: string[] }) | undefined;
  private writing = false;
  private waiters: Array<{ ok: () => void; fail: (error: unknown) => void }> = [];
  private renewal: Subscription | undefined;
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
    const full = { version: JOURNAL_FORMAT_VERSION, ...record } as JournalRecord;
    if (full.kind === 'end') this.ending = true;
    const error = unencodable(this.runId, full);
    if (error === undefined) {
      this.buffer.push(full);
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
   * iteration share one `deltas` record: one object and one serialisation for the lot, not one
   * per delta (the events they stand for are unchanged).
   */
  event(event: AgentEvent): void {
    const seq = ++this.seq;
    (event as { seq?: number }).seq = seq;
    if (event.type === 'text-delta' || event.type === 'reasoning-delta') {
      const open = this.deltas;
      const buffer = this.buffer;
      if (open !== undefined && buffer[buffer.length - 1] === (open as JournalRecord) && open.type === event.type && open.iteration === event.iteration) {
        open.texts.push(event.text);
        return;
      }
      const record = { version: JOURNAL_FORMAT_VERSION, kind: 'deltas' as const, type: event.type, iteration: event.iteration, seq, texts: [event.text] };
      this.deltas = record;
      buffer.push(record);
      return;
    }
    if (event.type === 'tool-call' && event.args instanceof UnparsedArguments) {
      // Plain JSON in the journal: the model's text, and why it did not parse (a reader restores it).
      const plain = { ...event, args: event.args.text, seq };
      this.buffer.push({ version: JOURNAL_FORMAT_VERSION, kind: 'event', event: plain, unparsed: { [event.callId]: event.args.reason } });
      return;
    }
    // A store is handed JSON: what JSON cannot hold in an event is kept as the wire formats send it (the live consumer has the value itself).
    let kept: AgentEvent;
    try {
      kept = isPlainJson(event, PLAIN_SCAN_DEPTH) ? event : (sendableEvent(event) as AgentEvent);
    } catch {
      kept = sendable(event, SENDABLE_DEPTH) as AgentEvent; // a getter that throws: sendable replaces what it guards
    }
    this.buffer.push({ version: JOURNAL_FORMAT_VERSION, kind: 'event', event: kept as AgentEvent & { seq: number } });
  }

  /** Writes what is buffered. */
  flush(): void {
    if (this.writing || this.failure) return;
    const records = this.buffer;
    if (records.length === 0) return this.drained();
    this.buffer = [];
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
