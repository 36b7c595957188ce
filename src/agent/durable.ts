import { Observable, concatMap, filter, map, takeWhile, throwError, type Subscription } from 'rxjs';
import type { AgentEvent, AgentResponse, ClientCall, PendingRequest, RunEndReason } from '../events/types';
import { JournalFormatError, RunFinishedError, RunNotFoundError, StoreRequiredError } from '../journal/errors';
import { checkRecord, recordEvents, type JournalEntry } from '../journal/records';
import { pendingRequests, readResumePoint, type ResumePoint } from '../journal/resumePoint';
import type { AgentStore, RunLease } from '../journal/store';
import { settle } from '../internal/settle';
import { show } from '../internal/show';
import { checkOptions, optionNames } from '../internal/optionNames';
import { toErrorInfo } from '../events/types';
import { zeroUsage } from '../middleware/loopState';
import type { CompiledAgent } from './compileAgent';
import { runAgent, type RunOptions } from './runAgent';

/**
 * Options of `agent.resume()`: where answers come from, a signal, and how to wait for them.
 *
 * @example
 * agent.resume(runId, { onRequest: 'wait', signal: controller.signal });
 */
export type ResumeOptions = Pick<RunOptions, 'responses' | 'signal' | 'onRequest'>;

/** The keys of {@link ResumeOptions}: any other is refused. */
const RESUME_OPTIONS = optionNames<ResumeOptions>({ responses: true, signal: true, onRequest: true });

/**
 * A journaled run as `agent.runs.get()` reports it.
 * - `status`: `running` (a process holds its lease), `suspended` (waits for answers), `interrupted`
 *   (its process stopped or died before its end: resume it), `finished`.
 * - `seq`: its last event's; `pendingRequests`: the requests it waits for; `lease`: who runs it.
 * - `reason`, once `finished`: how it ended; `clientCalls`: the calls of client tools it left to
 *   the client, as its `run-end` listed them (a UI that comes back after the end learns from it
 *   what it must still run).
 *
 * @example
 * const info = await agent.runs.get(runId);
 * if (info?.status === 'interrupted') agent.resume(runId).subscribe();
 * for (const { callId, name, args } of info?.clientCalls ?? []) results.push(await runInBrowser(callId, name, args));
 */
export interface RunInfo {
  readonly runId: string;
  readonly status: 'running' | 'suspended' | 'interrupted' | 'finished';
  readonly sessionId: string | undefined;
  readonly seq: number;
  readonly pendingRequests: readonly PendingRequest[];
  readonly lease: RunLease | undefined;
  /** How it ended, once `finished`. */
  readonly reason?: Exclude<RunEndReason, 'suspended'>;
  /**
   * Once `finished` (reason `completed`) on calls of client tools (`defineClientTool`): those
   * calls, as `run-end.clientCalls` listed them; their results are the next run's input. Absent
   * for any other run.
   */
  readonly clientCalls?: readonly ClientCall[];
}

function storeOf(agent: CompiledAgent, method: string): AgentStore {
  if (!agent.store) throw new StoreRequiredError(method);
  return agent.store;
}

function checkRunId(method: string, runId: unknown): asserts runId is string {
  if (typeof runId !== 'string' || runId === '') throw new TypeError(`${method}: a run id must be a non-empty string, got ${show(runId)}`);
}

/** Reads a run's journal into a resume point (undefined: no journal for it), with the entries read. */
function readPoint(
  store: AgentStore,
  runId: string,
  ok: (point: ResumePoint | undefined, entries: readonly JournalEntry[]) => void,
  fail: (error: unknown) => void,
): void {
  settle(
    () => store.read(runId, 0),
    (entries) => {
      let point: ResumePoint | undefined;
      try {
        point = entries ? readResumePoint(runId, entries) : undefined;
      } catch (error) {
        return fail(error);
      }
      ok(point, entries ?? []);
    },
    fail,
  );
}

