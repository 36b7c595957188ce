import * as E from 'fp-ts/lib/Either.js';
import { messageId, withIds, type Message, type ToolCallPart, type ToolResultPart } from '../messages/message';
import { ErrorContext, FunctionContext, FunctionResultContext, ToolBatchContext, type IterationContext } from '../middleware/contexts';
import { continueWith, phaseThen, type StepOwner } from '../middleware/runPhase';
import type { ToolOutcome } from '../middleware/types';
import { loopWith, type LoopState } from '../middleware/loopState';
import type { Tool } from '../tools/defineTool';
import { parseArguments } from '../tools/parseArguments';
import type { CompiledAgent } from './compileAgent';
import { executeFunction, toolErrorText } from './executeFunction';
import type { RunScopeImpl } from './runScopeImpl';
import { jsonProblem, unsentResult } from '../internal/unsent';
import { isClientTool } from './clientCalls';

/** The result a call gets when its batch is skipped. */
export const SKIPPED_RESULT = 'Tool execution was skipped.';

/**
 * The tool step of an iteration: beforeToolExecution, then the calls. Continues with the
 * iteration context whose messages hold the response and the results, marked final when the
 * turn is over.
 */
export function runTools(owner: StepOwner, scope: RunScopeImpl, agent: CompiledAgent, ctx: IterationContext, done: (ctx: IterationContext) => void): void {
  const response = ctx.response as Message;
  const calls = ctx.toolCalls;
  if (calls.length === 0) return done(finishWith(ctx, ctx.loop, [response], true));
  announce(scope, ctx.iteration, calls, undefined);
  const batch = new ToolBatchContext(scope, ctx.loop, ctx.iteration, response, calls, ctx.tools);
  phaseThen(batch, agent.hooks.beforeToolExecution, 'beforeToolExecution', owner, (checked) => {
    if (checked.termination || checked.skipped) return done(skipBatch(scope, ctx, checked));
    if (checked.toolCalls !== calls) announce(scope, ctx.iteration, checked.toolCalls, calls); // calls a hook added
    const run = new BatchRun(owner, scope, agent, ctx, calls, checked, done);
    if (checked.toolCalls.length === 0) return run.finish(); // every call dropped by `with({ toolCalls })`
    run.prepare(0);
  });
}

/** A `tool-call` event for each of `calls` that is not among `announced` (by id). */
function announce(scope: RunScopeImpl, iteration: number, calls: readonly ToolCallPart[], announced: readonly ToolCallPart[] | undefined): void {
  for (const call of calls) {
    if (announced?.some((earlier) => earlier.callId === call.callId)) continue;
    scope.send({ type: 'tool-call', runId: scope.runId, iteration, callId: call.callId, name: call.name, args: call.args });
  }
}

/** Every call of a skipped or stopped batch is answered with the skipped result. */
function skipBatch(scope: RunScopeImpl, ctx: IterationContext, batch: ToolBatchContext): IterationContext {
  const results = skippedResults(scope, ctx.iteration, ctx.toolCalls);
  const finalResponse = batch.skipped?.response;
  const response = ctx.response as Message;
  const messages = finalResponse ? [response, toolMessage(results), finalResponse] : [response, toolMessage(results)];
  return finishWith(ctx, batch.loop, messages, !!finalResponse || !!batch.termination, results, batch.termination);
}

/** The skipped result of each call, each with its `tool-result` event. */
function skippedResults(scope: RunScopeImpl, iteration: number, calls: readonly ToolCallPart[]): ToolResultPart[] {
  const results = calls.map((call): ToolResultPart => ({ type: 'tool-result', callId: call.callId, name: call.name, result: SKIPPED_RESULT, isError: true }));
  for (const r of results) {
    scope.send({ type: 'tool-result', runId: scope.runId, iteration, callId: r.callId, name: r.name, result: r.result, isError: true });
  }
  return results;
}

function finishWith(
  ctx: IterationContext,
  loop: LoopState,
  messages: Message[],
  final: boolean,
  toolResults: readonly ToolResultPart[] = ctx.toolResults,
  termination: IterationContext['termination'] = ctx.termination,
  functionCalls: number = loop.functionCalls,
): IterationContext {
  const log = loop.log.appendAll(withIds(messages));
  return ctx.toolsDone(loopWith(loop, { log, functionCalls }), final, toolResults, termination);
}

