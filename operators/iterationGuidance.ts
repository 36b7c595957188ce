import { mapContext, type AgentMiddleware, type IterationContext } from '../src/index';
import { checkOptions, optionNames } from './internal/checkOptions';

/** Options of {@link iterationGuidance}. */
export interface IterationGuidanceOptions {
  /** The iteration budget the warning counts down to (default 20; set it to the agent's `maxIterations`). */
  maxIterations?: number;
  /** Appended on iteration 0 (default {@link DEFAULT_FIRST_ITERATION_GUIDANCE}). */
  firstIteration?: string;
  /**
   * Appended on every later iteration, given the number of tool results of the turn so far
   * (default {@link defaultAfterToolsGuidance}).
   */
  afterTools?: (toolResultCount: number) => string;
  /**
   * Appended when `maxIterations - iteration <= warnWithin`, given that remaining count
   * (default {@link defaultIterationWarning}).
   */
  warning?: (remaining: number) => string;
  /** Warn while at most this many iterations remain (default 3, an integer >= 0). */
  warnWithin?: number;
}

/** The keys of {@link IterationGuidanceOptions}: any other is refused. */
const OPTIONS = optionNames<IterationGuidanceOptions>({ maxIterations: true, firstIteration: true, afterTools: true, warning: true, warnWithin: true });

/** The default `firstIteration` text of {@link iterationGuidance}. */
export const DEFAULT_FIRST_ITERATION_GUIDANCE =
  'ITERATION GUIDANCE: This is your first turn. Identify what tools you need and call them to gather information.';

/**
 * The default `afterTools` text of {@link iterationGuidance}.
 *
 * @example
 * defaultAfterToolsGuidance(2); // 'ITERATION GUIDANCE: You have 2 tool result(s). Analyze the data and synthesize your response.'
 */
export function defaultAfterToolsGuidance(toolResultCount: number): string {
  return `ITERATION GUIDANCE: You have ${toolResultCount} tool result(s). Analyze the data and synthesize your response.`;
}

/**
 * The default `warning` text of {@link iterationGuidance}.
 *
 * @example
 * defaultIterationWarning(2); // 'WARNING: Only 2 iteration(s) remaining. Wrap up your analysis and provide a conclusion.'
 */
export function defaultIterationWarning(remaining: number): string {
  return `WARNING: Only ${remaining} iteration(s) remaining. Wrap up your analysis and provide a conclusion.`;
}

/**
 * Guides the model through the loop by appending iteration-aware text to the instructions of
 * each model call (that call only: the turn's instructions are not changed).
 *
 * - Iteration 0: `firstIteration`.
 * - Later iterations: `afterTools(toolResultCount)`, the count being every tool result of the
 *   turn so far, as the model reads them (error, blocked and skipped results included; the
 *   history of earlier turns not included).
 * - Any iteration with `remaining = maxIterations - iteration <= warnWithin`: also `warning(remaining)`.
 *
 * Each text is appended after the instructions, separated by a blank line (`\n\n`); without
 * instructions the texts alone (joined by blank lines) become the instructions.
 *
 * Decisions where the spec is silent: an empty text (`firstIteration: ''`, or a function
 * returning `''`) appends nothing, which is how one part is turned off (a function returning
 * something else than a string fails the run with a TypeError); `remaining` is passed as
 * computed (it is <= 0 only when the agent allows more iterations than `maxIterations`). The
 * middleware keeps no state. Register it before middleware whose `beforeIteration` should see
 * the augmented instructions.
 *
 * @param options `maxIterations` (20), `firstIteration` ({@link DEFAULT_FIRST_ITERATION_GUIDANCE}),
 *   `afterTools` ({@link defaultAfterToolsGuidance}), `warning` ({@link defaultIterationWarning}),
 *   `warnWithin` (3).
 * @throws TypeError when an option is invalid (the message names it).
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   maxIterations: 10,
 *   middleware: [iterationGuidance({ maxIterations: 10, warnWithin: 2, warning: (n) => `Only ${n} steps left: answer now.` })],
 * });
 */
export function iterationGuidance(options: IterationGuidanceOptions = {}): AgentMiddleware {
  checkOptions('iterationGuidance', options, OPTIONS);
  const {
    maxIterations = 20,
    firstIteration = DEFAULT_FIRST_ITERATION_GUIDANCE,
    afterTools = defaultAfterToolsGuidance,
    warning = defaultIterationWarning,
    warnWithin = 3,
  } = options;
  if (!Number.isInteger(maxIterations) || maxIterations < 1) {
    throw new TypeError(`iterationGuidance: 'maxIterations' must be a positive integer, got ${String(maxIterations)}`);
  }
  if (typeof firstIteration !== 'string') {
    throw new TypeError(`iterationGuidance: 'firstIteration' must be a string, got ${typeof firstIteration}`);
  }
  if (typeof afterTools !== 'function') {
    throw new TypeError(`iterationGuidance: 'afterTools' must be a function (toolResultCount: number) => string, got ${typeof afterTools}`);
  }
  if (typeof warning !== 'function') {
    throw new TypeError(`iterationGuidance: 'warning' must be a function (remaining: number) => string, got ${typeof warning}`);
  }
  if (!Number.isInteger(warnWithin) || warnWithin < 0) {
    throw new TypeError(`iterationGuidance: 'warnWithin' must be an integer >= 0, got ${String(warnWithin)}`);
  }

  return {
    name: 'iterationGuidance',
    beforeIteration: mapContext((ctx) => {
      const parts: string[] = [];
      if (ctx.iteration === 0) parts.push(firstIteration);
      else parts.push(checked('afterTools', afterTools(turnToolResultCount(ctx))));
      const remaining = maxIterations - ctx.iteration;
      if (remaining <= warnWithin) parts.push(checked('warning', warning(remaining)));
      let text = ctx.instructions ?? '';
      for (const part of parts) {
        if (part === '') continue;
        text = text === '' ? part : `${text}\n\n${part}`;
      }
      return text === (ctx.instructions ?? '') ? ctx : ctx.with({ instructions: text });
    }),
  };
}

function checked(option: string, value: unknown): string {
  if (typeof value !== 'string') {
    throw new TypeError(`iterationGuidance: '${option}' must return a string, got ${typeof value}`);
  }
  return value;
}

/** Tool results in this turn's messages so far. */
function turnToolResultCount(ctx: IterationContext): number {
  let count = 0;
  for (const message of ctx.turnMessages) {
    for (const part of message.content) if (part.type === 'tool-result') count++;
  }
  return count;
}