/**
 * The client calls of a run that ended: those of the last `run-end` event its journal holds (the
 * `end` record keeps the reason only), undefined when it lists none. Throws a `JournalFormatError`
 * when that event's `clientCalls` is not a list of calls (a store hands back whatever JSON it kept).
 */
function endClientCalls(runId: string, entries: readonly JournalEntry[]): readonly ClientCall[] | undefined {
  for (let i = entries.length - 1; i >= 0; i--) {
    const { position, record } = entries[i];
    if (record.kind !== 'event' || record.event.type !== 'run-end') continue;
    const calls: unknown = record.event.clientCalls;
    if (calls === undefined) return undefined;
    if (!isCallList(calls)) {
      throw new JournalFormatError(runId, position, "a run-end event whose 'clientCalls' is not a list of { callId, name, args }");
    }
    return calls.length > 0 ? calls : undefined;
  }
  return undefined;
}

/** Client calls as a `run-end` event holds them: `{ callId, name, args }`, the id and name strings. */
function isCallList(value: unknown): value is readonly ClientCall[] {
  return (
    Array.isArray(value) &&
    value.every((call: unknown) => {
      if (call === null || typeof call !== 'object') return false;
      const { callId, name } = call as Partial<Record<keyof ClientCall, unknown>>;
      return typeof callId === 'string' && typeof name === 'string';
    })
  );
}

/** A resume refused before it started: `run-start` (resumed), `error`, `run-end` (none journaled). */
function refusedResume(subscriber: { next(e: AgentEvent): void; complete(): void }, runId: string, error: unknown): void {
  subscriber.next({ type: 'run-start', runId, resumed: true });
  subscriber.next({ type: 'error', runId, error: toErrorInfo(error), source: 'run' });
  subscriber.next({ type: 'run-end', runId, reason: 'error', text: '', usage: zeroUsage });
  subscriber.complete();
}

/** @internal `agent.resume(runId, options)`. */
export function resumeRun(agent: CompiledAgent, runId: string, options: ResumeOptions = {}): Observable<AgentEvent> {
  return new Observable<AgentEvent>((subscriber) => {
    let inner: Subscription | undefined;
    const refuse = (error: unknown) => {
      if (!subscriber.closed) refusedResume(subscriber, typeof runId === 'string' ? runId : '', error);
    };
    let store: AgentStore;
    try {
      store = storeOf(agent, 'resume');
      checkRunId('resume', runId);
      checkOptions('resume', options, RESUME_OPTIONS); // a resumed run keeps its id and session: no runId, no sessionId
    } catch (error) {
      return refuse(error);
    }
    readPoint(
      store,
      runId,
      (point) => {
        if (subscriber.closed) return;
        if (!point) return refuse(new RunNotFoundError(runId));
        if (point.ended) return refuse(new RunFinishedError(runId, point.ended));
        inner = runAgent(agent, [], options, { resume: point }).subscribe(subscriber);
      },
      refuse,
    );
    return () => inner?.unsubscribe();
  });
}

/** @internal `agent.respond(runId, response)`. */
export function respondTo(agent: CompiledAgent, runId: string, response: AgentResponse): Promise<boolean> {
  return new Promise<boolean>((resolve, reject) => {
    const store = storeOf(agent, 'respond');
    checkRunId('respond', runId);
    if (!response || typeof response !== 'object' || typeof response.requestId !== 'string' || typeof response.type !== 'string') {
      throw new TypeError(`respond: a response needs a string 'type' and 'requestId', got ${show(response)}`);
    }
    readPoint(
      store,
      runId,
      (point) => {
        if (!point) return reject(new RunNotFoundError(runId));
        if (point.ended) return resolve(false);
        const request = pendingRequests(point).find((r) => r.requestId === response.requestId);
        // An unknown or answered request, or one past its deadline (its safe default holds).
        if (!request || (request.deadline !== undefined && agent.scheduler.now() >= request.deadline)) return resolve(false);
        settle(() => store.putAnswer(runId, response), resolve, reject);
      },
      reject,
    );
  });
}

