import { plainObjects } from '../internal/plainObjects';
import type { Usage } from './types';

/** Makes the plain object `{ inputTokens, outputTokens }` (without a literal: see plainObjects). */
export const PlainUsage: new (inputTokens: number, outputTokens: number) => Usage = plainObjects(function (
  this: { inputTokens: number; outputTokens: number },
  inputTokens: number,
  outputTokens: number,
) {
  this.inputTokens = inputTokens;
  this.outputTokens = outputTokens;
});
