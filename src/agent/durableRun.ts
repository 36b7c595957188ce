import type { Subscriber } from 'rxjs';
import type { AgentEvent, AgentResponse, EventOf, PendingRequest } from '../events/types';
import type { Message } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import type { LoopState } from '../middleware/loopState';
import type { RequestJournal } from '../middleware/runScope';
import type { Usage } from '../model/types';
import type { Tool } from '../tools/defineTool';
import { StateBag } from '../state/stateBag';
import { JournalSink } from '../journal/journalSink';
import type { ResumePoint } from '../journal/resumePoint';
import { plainMessages } from '../journal/records';
import { RunJournal, type NewRecord } from '../journal/runJournal';
import type { AgentStore } from '../journal/store';
import type { CompiledAgent } from './compileAgent';
import { uniqueId } from '../internal/uniqueId';

/** What the model reads for a call whose process died while it ran (and that is not idempotent). */
export function interruptedText(toolName: string): string {
  return `Tool '${toolName}' was interrupted; its outcome is unknown.`;
}

/** The error of the `model-retry` that discards a model answer its process was streaming when it stopped. */
export const interruptedStreamText = 'The run stopped while the model was answering; the partial answer is discarded and the model is asked again';

/** How a resumed iteration treats a call the journal knows. */
export type ReplayedCall = { readonly result: unknown; readonly isError: boolean; readonly replayed: boolean };

/**
 * @internal The journal side of one run: its writer and event sink, the requests it asked (ids
 * stable across a resume, absolute deadlines), the checkpoints at iteration boundaries, and, for a
 * resumed run, what the interrupted iteration did already.
 */
export class DurableRun implements RequestJournal {
  readonly journal: RunJournal;
  readonly sink: JournalSink;
  /** The interrupted iteration's journal, until that iteration ends. */
  private replay: ResumePoint | undefined;
  private readonly replayIteration: number;
  private readonly counts = new Map<string, number>();
  private readonly requests = new Map<string, PendingRequest>();
  private readonly answers = new Set<string>();
  /** Requests of the journal still waiting, not asked again yet by this process (a cancel expires them). */
  readonly unasked: Set<string>;
  /** The messages as of the last checkpoint: the next one journals only what was added. */
  private checkpointLog: MessageLog | undefined;
  private checkpointTurnStart = 0;
  /** The state as last journaled (a checkpoint, or an outcome that carried it): an outcome journals the state only when it differs. */
  private journaledState: StateBag | undefined;
  private streamDiscarded = false;
  /** Suspends the run (set by the run when it suspends on requests). */
  onSuspend: (() => void) | undefined;

  constructor(
    readonly store: AgentStore,
    private readonly agent: CompiledAgent,
    readonly runId: string,
    readonly mode: 'wait' | 'suspend',
    out: Subscriber<AgentEvent>,
    readonly point: ResumePoint | undefined,
  ) {
    // A lease holder per run, not per agent: the same agent resuming a run it is running is refused too.
    const { owner, leaseMs, scheduler, journalFlushMs } = agent;
    this.journal = new RunJournal(store, runId, uniqueId(owner), leaseMs, scheduler, point?.position ?? 0, point?.seq ?? 0, journalFlushMs);
    this.sink = new JournalSink(out, this.journal, point ? new Set(point.sentSinceCheckpoint) : undefined);
    this.replay = point;
    this.replayIteration = point?.checkpoint?.iteration ?? 0;
    this.unasked = new Set();
    if (point) {
      for (const [id, request] of point.requests) this.requests.set(id, request);
      for (const id of point.answers.keys()) this.answers.add(id);
      for (const [id] of point.requests) if (!point.answers.has(id) && !point.expired.has(id)) this.unasked.add(id);
    }
  }

  requestId(where: number | 'turn' | 'end', callId: string | undefined, type: string): string {
    const base = `${this.runId}.${where}.${callId ?? '-'}.${type}`;
    const n = (this.counts.get(base) ?? 0) + 1;
    this.counts.set(base, n);
    return n === 1 ? base : `${base}.${n}`;
  }