/** @internal `agent.cancel(runId)`. */
export function cancelRun(agent: CompiledAgent, runId: string): Promise<boolean> {
  return new Promise<boolean>((resolve, reject) => {
    const store = storeOf(agent, 'cancel');
    checkRunId('cancel', runId);
    readPoint(
      store,
      runId,
      (point) => {
        if (!point) return reject(new RunNotFoundError(runId));
        if (point.ended) return resolve(false);
        settle(
          () => store.requestCancel(runId),
          () =>
            settle(
              () => store.getLease(runId),
              (lease) => {
                // Running somewhere: that process hears the cancel and ends the run.
                if (lease) return resolve(true);
                // No lease: suspended or interrupted, or a live run that heard the cancel already
                // and ended (a store that tells at once): read the journal again to know which.
                readPoint(
                  store,
                  runId,
                  (now) => {
                    // Gone: it ended after the cancel was asked, and was dropped (no retention).
                    if (!now) return resolve(true);
                    if (now.ended) return resolve(now.ended === 'cancelled');
                    // Suspended or interrupted: resumed here, it finds the cancel at once and ends
                    // (its requests expired, the completed part of its turn saved to its session).
                    runAgent(agent, [], {}, { resume: now }).subscribe({
                      next: (event) => {
                        if (event.type === 'run-end') resolve(event.reason === 'cancelled' || event.reason === 'error' ? event.reason === 'cancelled' : true);
                      },
                      error: reject,
                    });
                  },
                  reject,
                );
              },
              reject,
            ),
          reject,
        );
      },
      reject,
    );
  });
}

/** @internal `agent.events(runId, { after })`. */
export function runEvents(agent: CompiledAgent, runId: string, options: { after?: number } = {}): Observable<AgentEvent> {
  let store: AgentStore;
  const after = options?.after ?? 0;
  try {
    store = storeOf(agent, 'events');
    checkRunId('events', runId);
    if (!Number.isInteger(after) || after < 0) throw new TypeError(`events: 'after' must be a seq (an integer >= 0), got ${show(after)}`);
  } catch (error) {
    return throwError(() => error);
  }
  return store.follow(runId, 0).pipe(
    map((entry) => checkRecord(runId, entry.position, entry.record)),
    // The journal's end, after the last run-end: nothing more will come (a reader that had that
    // run-end already, `after` its seq, ends here rather than wait for the journal's expiry).
    takeWhile((record) => record.kind !== 'end'),
    concatMap((record) => recordEvents(runId, record)),
    filter((event) => (event.seq as number) > after),
    takeWhile((event) => event.type !== 'run-end', true),
  );
}

/** @internal `agent.runs.get(runId)`. */
export function runInfo(agent: CompiledAgent, runId: string): Promise<RunInfo | undefined> {
  return new Promise<RunInfo | undefined>((resolve, reject) => {
    const store = storeOf(agent, 'runs.get');
    checkRunId('runs.get', runId);
    readPoint(
      store,
      runId,
      (point, entries) => {
        if (!point) return resolve(undefined);
        let clientCalls: readonly ClientCall[] | undefined;
        try {
          // Only a completed run leaves calls to the client (`run-end.clientCalls`).
          clientCalls = point.ended === 'completed' ? endClientCalls(runId, entries) : undefined;
        } catch (error) {
          return reject(error);
        }
        settle(
          () => store.getLease(runId),
          (lease) => {
            const status: RunInfo['status'] = point.ended ? 'finished' : lease ? 'running' : point.suspended ? 'suspended' : 'interrupted';
            const info: RunInfo = {
              runId,
              status,
              sessionId: point.sessionId,
              seq: point.seq,
              pendingRequests: point.ended ? [] : pendingRequests(point),
              lease,
            };
            if (!point.ended) return resolve(info);
            resolve(clientCalls === undefined ? { ...info, reason: point.ended } : { ...info, reason: point.ended, clientCalls });
          },
          reject,
        );
      },
      reject,
    );
  });
}
