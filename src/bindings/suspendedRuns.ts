import { Observable, type SchedulerLike } from 'rxjs';
import type { Agent } from '../agent/createAgent';
import { memoryStore } from '../journal/memoryStore';
import type { RunOptions } from '../agent/runAgent';
import type { AgentEvent, AgentResponse } from '../events/types';
import type { RunInput } from '../messages/message';

/** @internal An answer a UI gives to a question a suspended run asked. */
export interface UiAnswer {
  /** The id the UI was given for the question: see {@link questionId}. */
  readonly id: string;
  readonly approved: boolean;
  /** The response's other fields (`reason`, `remember`, `extension`, a response of one's own). */
  readonly fields?: Readonly<Record<string, unknown>>;
}

/** @internal An answer that names no question a run waits for. */
export class UnknownInterruptError extends Error {
  constructor(readonly id: string) {
    super(`No run waits for an answer to '${id}' (unknown, answered, expired, or the run is running elsewhere)`);
    this.name = 'UnknownInterruptError';
  }
}

/**
 * @internal The id a UI is given for a question: the run's id (URI-encoded, so that it holds no
 * `:`) and the request's, `<runId>:<requestId>`. The answer names the run with it, so that any
 * server sharing the store can answer and resume it.
 */
export function questionId(runId: string, requestId: string): string {
  return `${encodeURIComponent(runId)}:${requestId}`;
}

/** The run and request a {@link questionId} names; undefined for an id no handler gave. */
function parseQuestionId(id: string): { runId: string; requestId: string } | undefined {
  const colon = id.indexOf(':');
  if (colon <= 0 || colon === id.length - 1) return undefined;
  try {
    return { runId: decodeURIComponent(id.slice(0, colon)), requestId: id.slice(colon + 1) };
  } catch {
    return undefined; // not an encoding this module wrote
  }
}

/**
 * Per agent over a store of our own: its runs suspended here, by id, and when their last question
 * expires; and the agent's scheduler, whose clock the deadlines are written in.
 */
const ownStores = new WeakMap<Agent, { readonly expiring: Map<string, number>; readonly scheduler: SchedulerLike | undefined }>();

/**
 * @internal
 * The runs a UI transport starts and resumes. A run is started with `onRequest: 'suspend'`: at
 * its first question it is journaled and its stream ends with `run-end` reason `suspended`. The
 * answers come back as a new request, maybe to another server: {@link resume} journals them with
 * `agent.respond()` and continues the run with `agent.resume()`. An agent without a store runs
 * over a `memoryStore()` of its own (one process); there, a suspended run whose questions all
 * expired unanswered is cancelled at the next request (no timer), so that it leaves the memory.
 *
 * A client that goes away from a run's stream cancels the run (reason `cancelled`), whose end is
 * then journaled as usual.
 */
export class SuspendedRuns {
  readonly agent: Agent;
  /** With a store of our own: the runs suspended in it, by id, and when their last question expires. */
  private readonly expiring: Map<string, number> | undefined;
  /** The agent's scheduler, when its store is ours: its clock is the one deadlines are written in. */
  private readonly scheduler: SchedulerLike | undefined;

  constructor(agent: Agent) {
    let scheduler: SchedulerLike | undefined;
    const ownStore = (agentScheduler: SchedulerLike) => {
      scheduler = agentScheduler; // the clock the agent writes deadlines in
      return memoryStore({ scheduler: agentScheduler });
    };
    this.agent = agent.withOwnStore ? agent.withOwnStore(ownStore) : agent;
    if (this.agent !== agent) {
      let own = ownStores.get(this.agent);
      if (!own) ownStores.set(this.agent, (own = { expiring: new Map<string, number>(), scheduler }));
      this.expiring = own.expiring;
      this.scheduler = own.scheduler;
    }
  }

  /** A new run, streamed until it ends or suspends. */
  start(input: RunInput, options: RunOptions): Observable<AgentEvent> {
    this.sweep();
    return this.follow(cancelOnLeave(options.signal, (signal) => this.agent.run(input, { ...options, signal, onRequest: 'suspend' })));
  }