/** The tool message; one result gets a literal array made with the message (see ResponseAssembler.message). */
function toolMessage(results: readonly ToolResultPart[]): Message {
  return { id: messageId(), role: 'tool', content: results.length === 1 ? [results[0]] : results };
}

/** A call ready to run, or the outcome that stands in for it (unknown tool, bad arguments, blocked). */
interface Prepared {
  readonly call: ToolCallPart;
  readonly index: number;
  readonly fn: FunctionContext | undefined;
  readonly outcome: ToolOutcome | undefined;
  readonly args: unknown;
  /** The outcome is the journaled one, as the model read it: no afterFunction, not journaled again. */
  readonly replayed?: boolean;
}

/**
 * One batch of calls. beforeFunction runs for the calls one after another in the model's order,
 * each seeing the state the previous left (approvals are asked in order; a remembered choice
 * applies to the next call). The functions then run — all at once, or one by one with
 * `toolExecution: 'sequential'` — and afterFunction runs for each as it finishes, one at a time,
 * threading the state so no write is lost. Results keep the model's order.
 */
class BatchRun {
  private loop: LoopState;
  // Sized to the batch: a pushed-to empty array reserves 17 slots, which a waiting run would keep.
  private readonly prepared: Prepared[];
  private preparedCount = 0;
  private readonly results: ToolResultPart[];
  /** Calls that ended, in the order they did: with an outcome, or with the error they failed with. */
  private readonly finished: Array<{ item: Prepared; outcome: ToolOutcome | undefined; blocked: boolean; error: unknown }> = [];
  private draining = false;
  private started = 0;
  private running = 0;
  private reported = 0;

  constructor(
    private readonly owner: StepOwner,
    private readonly scope: RunScopeImpl,
    private readonly agent: CompiledAgent,
    private readonly ctx: IterationContext,
    /** The calls of the assistant message (the batch's until a hook replaces them). */
    private readonly asked: readonly ToolCallPart[],
    private readonly batch: ToolBatchContext,
    private readonly done: (ctx: IterationContext) => void,
  ) {
    this.loop = batch.loop;
    this.prepared = new Array<Prepared>(batch.toolCalls.length);
    this.results = new Array<ToolResultPart>(batch.toolCalls.length);
  }

  /**
   * The calls of client tools that beforeFunction let through (their arguments fit): left to the
   * client, they get no result here, and the turn ends after the batch.
   */
  private leftToClient: Set<string> | undefined;

  /**
   * Prepares call `index` and the ones after it, then starts the functions. In a resumed
   * iteration, beforeFunction runs again for every call, as it did (a choice one call's hook
   * remembers applies to the next, and an answered request is found by its id); a call whose
   * outcome is journaled then takes it, and the batch goes on from the state the journal holds.
   */
  prepare(index: number): void {
    const calls = this.batch.toolCalls;
    for (; index < calls.length; index++) {
      const call = calls[index];
      const tool = findTool(this.batch.tools, call.name);
      if (!tool) {
        const names = this.batch.tools.map((t) => `'${t.name}'`).join(', ');
        const result = `Unknown tool '${call.name}'. Available tools: ${names || 'none'}.`;
        this.keepOutcome(call, index, { result, isError: true }, call.args);
        continue;
      }
      const parsed = parseArguments(tool, call.args);
      if (E.isLeft(parsed)) {
        this.keepOutcome(call, index, { result: parsed.left, isError: true }, call.args);
        continue;
      }
      const fn = new FunctionContext(this.scope, this.loop, this.batch.iteration, call.callId, call.name, parsed.right, tool, index);
      if (this.agent.hooks.beforeFunction.length === 0) {
        this.keepReady(call, index, fn, undefined);
        continue;
      }
      const next = index + 1;
      phaseThen(fn, this.agent.hooks.beforeFunction, 'beforeFunction', this.owner, (ready) => {
        this.loop = ready.loop;
        this.keepReady(call, index, ready, ready.blocked);
        this.prepare(next);
      });
      return;
    }
    const durable = this.scope.durable;
    const restored = durable?.replayedState(this.batch.iteration);
    if (restored) this.loop = loopWith(this.loop, { state: restored });
    this.startNext();
  }

