import { z } from 'zod';
import { mapContext, defineState, type AgentMiddleware } from '../src/index';
import { uniqueId } from '../src/internal/uniqueId';
import { checkNestedOptionNames, checkOptionNames, checkOptionsObject, optionNames } from './internal/checkOptions';

/** Options of {@link costBudget}. */
export interface CostBudgetOptions {
  /** The run stops before a model call once its cost reached this amount (required, >= 0). */
  maxCost: number;
  /** Price per input (prompt) token and per output (completion) token (required, each >= 0). */
  pricing: { inputPerToken: number; outputPerToken: number };
}

/** The keys of {@link CostBudgetOptions}: any other is refused. */
const OPTIONS = optionNames<CostBudgetOptions>({ maxCost: true, pricing: true });

/** The keys of `pricing`: any other is refused. */
const PRICING_OPTIONS = optionNames<CostBudgetOptions['pricing']>({ inputPerToken: true, outputPerToken: true });

/** Spent within this fraction of `maxCost` counts as reached: a sum of prices is not exact in floating point. */
const BUDGET_TOLERANCE = 1e-9;

/** The termination message: `Budget exhausted: $<spent> / $<max>`, both with 4 decimals. */
export function budgetExhaustedMessage(spent: number, max: number): string {
  return `Budget exhausted: $${spent.toFixed(4)} / $${max.toFixed(4)}`;
}

/**
 * A cost budget for a run. After each model call it prices the call's usage —
 * `inputTokens * inputPerToken + outputTokens * outputPerToken` (a call that reported no usage
 * costs 0) — adds it to the run's total and emits
 * `cost-recorded { inputTokens, outputTokens, cost, totalCost }`. Before a model call, when the
 * total has reached `maxCost` (`totalCost >= maxCost`), there is no call and the run terminates
 * with `Budget exhausted: $<spent> / $<max>` (4 decimals, e.g. `Budget exhausted: $0.0150 / $0.0100`).
 *
 * The total is run state (every run starts at 0). Iterations without a model call (skipped by
 * another middleware, e.g. a `responseCache` hit, or terminated before it) record nothing. As
 * the check comes before a call, the call that crosses the budget still completes: the total may
 * end above `maxCost`. The total is computed from the run's token totals, and a total within a
 * billionth of `maxCost` counts as reached (ten calls at $0.10 reach $1.00). Each instance keeps
 * its own total, so two budgets on one agent each price every call.
 *
 * Options: `maxCost` (required), `pricing: { inputPerToken, outputPerToken }` (required).
 *
 * @example
 * // gpt-4o-mini: $0.15 / 1M input tokens, $0.60 / 1M output tokens; at most 5 cents a run.
 * const agent = createAgent({
 *   model,
 *   middleware: [costBudget({ maxCost: 0.05, pricing: { inputPerToken: 0.15e-6, outputPerToken: 0.6e-6 } })],
 * });
 * agent.run('Summarise this book').pipe(ofType('cost-recorded')).subscribe((e) => console.log(e.totalCost));
 */
export function costBudget(options: CostBudgetOptions): AgentMiddleware {
  checkOptionsObject('costBudget', options, "with 'maxCost' and 'pricing'");
  checkOptionNames('costBudget', options, OPTIONS);
  const { maxCost, pricing } = options;
  if (typeof maxCost !== 'number' || Number.isNaN(maxCost) || maxCost < 0) {
    throw new TypeError(`costBudget: 'maxCost' must be a number >= 0, got ${String(maxCost)}`);
  }
  if (pricing === null || typeof pricing !== 'object') {
    throw new TypeError("costBudget: 'pricing' must be an object { inputPerToken, outputPerToken }");
  }
  checkNestedOptionNames('costBudget', 'pricing', pricing, PRICING_OPTIONS);
  const { inputPerToken, outputPerToken } = pricing;
  for (const [name, value] of [
    ['inputPerToken', inputPerToken],
    ['outputPerToken', outputPerToken],
  ] as const) {
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
      throw new TypeError(`costBudget: 'pricing.${name}' must be a finite number >= 0, got ${String(value)}`);
    }
  }

  // The tokens of the run so far (run state, this instance's own: two budgets each count every call,
  // one budget registered twice counts a call once). A unique key, not a module counter: the ESM
  // and CJS builds of the package may both be loaded.
  const Spent = defineState({
    key: uniqueId('rx-agent.costBudget.spent'),
    schema: z.object({ inputTokens: z.number(), outputTokens: z.number(), countedIteration: z.number() }),
    initial: () => ({ inputTokens: 0, outputTokens: 0, countedIteration: -1 }),
    scope: 'run',
  });
  const reached = maxCost - maxCost * BUDGET_TOLERANCE;
  // The total from the token totals (one rounding) rather than a running sum of prices.
  const totalOf = ({ inputTokens, outputTokens }: { inputTokens: number; outputTokens: number }) => inputTokens * inputPerToken + outputTokens * outputPerToken;

  return {
    name: 'costBudget',
    beforeIteration: mapContext((ctx) => {
      if (ctx.termination || ctx.response) return ctx;
      const totalCost = totalOf(ctx.state(Spent));
      return totalCost >= reached ? ctx.terminate(budgetExhaustedMessage(totalCost, maxCost)) : ctx;
    }),
    afterIteration: mapContext((ctx) => {
      // No model call in this iteration: skipped (response given) or terminated before it.
      if (!ctx.response || ctx.modelCallSkipped || ctx.state(Spent).countedIteration === ctx.iteration) return ctx;
      const inputTokens = ctx.usage?.inputTokens ?? 0;
      const outputTokens = ctx.usage?.outputTokens ?? 0;
      const cost = totalOf({ inputTokens, outputTokens });
      const next = ctx.updateState(Spent, (s) => ({
        inputTokens: s.inputTokens + inputTokens,
        outputTokens: s.outputTokens + outputTokens,
        countedIteration: ctx.iteration,
      }));
      ctx.emit({ type: 'cost-recorded', inputTokens, outputTokens, cost, totalCost: totalOf(next.state(Spent)) });
      return next;
    }),
  };
}