  opened(requestId: string, type: string, timeout: number | undefined): number | undefined {
    this.unasked.delete(requestId);
    const now = this.agent.scheduler.now();
    const known = this.requests.get(requestId);
    if (known) return known.deadline === undefined ? timeout : Math.max(0, known.deadline - now);
    const deadline = timeout === undefined || timeout === Infinity ? undefined : now + timeout;
    const request: PendingRequest = deadline === undefined ? { requestId, type } : { requestId, type, deadline };
    this.requests.set(requestId, request);
    this.journal.record(deadline === undefined ? { kind: 'request', requestId, type } : { kind: 'request', requestId, type, deadline });
    return timeout;
  }

  answered(requestId: string, response: AgentResponse): void {
    if (this.answers.has(requestId)) return;
    this.answers.add(requestId);
    // Taken as the answer is given (not in a step of the run): a refused one fails the run as a failed write does, but for good.
    const refused = this.journal.record({ kind: 'answer', requestId, response });
    if (refused) this.journal.onFailure?.(refused);
  }

  waiting(): void {
    if (this.mode === 'suspend' && this.onSuspend) return this.onSuspend();
    // Stored now, so that another process sees the request and may answer it.
    this.journal.flush();
  }

  expired(): void {
    this.journal.flush();
  }

  /** The requests among `open` (ids), as the journal knows them. */
  pending(open: readonly string[]): PendingRequest[] {
    return open.map((requestId) => this.requests.get(requestId) ?? { requestId, type: 'request' });
  }

  /** A resumed run's journaled answer of `iteration`, used instead of calling the model again. */
  replayedAnswer(iteration: number): { readonly message: Message; readonly usage: Usage | undefined } | undefined {
    return this.replay && iteration === this.replayIteration ? this.replay.modelAnswer : undefined;
  }

  /**
   * The `model-retry` event a resumed run sends before it asks the model again in the iteration
   * whose stream its process was streaming when it stopped: that attempt's partial text is
   * discarded, as after a failed attempt (once; undefined for any other iteration).
   */
  discardedStream(iteration: number): EventOf<'model-retry'> | undefined {
    const partial = this.replay?.partialStream;
    if (!partial || iteration !== this.replayIteration || this.streamDiscarded) return undefined;
    this.streamDiscarded = true;
    return {
      type: 'model-retry',
      runId: this.runId,
      iteration,
      attempt: partial.retries + 1,
      error: { name: 'RunInterruptedError', message: interruptedStreamText },
      delayMs: 0,
    };
  }

  modelAnswered(iteration: number, answer: Message | undefined, usage: Usage | undefined): void {
    if (!answer) return;
    const plain = plainMessages([answer]);
    const message = plain.messages[0];
    const unparsed = plain.unparsed === undefined ? {} : { unparsed: plain.unparsed };
    this.keep(
      usage
        ? { kind: 'model-answer', iteration, message, usage: { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens }, ...unparsed }
        : { kind: 'model-answer', iteration, message, ...unparsed },
    );
  }

  /** The journaled outcome of a call of the interrupted iteration: used as it is, not run (nor passed to afterFunction) again. */
  replayedOutcome(iteration: number, callId: string): ReplayedCall | undefined {
    const replay = this.replay;
    if (!replay || iteration !== this.replayIteration) return undefined;
    const outcome = replay.toolOutcomes.get(callId);
    return outcome && { result: outcome.result, isError: outcome.isError, replayed: true };
  }

  /**
   * A call of the interrupted iteration whose start is journaled but not its outcome: the
   * interrupted result when its tool is not idempotent, else undefined (run it again).
   */
  interruptedCall(iteration: number, callId: string, tool: Tool): ReplayedCall | undefined {
    const replay = this.replay;
    if (!replay || iteration !== this.replayIteration || !replay.toolStarts.has(callId) || tool.idempotent) return undefined;
    return { result: interruptedText(tool.name), isError: true, replayed: false };
  }

  /**
   * The middleware state as the interrupted iteration's last journaled outcome left it (its
   * afterFunction hooks and every earlier hook of the batch included), or undefined when the
   * journal holds none: a resumed batch goes on from it.
   */
  replayedState(iteration: number): StateBag | undefined {
    const replay = this.replay;
    if (!replay || iteration !== this.replayIteration || !replay.toolState) return undefined;
    const state = StateBag.fromScopes(replay.toolState.session, replay.toolState.run);
    this.journaledState = state;
    return state;
  }