  /** Keeps a call that has an outcome already (unknown tool, bad arguments), or its journaled one. */
  private keepOutcome(call: ToolCallPart, index: number, outcome: ToolOutcome, args: unknown): void {
    const replayed = this.scope.durable?.replayedOutcome(this.batch.iteration, call.callId);
    if (replayed) this.keep({ call, index, fn: undefined, outcome: replayed, args, replayed: true });
    else this.keep({ call, index, fn: undefined, outcome, args });
  }

  /**
   * Keeps a call beforeFunction let through (or blocked). In a resumed iteration, a call whose
   * outcome is journaled is not run again; one caught mid-flight runs again only when its tool is
   * idempotent.
   */
  private keepReady(call: ToolCallPart, index: number, fn: FunctionContext, blocked: ToolOutcome | undefined): void {
    const durable = this.scope.durable;
    if (durable) {
      const replayed =
        durable.replayedOutcome(fn.iteration, call.callId) ?? (blocked ? undefined : durable.interruptedCall(fn.iteration, call.callId, fn.tool));
      if (replayed) return this.keep({ call, index, fn: undefined, outcome: replayed, args: fn.args, replayed: replayed.replayed });
    }
    this.keep({ call, index, fn, outcome: blocked, args: fn.args });
  }

  /** Keeps a prepared call, in the model's order. */
  private keep(item: Prepared): void {
    this.prepared[this.preparedCount++] = item;
  }

  /** Starts as many prepared calls as the concurrency allows (none once the run is over: cancelled, left). */
  private startNext(): void {
    const limit = this.agent.toolConcurrency;
    while (this.started < this.preparedCount && this.running < limit && !this.owner.subscription.closed) {
      const item = this.prepared[this.started++];
      if (item.fn && !item.outcome && isClientTool(item.fn.tool)) {
        this.leave(item);
        continue;
      }
      this.running++;
      if (item.outcome || !item.fn) {
        this.ended(item, item.outcome, true, undefined);
      } else {
        const fn = item.fn.atLoop(this.loop);
        const durable = this.scope.durable;
        if (!durable) this.execute(item, fn);
        else durable.toolStart(fn.iteration, fn.callId, fn.toolName, () => this.owner.subscription.closed || this.execute(item, fn));
      }
    }
  }

  /** Leaves a call to the client that runs its tool: no result, no afterFunction. */
  private leave(item: Prepared): void {
    (this.leftToClient ??= new Set()).add(item.call.callId);
    if (++this.reported === this.batch.toolCalls.length) this.finish();
  }

  private execute(item: Prepared, fn: FunctionContext): void {
    executeFunction(
      this.owner,
      this.scope,
      this.agent,
      fn,
      (outcome) => this.ended(item, outcome, false, undefined),
      (error) => this.ended(item, undefined, false, error),
    );
  }

  /** A call ended: with an outcome, or (no outcome) with the error it failed with. */
  private ended(item: Prepared, outcome: ToolOutcome | undefined, blocked: boolean, error: unknown): void {
    this.running--;
    // Nothing queued before it: handled at once, without a queue entry (the usual single call).
    if (!this.draining && this.finished.length === 0) return this.afterEnd(item, outcome, blocked, error);
    this.finished.push({ item, outcome, blocked, error });
    this.drain();
  }

  /**
   * Runs afterFunction for the finished calls, one at a time; for a call that failed, the onError
   * hooks first (in turn with the others' hooks, so what they write is kept in the batch's state).
   */
  private drain(): void {
    if (this.draining) return;
    const next = this.finished.shift();
    if (!next) return;
    this.afterEnd(next.item, next.outcome, next.blocked, next.error);
  }

