import { z } from 'zod';
import { mapContext, defineState, type AgentMiddleware, type ToolResultPart } from '../src/index';
import { fillTemplate } from './internal/fillTemplate';
import { checkOptions, optionNames } from './internal/checkOptions';

/** What a custom `isError` detector of {@link errorTracking} sees: one tool result. */
export interface TrackedToolResult {
  /** The tool's name. */
  readonly name: string;
  /** The result the model reads. */
  readonly result: unknown;
  /** True when the runtime marked the result as an error. */
  readonly isError: boolean;
}

/** Options of {@link errorTracking}. */
export interface ErrorTrackingOptions {
  /** The run terminates when this many iterations in a row failed (default 3, a positive integer). */
  maxConsecutiveErrors?: number;
  /**
   * An extra error detector: a result is an error when it returns true (in addition to the
   * built-in rules: `isError: true`, or a string starting with `Error:` or `Failed:`).
   */
  isError?: (result: TrackedToolResult) => boolean;
  /**
   * The termination message; `{consecutiveErrors}`, `{maxAllowed}` and `{lastError}` are replaced.
   * Default: `Maximum consecutive failures ({maxAllowed}) exceeded`.
   */
  message?: string;
}

/** The keys of {@link ErrorTrackingOptions}: any other is refused. */
const OPTIONS = optionNames<ErrorTrackingOptions>({ maxConsecutiveErrors: true, isError: true, message: true });

/** The default termination message of {@link errorTracking}. */
export const ERROR_TRACKING_MESSAGE = 'Maximum consecutive failures ({maxAllowed}) exceeded';

const ErrorCount = defineState({
  key: 'rx-agent.errorTracking.consecutiveErrors',
  schema: z.object({ count: z.number() }),
  initial: () => ({ count: 0 }),
  scope: 'run',
});

const ERROR_PREFIX = /^(error|failed):/i;

/**
 * Stops a run whose tool calls keep failing.
 *
 * After each iteration, the iteration fails when any of its tool results is an error: a result
 * marked `isError: true` (a tool that threw, bad arguments, an unknown tool, a blocked call marked
 * as an error…), a string result starting with `Error:` or `Failed:` (case-insensitive), or one
 * for which `isError(result)` returns true. Failing iterations in a row are counted (run state); an
 * iteration whose tool results are all clean resets the count. When the count reaches
 * `maxConsecutiveErrors`, the event
 * `error-threshold-exceeded { consecutiveErrors, maxAllowed, lastError }` is emitted (`lastError`:
 * the iteration's last error result in the model's order, as a string; other values as JSON) and
 * the run terminates with `message` (the model does not get another call).
 *
 * Decisions where the spec is silent:
 * - `isError` adds to the built-in rules (it cannot clear a result they flag); it is asked about
 *   every tool result of the iteration, in the model's order.
 * - An iteration without tool results (a final answer) neither counts nor resets. A batch skipped
 *   by another middleware counts as failing: its `Tool execution was skipped.` results are errors.
 * - The count is run state: every run (every turn of a session) starts from zero.
 *
 * @param options `maxConsecutiveErrors` (default 3), `isError` (none), `message` (default
 *   {@link ERROR_TRACKING_MESSAGE}).
 * @throws TypeError when an option is invalid (the message names it).
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   tools: [fetchPage],
 *   middleware: [errorTracking({ maxConsecutiveErrors: 2, isError: ({ result }) => result === null })],
 * });
 */
export function errorTracking(options: ErrorTrackingOptions = {}): AgentMiddleware {
  checkOptions('errorTracking', options, OPTIONS);
  const { maxConsecutiveErrors = 3, isError, message = ERROR_TRACKING_MESSAGE } = options;
  if (!Number.isInteger(maxConsecutiveErrors) || maxConsecutiveErrors < 1) {
    throw new TypeError(`errorTracking: 'maxConsecutiveErrors' must be a positive integer, got ${String(maxConsecutiveErrors)}`);
  }
  if (isError !== undefined && typeof isError !== 'function') {
    throw new TypeError(`errorTracking: 'isError' must be a function (result: { name, result, isError }) => boolean, got ${typeof isError}`);
  }
  if (typeof message !== 'string') {
    throw new TypeError(`errorTracking: 'message' must be a string, got ${typeof message}`);
  }

  const failed = (part: ToolResultPart): boolean => {
    const flagged = part.isError === true;
    const custom = isError ? isError({ name: part.name, result: part.result, isError: flagged }) === true : false;
    return flagged || custom || (typeof part.result === 'string' && ERROR_PREFIX.test(part.result));
  };

  return {
    name: 'errorTracking',
    afterIteration: mapContext((ctx) => {
      const results = ctx.toolResults;
      if (results.length === 0) return ctx;
      let lastError: ToolResultPart | undefined;
      for (const part of results) if (failed(part)) lastError = part;
      if (!lastError) {
        return ctx.state(ErrorCount).count === 0 ? ctx : ctx.updateState(ErrorCount, () => ({ count: 0 }));
      }
      const next = ctx.updateState(ErrorCount, (s) => ({ count: s.count + 1 }));
      const consecutiveErrors = next.state(ErrorCount).count;
      if (consecutiveErrors < maxConsecutiveErrors || ctx.termination) return next;
      const text = resultText(lastError.result);
      next.emit({ type: 'error-threshold-exceeded', consecutiveErrors, maxAllowed: maxConsecutiveErrors, lastError: text });
      // One pass: the error text is inserted as is (no `$&` patterns, no placeholder in it filled).
      return next.terminate(fillTemplate(message, { consecutiveErrors: String(consecutiveErrors), maxAllowed: String(maxConsecutiveErrors), lastError: text }));
    }),
  };
}

function resultText(result: unknown): string {
  if (typeof result === 'string') return result;
  try {
    return JSON.stringify(result) ?? String(result);
  } catch {
    return String(result);
  }
}