  /**
   * Answers the questions `answers` name (all of one run) and streams the rest of their run.
   * Rejects with {@link UnknownInterruptError} when an answer names no question its run waits
   * for, before answering any, or when none was taken (answered already). With `onlyWaiting`,
   * answers that name no question the run waits for (a UI that sends back every answer it holds,
   * those taken already too) are left out: it rejects only when none is left. An answer past its
   * request's deadline is not taken, but the run goes on: the request takes its safe default.
   */
  async resume(answers: readonly UiAnswer[], options: { readonly onlyWaiting?: boolean } = {}): Promise<Observable<AgentEvent>> {
    if (answers.length === 0) throw new TypeError('resume: no answers');
    let runId: string | undefined;
    const named: { requestId: string; answer: UiAnswer }[] = [];
    for (const answer of answers) {
      const parsed = parseQuestionId(answer.id);
      if (!parsed || (runId !== undefined && parsed.runId !== runId)) throw new UnknownInterruptError(answer.id);
      runId = parsed.runId;
      named.push({ requestId: parsed.requestId, answer });
    }
    const id = runId as string;
    this.sweep(id); // not the run answered now, late or not: the resume decides
    const info = await this.agent.runs.get(id);
    const waiting = info && (info.status === 'suspended' || info.status === 'interrupted') ? info.pendingRequests : [];
    const responses: AgentResponse[] = [];
    let expired = false;
    for (const { requestId, answer } of named) {
      const request = waiting.find((r) => r.requestId === requestId);
      if (!request && options.onlyWaiting) continue;
      if (!request) throw new UnknownInterruptError(answer.id);
      if (request.deadline !== undefined && this.now() >= request.deadline) expired = true;
      const type = request.type.replace(/-request$/, '-response');
      responses.push({ ...answer.fields, type, requestId, approved: answer.approved } as unknown as AgentResponse);
    }
    if (responses.length === 0) throw new UnknownInterruptError(answers[0].id);
    let accepted = false;
    for (const response of responses) if (await this.agent.respond(id, response)) accepted = true;
    // Too late for an answer: the run goes on with the request's safe default (a refusal) instead.
    if (!accepted && !expired) throw new UnknownInterruptError(answers[0].id);
    this.expiring?.delete(id);
    return this.follow(cancelOnLeave(undefined, (signal) => this.agent.resume(id, { signal, onRequest: 'suspend' })));
  }

  /** Notes, with a store of our own, when a run that suspends can be let go of. */
  private follow(events$: Observable<AgentEvent>): Observable<AgentEvent> {
    const expiring = this.expiring;
    if (!expiring) return events$;
    return new Observable<AgentEvent>((subscriber) =>
      events$.subscribe({
        next: (event) => {
          if (event.type === 'run-end' && event.reason === 'suspended') {
            const deadlines = (event.pendingRequests ?? []).map((r) => r.deadline);
            // A question without a deadline waits for as long as it takes.
            if (deadlines.length > 0 && deadlines.every((d) => d !== undefined)) expiring.set(event.runId, Math.max(...deadlines));
          }
          subscriber.next(event);
        },
        error: (error: unknown) => subscriber.error(error),
        complete: () => subscriber.complete(),
      }),
    );
  }

  /** The time deadlines are written in: the agent's scheduler's (`Date.now()` for an agent with a store of its own, whose scheduler it does not say). */
  private now(): number {
    return this.scheduler ? this.scheduler.now() : Date.now();
  }

  /** Cancels the runs suspended here whose questions all expired unanswered (but `answered`). */
  private sweep(answered?: string): void {
    const expiring = this.expiring;
    if (!expiring || expiring.size === 0) return;
    const now = this.now();
    for (const [runId, deadline] of expiring) {
      if (now < deadline || runId === answered) continue;
      expiring.delete(runId);
      this.agent.cancel(runId).catch(() => undefined); // answered and resumed meanwhile: nothing to do
    }
  }
}

/**
 * The run `open` makes with a signal of its own: a subscriber that leaves before `run-end`
 * aborts it (the run ends `cancelled`, journaled, while nobody listens any more). `given`, a
 * signal of the caller's, aborts it too.
 */
function cancelOnLeave(given: AbortSignal | undefined, open: (signal: AbortSignal) => Observable<AgentEvent>): Observable<AgentEvent> {
  return new Observable<AgentEvent>((subscriber) => {
    const controller = new AbortController();
    const abort = () => controller.abort();
    if (given?.aborted) controller.abort();
    else given?.addEventListener('abort', abort, { once: true });
    let ended = false;
    let left = false;
    open(controller.signal).subscribe({
      next: (event) => {
        if (event.type === 'run-end') ended = true;
        if (!left) subscriber.next(event);
      },
      error: (error: unknown) => {
        given?.removeEventListener('abort', abort);
        if (!left) subscriber.error(error);
      },
      complete: () => {
        given?.removeEventListener('abort', abort);
        if (!left) subscriber.complete();
      },
    });
    return () => {
      left = true;
      if (!ended) controller.abort();
    };
  });
}