  private afterEnd(item: Prepared, outcome: ToolOutcome | undefined, blocked: boolean, error: unknown): void {
    this.draining = true;
    if (outcome) return this.afterFunction(item, outcome, blocked);
    const errorCtx = new ErrorContext(this.scope, this.loop, error, 'tool', this.batch.iteration, undefined, item.call.callId, item.call.name);
    phaseThen(errorCtx, this.agent.hooks.onError, 'onError', this.owner, (seen) => {
      this.loop = seen.loop;
      this.afterFunction(item, { result: toolErrorText(seen.error), isError: true, error: seen.error }, false);
    });
  }

  private afterFunction(item: Prepared, outcome: ToolOutcome, blocked: boolean): void {
    if (item.replayed) return this.report(item, this.batch.iteration, item.call.callId, item.call.name, outcome.result, outcome.isError);
    const resultCtx = new FunctionResultContext(
      this.scope,
      this.loop,
      this.batch.iteration,
      item.call.callId,
      item.call.name,
      item.args,
      outcome.result,
      outcome.isError,
      blocked,
      outcome.error,
    );
    phaseThen(resultCtx, this.agent.hooks.afterFunction, 'afterFunction', this.owner, (after) => {
      this.loop = after.loop;
      // The model, the session and the journal read a result as JSON: one JSON cannot hold is an error result saying why.
      const problem = jsonProblem(after.result);
      const result = problem === undefined ? after.result : unsentResult(problem);
      const isError = problem === undefined ? after.isError : true;
      this.scope.durable?.toolOutcome(after.iteration, after.callId, after.toolName, result, isError, after.loop.state);
      this.report(item, after.iteration, after.callId, after.toolName, result, isError, blocked ? (outcome as { denied?: string }).denied : undefined);
    });
  }

  /** Reports a call's result; `denied` is the reason when a person or a policy refused the call. */
  private report(item: Prepared, iteration: number, callId: string, name: string, result: unknown, isError: boolean, denied?: string): void {
    const runId = this.scope.runId;
    this.scope.send(
      denied !== undefined
        ? { type: 'tool-result', runId, iteration, callId, name, result, isError, denied: true, reason: denied }
        : item.replayed
          ? { type: 'tool-result', runId, iteration, callId, name, result, isError, replayed: true }
          : { type: 'tool-result', runId, iteration, callId, name, result, isError },
    );
    this.results[item.index] = { type: 'tool-result', callId, name, result, isError };
    this.reported++;
    this.draining = false;
    if (this.reported === this.batch.toolCalls.length) return this.finish();
    this.startNext();
    this.drain();
  }

  /**
   * The history keeps a result for every call of the assistant message: calls a
   * beforeToolExecution hook dropped (`with({ toolCalls })`) are answered with the skipped
   * result, and calls it added join the assistant message.
   */
  finish(): void {
    const ran = this.batch.toolCalls;
    const asked = this.asked;
    const left = this.leftToClient;
    let response = this.ctx.response as Message;
    let results: ToolResultPart[] = this.results;
    if (ran !== asked || left) {
      // In the model's order: each asked call's result (the skipped one if dropped, none if the
      // client runs it), then added calls'.
      const byId = new Map<string, ToolResultPart>();
      for (const result of this.results) if (result !== undefined) byId.set(result.callId, result);
      const askedIds = new Set(asked.map((call) => call.callId));
      const added = ran.filter((call) => !askedIds.has(call.callId));
      if (added.length > 0) response = { ...response, content: [...response.content, ...added] };
      results = [];
      for (const call of asked) {
        if (left?.has(call.callId)) continue;
        results.push(byId.get(call.callId) ?? skippedResults(this.scope, this.batch.iteration, [call])[0]);
      }
      for (const call of added) if (!left?.has(call.callId)) results.push(byId.get(call.callId)!);
    }
    const functionCalls = this.loop.functionCalls + this.results.length - (left?.size ?? 0);
    // Calls left to the client end the turn: their results are the next run's input.
    const messages = results.length > 0 ? [response, toolMessage(results)] : [response];
    const next = finishWith(this.ctx, this.loop, messages, left !== undefined, results, this.ctx.termination, functionCalls);
    continueWith(this.owner, this.done, next);
  }
}

function findTool(tools: readonly Tool[], name: string): Tool | undefined {
  for (const tool of tools) if (tool.name === name) return tool;
  return undefined;
}
