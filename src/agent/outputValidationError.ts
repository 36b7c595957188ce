import type { z } from 'zod';

/**
 * The model's final answer did not fit the run's output schema (`createAgent({ output })`), after
 * every retry `outputRetries` allows: the run ends with an `error` event carrying it and `run-end`
 * reason `error` (and `invoke()` rejects with it). `issues` are zod's (none when the answer was not
 * JSON at all); `text` is the last answer; `attempts` how many answers were judged.
 *
 * @example
 * agent.invoke('Weather in Paris?').catch((error) => {
 *   if (error instanceof OutputValidationError) console.log(error.issues, error.text);
 * });
 */
export class OutputValidationError extends Error {
  override readonly name = 'OutputValidationError';

  constructor(
    /** What was wrong with the last answer, as the model read it. */
    readonly problem: string,
    readonly issues: readonly z.core.$ZodIssue[],
    readonly text: string,
    readonly attempts: number,
  ) {
    super(`The model's answer does not fit the output schema (${attempts} attempt${attempts === 1 ? '' : 's'}): ${problem}`);
  }
}
