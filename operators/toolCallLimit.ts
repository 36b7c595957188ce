import { z } from 'zod';
import { mapContext, defineState, type AgentMiddleware, type ToolBatchContext } from '../src/index';
import { uniqueId } from '../src/internal/uniqueId';
import { checkOptions, optionNames } from './internal/checkOptions';
import { show } from '../src/internal/show';

/** The count key of a limit: its tool, or every tool. */
const ALL_TOOLS = '__all__';

const Counts = z.record(z.string(), z.number().int().nonnegative());

/** Allowed calls in the thread (the session; without one, the run), per count key. */
const ThreadCounts = defineState({
  key: 'rx-agent.toolCallLimit.threadCounts',
  schema: Counts,
  initial: () => ({}),
  scope: 'session',
});

/** Allowed and blocked calls in this run, per count key. */
const RunCounts = defineState({
  key: 'rx-agent.toolCallLimit.runCounts',
  schema: Counts,
  initial: () => ({}),
  scope: 'run',
});

/** Which instance decided each count key's batch last (and in which iteration): one per key. */
const DecidedBy = defineState({
  key: 'rx-agent.toolCallLimit.decidedBy',
  schema: z.record(z.string(), z.object({ instance: z.string(), iteration: z.number() })),
  initial: () => ({}),
  scope: 'run',
});

/** The callIds of the current batch that a limit blocked, per count key. */
const Blocked = defineState({
  key: 'rx-agent.toolCallLimit.blocked',
  schema: z.record(z.string(), z.array(z.string())),
  initial: () => ({}),
  scope: 'run',
});

/** Options of {@link toolCallLimit}. */
export interface ToolCallLimitOptions {
  /** Count only the calls of this tool (default: every tool's calls). */
  toolName?: string;
  /** At most this many allowed calls in the thread (the session). */
  threadLimit?: number;
  /** At most this many calls (allowed or blocked) in one run; not more than `threadLimit`. */
  runLimit?: number;
  /**
   * `'continue'` (default): a blocked call's result tells the model the limit is reached, the
   * other calls run; `'end'`: no tool of the batch runs and the run terminates; `'error'`: the
   * run fails with a {@link ToolCallLimitExceededError}.
   */
  exitBehavior?: 'continue' | 'end' | 'error';
}

/** The keys of {@link ToolCallLimitOptions}: any other is refused. */
const OPTIONS = optionNames<ToolCallLimitOptions>({ toolName: true, threadLimit: true, runLimit: true, exitBehavior: true });

/**
 * A tool call was blocked by {@link toolCallLimit} with `exitBehavior: 'error'`. The message is
 * the limit text, e.g. `'search' tool call limit reached: thread limit exceeded (4/3 calls).`
 */
export class ToolCallLimitExceededError extends Error {
  override readonly name = 'ToolCallLimitExceededError';
  constructor(
    message: string,
    /** The calls the thread would have made with the batch's blocked calls (allowed + blocked). */
    readonly threadCount: number,
    /** The run's calls, the blocked ones included. */
    readonly runCount: number,
    readonly threadLimit: number | undefined,
    readonly runLimit: number | undefined,
    readonly toolName: string | undefined,
  ) {
    super(message);
  }
}

function checkLimit(name: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`toolCallLimit: '${name}' must be a non-negative integer, got ${show(value)}`);
  }
  return value;
}

/**
 * Limits tool calls, per thread (the session: counts are saved with it) and per run, for one
 * tool (`toolName`) or for all. The calls of a batch are decided in the model's order: a call is
 * allowed while `count + 1 <= limit` (thread limit checked first, then run limit). Thread counts
 * count allowed calls; run counts count allowed and blocked ones. A blocked call's result (an
 * error result) is `Tool call limit exceeded. Do not call '<name>' again.` (without `toolName`:
 * `Tool call limit exceeded. Do not make additional tool calls.`). Every blocked call emits
 * `tool-call-limit-exceeded { toolName, scope, count, limit }`, `count` including the blocked call.
 *
 * Options (at least one limit is required; `runLimit` may not exceed `threadLimit`):
 * - `toolName`: the tool whose calls count (default: all tools).
 * - `threadLimit`, `runLimit`: the limits.
 * - `exitBehavior` (default `'continue'`): `'continue'` blocks the calls over the limit only;
 *   `'end'` runs no tool of the batch and terminates the run with
 *   `'<name>' tool call limit reached: thread limit exceeded (4/3 calls).` (without `toolName`:
 *   `Tool call limit reached: …`; both limits: `… thread limit exceeded (4/3 calls) and run limit
 *   exceeded (5/4 calls).`); `'error'` fails the run with a {@link ToolCallLimitExceededError}
 *   carrying that text.
 *
 * @example
 * const agent = createAgent({
 *   model, tools: [search, fetchPage],
 *   middleware: [toolCallLimit({ threadLimit: 20, runLimit: 10 }), toolCallLimit({ toolName: 'search', runLimit: 3 })],
 * });
 */