  /** Journals a call's start and continues once that is stored: a call runs only if a resume can know it did. */
  toolStart(iteration: number, callId: string, name: string, go: () => void): void {
    this.journal.record({ kind: 'tool-start', iteration, callId, name });
    this.journal.durable(go, () => undefined); // a failed write fails the run (the journal's onFailure)
  }

  /** A call's outcome as the model reads it, with the middleware state when it changed since it was last journaled. */
  toolOutcome(iteration: number, callId: string, name: string, result: unknown, isError: boolean, state: StateBag): void {
    if (state === this.journaledState) return this.keep({ kind: 'tool-outcome', iteration, callId, name, result, isError });
    this.keep({
      kind: 'tool-outcome',
      iteration,
      callId,
      name,
      result,
      isError,
      state: { run: state.toStored('run'), session: state.toStored('session') },
    });
    this.journaledState = state;
  }

  /** The turn as beforeMessageTurn left it, and the first checkpoint. */
  turn(loop: LoopState, history: MessageLog): void {
    const { instructions, settings, toolChoice } = loop;
    const { messages, unparsed } = plainMessages(loop.log.since(loop.turnStart));
    this.keep({
      kind: 'turn',
      messages,
      ...(unparsed === undefined ? {} : { unparsed }),
      ...(instructions === undefined ? {} : { instructions }),
      settings,
      ...(toolChoice === undefined ? {} : { toolChoice }),
      tools: loop.tools.map((tool) => tool.name),
    });
    this.checkpointLog = history;
    this.checkpointTurnStart = history.length;
    this.checkpoint(loop);
  }

  /** Where a resumed run starts from (its first checkpoint is then the next one). */
  resumedAt(loop: LoopState): void {
    this.checkpointLog = loop.log;
    this.checkpointTurnStart = loop.turnStart;
    this.journaledState = loop.state;
  }

  /**
   * The loop at an iteration boundary: the messages added since the last checkpoint (or all of
   * them when a middleware rewrote earlier ones), the state of both scopes, usage and counters.
   * Then the buffered records are written: one append per iteration.
   */
  checkpoint(loop: LoopState): void {
    const before = this.checkpointLog;
    const length = before ? before.length : 0;
    const kept =
      before !== undefined &&
      loop.turnStart === this.checkpointTurnStart &&
      loop.log.length >= length &&
      (length === 0 || loop.log.at(length - 1) === before.at(length - 1));
    const state = { run: loop.state.toStored('run'), session: loop.state.toStored('session') };
    const usage = { inputTokens: loop.usage.inputTokens, outputTokens: loop.usage.outputTokens };
    const done =
      loop.done && loop.endReason
        ? { done: loop.terminationReason === undefined ? { reason: loop.endReason } : { reason: loop.endReason, terminationReason: loop.terminationReason } }
        : {};
    const { messages, unparsed } = plainMessages(loop.log.since(kept ? length : 0));
    const plain = unparsed === undefined ? {} : { unparsed };
    this.keep(
      kept
        ? { kind: 'checkpoint', iteration: loop.iteration, messages, ...plain, state, usage, functionCalls: loop.functionCalls, ...done }
        : {
            kind: 'checkpoint',
            iteration: loop.iteration,
            messages,
            ...plain,
            replace: true,
            turnStart: loop.turnStart,
            state,
            usage,
            functionCalls: loop.functionCalls,
            ...done,
          },
    );
    this.checkpointLog = loop.log;
    this.checkpointTurnStart = loop.turnStart;
    this.journaledState = loop.state;
    if (loop.iteration > this.replayIteration) this.replay = undefined;
    this.journal.flush();
  }

  /**
   * Buffers a record the step making it needs kept: one the journal refuses (JSON cannot hold it:
   * a state value holding a `BigInt` or a cycle) is thrown, and the step fails the run with it.
   * The run then ends for good (its `end` record written): a resume would meet the same value.
   */
  private keep(record: NewRecord): void {
    const refused = this.journal.record(record);
    if (refused) throw refused;
  }
}
