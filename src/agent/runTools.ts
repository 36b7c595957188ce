import { Observable, catchError, concatMap, defer, from, isObservable, last, map, mergeMap, of, toArray, type ObservableInput } from 'rxjs';
import * as E from 'fp-ts/lib/Either.js';
import type { Message, ToolCallPart, ToolResultPart } from '../messages/message';
import {
  ErrorContext,
  FunctionContext,
  FunctionResultContext,
  ToolBatchContext,
  type IterationContext,
} from '../middleware/contexts';
import { runPhase } from '../middleware/runPhase';
import { HookFailure, type ToolOutcome } from '../middleware/types';
import type { LoopState } from '../state/loopState';
import type { Tool } from '../tools/defineTool';
import { parseArguments } from '../tools/parseArguments';
import type { CompiledAgent } from './compileAgent';
import type { RunScopeImpl } from './runScopeImpl';

/** The result a call gets when its batch is skipped. */
export const SKIPPED_RESULT = 'Tool execution was skipped.';

/**
 * An error whose message is written for the model: the result it reads is the message as is.
 * Any other error a tool raises reaches the model as `Error: <message>`.
 *
 * @example
 * throw new ToolError(`City 'Atlantis' not found`);
 */
export class ToolError extends Error {
  override readonly name: string = 'ToolError';
}

/**
 * Runs the tool step of an iteration: appends the response and the results to the messages
 * and marks the iteration final when the turn is over.
 */
export function runTools(scope: RunScopeImpl, agent: CompiledAgent, ctx: IterationContext): Observable<IterationContext> {
  const response = ctx.response as Message;
  const calls = ctx.toolCalls;
  if (calls.length === 0) {
    return of(finishWith(ctx, ctx.loop, [response], true));
  }
  return defer(() => {
    for (const call of calls) {
      scope.send({ type: 'tool-call', runId: scope.runId, iteration: ctx.iteration, callId: call.callId, name: call.name, args: call.args });
    }
    const batch = new ToolBatchContext(scope, ctx.loop, ctx.iteration, response, calls, ctx.tools);
    return runPhase(batch, agent.hooks.beforeToolExecution, 'beforeToolExecution');
  }).pipe(
    concatMap((batch) => {
      if (batch.termination || batch.skipped) {
        const results = batch.toolCalls.map((call) => errorResult(call, SKIPPED_RESULT));
        for (const r of results) {
          scope.send({ type: 'tool-result', runId: scope.runId, iteration: ctx.iteration, callId: r.callId, name: r.name, result: r.result, isError: true });
        }
        const finalResponse = batch.skipped?.response;
        const messages = finalResponse ? [response, toolMessage(results), finalResponse] : [response, toolMessage(results)];
        const done = Object.assign(finishWith(ctx, batch.loop, messages, !!finalResponse || !!batch.termination), { toolResults: results });
        return of(batch.termination ? Object.assign(done, { termination: batch.termination }) : done);
      }
      return executeBatch(scope, agent, batch).pipe(
        map(({ results, loop }) => {
          const next = finishWith(ctx, { ...loop, functionCalls: loop.functionCalls + results.length }, [response, toolMessage(results)], false);
          return Object.assign(next, { toolResults: results });
        }),
      );
    }),
  );
}

function finishWith(ctx: IterationContext, loop: LoopState, messages: Message[], final: boolean): IterationContext {
  const next = ctx.with({});
  return Object.assign(next, { loop: { ...loop, log: loop.log.append(...messages) }, final });
}

function toolMessage(results: readonly ToolResultPart[]): Message {
  return { role: 'tool', content: results };
}

function errorResult(call: ToolCallPart, result: string): ToolResultPart {
  return { type: 'tool-result', callId: call.callId, name: call.name, result, isError: true };
}

interface Prepared {
  readonly call: ToolCallPart;
  readonly index: number;
  /** Ready to run, or the result the model reads instead (unknown tool, bad arguments, blocked). */
  readonly fn: FunctionContext | undefined;
  readonly outcome: ToolOutcome | undefined;
  readonly args: unknown;
}

/**
 * beforeFunction runs for the calls one after another, in the model's order, each seeing the
 * state the previous left (so approvals are asked in order and a remembered choice applies to
 * the next call). The functions then run (in parallel by default), and afterFunction runs for
 * each as it finishes, one at a time, threading the state (no write is lost).
 */
function executeBatch(
  scope: RunScopeImpl,
  agent: CompiledAgent,
  batch: ToolBatchContext,
): Observable<{ results: ToolResultPart[]; loop: LoopState }> {
  return defer(() => {
    // The loop state as the batch's hooks leave it; concatMap projects each step only when the
    // previous one is done, so every hook sees the current state.
    let loop = batch.loop;
    return from(batch.toolCalls).pipe(
      concatMap((call, index) => prepareCall(scope, agent, batch, loop, call, index)),
      map((item) => {
        if (item.fn) loop = item.fn.loop;
        return item;
      }),
      toArray(),
      concatMap((prepared) => from(prepared)),
      mergeMap((item) => runCall(scope, agent, item, loop), agent.toolConcurrency),
      concatMap(({ item, outcome, blocked }) =>
        runPhase(
          new FunctionResultContext(scope, loop, batch.iteration, item.call.callId, item.call.name, item.args, outcome.result, outcome.isError, blocked),
          agent.hooks.afterFunction,
          'afterFunction',
        ).pipe(map((ctx) => ((loop = ctx.loop), { index: item.index, result: reportResult(scope, ctx) }))),
      ),
      toArray(),
      map((done) => {
        done.sort((a, b) => a.index - b.index);
        return { results: done.map((d) => d.result), loop };
      }),
    );
  });
}