export function toolCallLimit(options: ToolCallLimitOptions = {}): AgentMiddleware {
  checkOptions('toolCallLimit', options, OPTIONS); // no unknown option, none set to null
  const { toolName } = options;
  if (toolName !== undefined && (typeof toolName !== 'string' || toolName === '')) {
    throw new TypeError(`toolCallLimit: 'toolName' must be a non-empty string, got ${String(toolName)}`);
  }
  const threadLimit = checkLimit('threadLimit', options.threadLimit);
  const runLimit = checkLimit('runLimit', options.runLimit);
  const exitBehavior = options.exitBehavior ?? 'continue';
  if (threadLimit === undefined && runLimit === undefined) {
    throw new TypeError("toolCallLimit: give at least one of 'threadLimit' and 'runLimit'");
  }
  if (threadLimit !== undefined && runLimit !== undefined && runLimit > threadLimit) {
    throw new TypeError(`toolCallLimit: 'runLimit' (${runLimit}) cannot exceed 'threadLimit' (${threadLimit})`);
  }
  if (exitBehavior !== 'continue' && exitBehavior !== 'end' && exitBehavior !== 'error') {
    throw new TypeError(`toolCallLimit: 'exitBehavior' must be 'continue', 'end' or 'error', got ${String(exitBehavior)}`);
  }

  const key = toolName ?? ALL_TOOLS;
  const blockedResult =
    toolName === undefined ? 'Tool call limit exceeded. Do not make additional tool calls.' : `Tool call limit exceeded. Do not call '${toolName}' again.`;

  const limitText = (threadCount: number, runCount: number): string => {
    const exceeded: string[] = [];
    if (threadLimit !== undefined && threadCount > threadLimit) exceeded.push(`thread limit exceeded (${threadCount}/${threadLimit} calls)`);
    if (runLimit !== undefined && runCount > runLimit) exceeded.push(`run limit exceeded (${runCount}/${runLimit} calls)`);
    return `${toolName === undefined ? 'Tool' : `'${toolName}' tool`} call limit reached: ${exceeded.join(' and ')}.`;
  };

  const withTool = <E extends { type: 'tool-call-limit-exceeded'; scope: 'thread' | 'run'; count: number; limit: number }>(event: E) =>
    toolName === undefined ? event : { ...event, toolName };

  // A unique id, not a module counter: the ESM and CJS builds of the package may both be loaded.
  const instance = uniqueId('toolCallLimit');
  const decide = (ctx: ToolBatchContext): ToolBatchContext => {
    const decided = ctx.state(DecidedBy)[key];
    if (decided?.iteration === ctx.iteration) {
      if (decided.instance === instance) return ctx; // registered twice: this batch is decided
      // Another instance: both would count the same calls into the same counts, each call twice.
      throw new TypeError(
        `toolCallLimit: two instances count the calls of ${toolName === undefined ? 'every tool' : `'${toolName}'`}; give one instance both threadLimit and runLimit`,
      );
    }
    let thread = ctx.state(ThreadCounts)[key] ?? 0;
    let run = ctx.state(RunCounts)[key] ?? 0;
    const blocked: string[] = [];
    for (const call of ctx.toolCalls) {
      if (toolName !== undefined && call.name !== toolName) continue;
      if (threadLimit !== undefined && thread + 1 > threadLimit) {
        blocked.push(call.callId);
        run++;
        // Thread counts hold allowed calls only: the count shown includes the batch's blocked ones.
        ctx.emit(withTool({ type: 'tool-call-limit-exceeded', scope: 'thread', count: thread + blocked.length, limit: threadLimit }));
      } else if (runLimit !== undefined && run + 1 > runLimit) {
        blocked.push(call.callId);
        run++;
        ctx.emit(withTool({ type: 'tool-call-limit-exceeded', scope: 'run', count: run, limit: runLimit }));
      } else {
        thread++;
        run++;
      }
    }
    const next = ctx
      .updateState(ThreadCounts, (counts) => ({ ...counts, [key]: thread }))
      .updateState(RunCounts, (counts) => ({ ...counts, [key]: run }))
      .updateState(Blocked, (ids) => ({ ...ids, [key]: blocked }))
      .updateState(DecidedBy, (by) => ({ ...by, [key]: { instance, iteration: ctx.iteration } }));
    if (blocked.length === 0 || exitBehavior === 'continue') return next;
    const text = limitText(thread + blocked.length, run);
    if (exitBehavior === 'error') {
      throw new ToolCallLimitExceededError(text, thread + blocked.length, run, threadLimit, runLimit, toolName);
    }
    return next.terminate(text);
  };

  return {
    name: 'toolCallLimit',
    beforeToolExecution: mapContext((ctx) => (ctx.termination || ctx.skipped ? ctx : decide(ctx))),
    beforeFunction: mapContext((ctx) => {
      const blocked = ctx.state(Blocked)[key];
      return blocked && blocked.includes(ctx.callId) ? ctx.block(blockedResult, { isError: true }) : ctx;
    }),
  };
}
