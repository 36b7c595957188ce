import type { Subscriber } from 'rxjs';
import { toErrorInfo, type AgentEvent, type EventOf } from '../events/types';
import { eventKey } from './resumePoint';
import type { RunJournal } from './runJournal';

/**
 * @internal The events of a journaled run on their way to its subscriber: each gets its `seq` and
 * is buffered in the journal; `run-end` is delivered only once the journal holds it (with the
 * `end` record), so a run that ended is one whose end is stored; a suspension's, once the lease is
 * let go too, so that the run is free to resume when its subscriber hears of it. Until the journal
 * is opened (lease and start record), events pass through unjournaled: a run refused there
 * (`RunBusyError`) still ends with `run-end`, without touching the journal of the run that holds
 * the lease.
 */
export class JournalSink {
  /** The journal is open: events are journaled. */
  active = false;
  private ending = false;
  private endDelivered = false;
  private completeAsked = false;

  constructor(
    private readonly out: Subscriber<AgentEvent>,
    private readonly journal: RunJournal,
    /** Keys of events a resumed iteration sent already (see eventKey): not sent again. */
    private readonly skip: Set<string> | undefined,
  ) {}

  get closed(): boolean {
    return this.out.closed;
  }

  next(event: AgentEvent): void {
    if (!this.active) return this.out.next(event);
    // After run-end nothing is journaled or sent: a step that goes on as the run fails under it (a
    // refused checkpoint fails the run from inside the iteration that made it, before its `iteration-end`).
    if (this.ending) return;
    const skip = this.skip;
    if (skip !== undefined && skip.size > 0) {
      const key = eventKey(event);
      if (key !== undefined && skip.delete(key)) return;
    }
    if (this.journal.failure) {
      // Nothing more is written; the live stream goes on numbering its events.
      (event as { seq?: number }).seq = ++this.journal.seq;
    } else {
      this.journal.event(event);
    }
    if (event.type === 'run-end') return this.end(event);
    this.out.next(event);
  }

  private end(event: EventOf<'run-end'>): void {
    const journal = this.journal;
    if (event.reason !== 'suspended') journal.record({ kind: 'end', reason: event.reason });
    this.ending = true;
    const failedBefore = journal.failure !== undefined;
    journal.durable(
      () => this.deliverEnd(event),
      (error) => {
        if (failedBefore) return this.deliverEnd(event); // reported already, as the run's error
        const runId = event.runId;
        this.out.next({ type: 'error', runId, error: toErrorInfo(error), source: 'run', seq: ++journal.seq });
        this.deliverEnd({ ...event, reason: 'error', seq: ++journal.seq });
      },
    );
  }

  private deliverEnd(event: EventOf<'run-end'>): void {
    // A suspended run's end waits for its lease to go: whoever reacts to it (a resume, runs.get)
    // finds the run free. Any other end is final in the journal whatever the lease says.
    if (event.reason === 'suspended') return this.journal.release(() => this.deliver(event));
    this.journal.release();
    this.deliver(event);
  }

  private deliver(event: AgentEvent): void {
    this.endDelivered = true;
    this.out.next(event);
    if (this.completeAsked) this.out.complete();
  }

  complete(): void {
    if (this.ending && !this.endDelivered) {
      this.completeAsked = true;
      return;
    }
    this.out.complete();
  }

  error(error: unknown): void {
    this.out.error(error);
  }
}
