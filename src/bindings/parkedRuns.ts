import { Observable } from 'rxjs';
import type { Agent, RunHandle } from '../agent/createAgent';
import type { RunOptions } from '../agent/runAgent';
import type { AgentEvent, AgentResponse } from '../events/types';
import type { RunInput } from '../messages/message';

/** @internal An answer to a request a parked run waits for. */
export interface ParkedAnswer {
  readonly requestId: string;
  readonly approved: boolean;
  /** The response's other fields (`reason`, `remember`, `extension`, a response of one's own). */
  readonly fields?: Readonly<Record<string, unknown>>;
}

/** A live run waiting for answers, and how many of its events were sent before it was parked. */
interface Parked {
  readonly handle: RunHandle;
  readonly sent: number;
  /** The request it waits for: id and type. */
  readonly requestId: string;
  readonly requestType: string;
}

/** @internal An answer that names no waiting request. */
export class UnknownInterruptError extends Error {
  constructor(readonly requestId: string) {
    super(`No run waits for an answer to '${requestId}' (unknown, answered, expired, or held by another process)`);
    this.name = 'UnknownInterruptError';
  }
}

/**
 * @internal
 * Runs that asked a question, kept alive in this process until they are answered. A run's stream
 * ends at its first request with a `run-end` of reason `suspended` listing the request (what a
 * durable run does), while the run itself goes on waiting; answers given to {@link resume} reach
 * it, and the rest of its events stream from where the first stream stopped.
 */
export class ParkedRuns {
  private readonly byRequest = new Map<string, Parked>();

  constructor(private readonly agent: Agent) {}

  /** A new run, streamed until it ends or asks. */
  start(input: RunInput, options: RunOptions): Observable<AgentEvent> {
    return this.follow(() => {
      const handle = this.agent.start(input, options);
      // The run forgets its question when it ends (a timeout may answer it while it is parked).
      handle.events$.subscribe({ complete: () => this.forget(handle) });
      return handle;
    }, 0);
  }

  /** Whether a run here waits for an answer to `requestId`. */
  has(requestId: string): boolean {
    return this.byRequest.has(requestId);
  }

  /**
   * Answers the requests `answers` name and streams the rest of their run. Throws
   * {@link UnknownInterruptError} for an answer no run here waits for, before answering any.
   */
  resume(answers: readonly ParkedAnswer[]): Observable<AgentEvent> {
    let parked: Parked | undefined;
    for (const answer of answers) {
      const found = this.byRequest.get(answer.requestId);
      if (!found || (parked && found !== parked)) throw new UnknownInterruptError(answer.requestId);
      parked = found;
    }
    if (!parked) throw new TypeError('resume: no entries');
    const run = parked;
    this.byRequest.delete(run.requestId);
    const type = run.requestType.replace(/-request$/, '-response');
    for (const { requestId, approved, fields } of answers) run.handle.respond({ ...fields, type, requestId, approved } as unknown as AgentResponse);
    return this.follow(() => run.handle, run.sent);
  }

  private follow(open: () => RunHandle, skip: number): Observable<AgentEvent> {
    return new Observable<AgentEvent>((subscriber) => {
      const handle = open();
      let index = 0;
      let parked = false;
      let ended = false;
      const subscription = handle.events$.subscribe({
        next: (event) => {
          if (index++ < skip || parked) return;
          subscriber.next(event);
          if (event.type === 'run-end') ended = true;
          else if (isRequest(event)) {
            parked = true;
            const requestId = (event as { requestId: string }).requestId;
            this.byRequest.set(requestId, { handle, sent: index, requestId, requestType: event.type });
            const suspended = {
              type: 'run-end',
              runId: event.runId,
              reason: 'suspended',
              text: '',
              usage: { inputTokens: 0, outputTokens: 0 },
              pendingRequests: [{ requestId, type: event.type }],
            };
            subscriber.next(suspended as unknown as AgentEvent);
            subscriber.complete();
          }
        },
        error: (error: unknown) => subscriber.error(error),
        complete: () => {
          if (!parked) subscriber.complete();
        },
      });
      return () => {
        subscription.unsubscribe();
        if (!parked && !ended) handle.cancel(); // the client went away from a run nobody else holds
      };
    });
  }

  private forget(handle: RunHandle): void {
    for (const [id, parked] of this.byRequest) if (parked.handle === handle) this.byRequest.delete(id);
  }
}

function isRequest(event: AgentEvent): boolean {
  return typeof (event as { requestId?: unknown }).requestId === 'string' && event.type.endsWith('-request');
}