function reportResult(scope: RunScopeImpl, ctx: FunctionResultContext): ToolResultPart {
  const { callId, toolName: name, result, isError } = ctx;
  scope.send({ type: 'tool-result', runId: scope.runId, iteration: ctx.iteration, callId, name, result, isError });
  return { type: 'tool-result', callId, name, result, isError };
}

function prepareCall(
  scope: RunScopeImpl,
  agent: CompiledAgent,
  batch: ToolBatchContext,
  loop: LoopState,
  call: ToolCallPart,
  index: number,
): Observable<Prepared> {
  const tool = findTool(batch.tools, call.name);
  if (!tool) {
    const names = batch.tools.map((t) => `'${t.name}'`).join(', ');
    const result = `Unknown tool '${call.name}'. Available tools: ${names || 'none'}.`;
    return of({ call, index, fn: undefined, outcome: { result, isError: true }, args: call.args });
  }
  const parsed = parseArguments(tool, call.args);
  if (E.isLeft(parsed)) {
    return of({ call, index, fn: undefined, outcome: { result: parsed.left, isError: true }, args: call.args });
  }
  const fn = new FunctionContext(scope, loop, batch.iteration, call.callId, call.name, parsed.right, tool, index);
  return runPhase(fn, agent.hooks.beforeFunction, 'beforeFunction').pipe(
    map((ready) => ({ call, index, fn: ready, outcome: ready.blocked, args: ready.args })),
  );
}

function findTool(tools: readonly Tool[], name: string): Tool | undefined {
  for (const tool of tools) if (tool.name === name) return tool;
  return undefined;
}

/** Runs one prepared call (or passes on the result that stands in for it). */
function runCall(
  scope: RunScopeImpl,
  agent: CompiledAgent,
  item: Prepared,
  loop: LoopState,
): Observable<{ item: Prepared; outcome: ToolOutcome; blocked: boolean }> {
  if (item.outcome || !item.fn) return of({ item, outcome: item.outcome as ToolOutcome, blocked: true });
  const fn = item.fn.loop === loop ? item.fn : withLoop(item.fn, loop);
  return executeFunction(scope, agent, fn).pipe(map((outcome) => ({ item, outcome, blocked: false })));
}

function withLoop(fn: FunctionContext, loop: LoopState): FunctionContext {
  return Object.assign(Object.create(Object.getPrototypeOf(fn)), fn, { loop });
}

/**
 * The function's own stream, wrapped by the `wrapFunction` operators (first registered
 * outermost). An error inside becomes an error result only outside the outermost wrapper, after
 * the `onError` hooks have seen it.
 */
function executeFunction(scope: RunScopeImpl, agent: CompiledAgent, fn: FunctionContext): Observable<ToolOutcome> {
  const inner$ = new Observable<ToolOutcome>((subscriber) => {
    const controller = new AbortController();
    let value: unknown;
    try {
      value = fn.tool.execute(fn.args, {
        signal: controller.signal,
        callId: fn.callId,
        runId: scope.runId,
        iteration: fn.iteration,
      });
    } catch (error) {
      subscriber.error(error);
      return;
    }
    const source$ =
      isObservable(value) || isPromiseLike(value) ? from(value as ObservableInput<unknown>) : of(value);
    let settled = false;
    const subscription = source$.pipe(last(undefined, undefined as unknown)).subscribe({
      next: (result) => subscriber.next({ result, isError: false }),
      error: (error) => {
        settled = true;
        subscriber.error(error);
      },
      complete: () => {
        settled = true;
        subscriber.complete();
      },
    });
    return () => {
      subscription.unsubscribe();
      // Only a call torn down before it settled (cancel, timeout) is aborted.
      if (!settled) controller.abort(new Error(`Tool '${fn.toolName}' was cancelled`));
    };
  });
  let wrapped = inner$;
  const wrappers = agent.functionWrappers;
  for (let i = wrappers.length - 1; i >= 0; i--) {
    const { wrap, middleware } = wrappers[i];
    let operator;
    try {
      operator = wrap(fn);
    } catch (error) {
      return new Observable((subscriber) => subscriber.error(new HookFailure(error, middleware, 'wrapFunction')));
    }
    wrapped = wrapped.pipe(operator);
  }
  return wrapped.pipe(
    last(undefined, { result: undefined, isError: false } as ToolOutcome),
    catchError((error: unknown) => {
      if (error instanceof HookFailure) throw error;
      const errorCtx = new ErrorContext(scope, fn.loop, error, 'tool', fn.iteration, undefined, fn.callId, fn.toolName);
      return runPhase(errorCtx, agent.hooks.onError, 'onError').pipe(
        map((seen) => ({ result: toolErrorText(seen.error), isError: true })),
      );
    }),
  );
}

function toolErrorText(error: unknown): string {
  if (error instanceof ToolError) return error.message;
  if (error instanceof Error) return `Error: ${error.message}`;
  return `Error: ${typeof error === 'string' ? error : JSON.stringify(error)}`;
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return !!value && typeof (value as PromiseLike<unknown>).then === 'function';
}

