import type { Observable, SchedulerLike } from 'rxjs';
import { z } from 'zod';
import { decideOrAsk } from './internal/decideOrAsk';
import { defineState, type AgentMiddleware, type AgentResponse, type IterationContext } from '../src/index';
import { checkOptions, checkScheduler, optionNames } from './internal/checkOptions';
import { checkTimeoutMs } from '../src/internal/timers';
import { ownField } from '../src/internal/ownField';

/** The text the run terminates with when a continuation is denied or times out. */
export const CONTINUATION_DENIED_MESSAGE = 'Execution terminated: maximum iteration limit reached.';

/** Options of {@link continuationPermission}. */
export interface ContinuationPermissionOptions {
  /** Model calls allowed before the first question (default 20). */
  maxIterations?: number;
  /** Model calls an approval adds when the response gives no `extension` (default 3). */
  extensionAmount?: number;
  /** How long to wait for the answer, in ms on the scheduler (default 120000; `Infinity`: no limit). */
  timeout?: number;
  /** Runs the timeout (default: the run's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link ContinuationPermissionOptions}: any other is refused. */
const OPTIONS = optionNames<ContinuationPermissionOptions>({ maxIterations: true, extensionAmount: true, timeout: true, scheduler: true });

/** Model calls granted on top of `maxIterations` in this run (run state). */
const Granted = defineState({
  key: 'rx-agent.continuationPermission.granted',
  schema: z.number().int().nonnegative(),
  initial: () => 0,
  scope: 'run',
});

const TIMED_OUT: unique symbol = Symbol('timed out');

/**
 * Asks a person before the run goes past an iteration limit. Before the model call of
 * iteration `i` (0-based), when `i >= limit` (so after `limit` model calls), it emits
 * `continuation-request { requestId, iteration: i, limit }` and waits for
 * `continuation-response { requestId, approved, extension? }`:
 * - approved: `limit += extension` (a positive integer) or `extensionAmount`, and the call goes ahead;
 * - denied (a response of another type with the same id counts as a denial), or no answer within `timeout` (a `request-expired` event, reason `timeout`): no model
 *   call, the run terminates with `Execution terminated: maximum iteration limit reached.`
 *
 * The limit is run state (it starts at `maxIterations` in every run). The agent's own
 * `maxIterations` stays the hard ceiling, so set it higher (e.g. `Infinity`). A run cancelled
 * while waiting ends with `request-expired` (reason `cancelled`) and `run-end` reason `cancelled`.
 *
 * Options (defaults): `maxIterations` (20), `extensionAmount` (3), `timeout` ms (120000),
 * `scheduler` (the run's).
 *
 * @example
 * const agent = createAgent({
 *   model, tools, maxIterations: Infinity,
 *   middleware: [continuationPermission({ maxIterations: 10, extensionAmount: 5 })],
 * });
 * const run = agent.start('Research this');
 * run.events$.pipe(ofType('continuation-request')).subscribe((r) =>
 *   run.respond({ type: 'continuation-response', requestId: r.requestId, approved: confirm('Continue?') }));
 */
export function continuationPermission(options: ContinuationPermissionOptions = {}): AgentMiddleware {
  checkOptions('continuationPermission', options, OPTIONS);
  const { maxIterations = 20, extensionAmount = 3, timeout = 120000, scheduler } = options;
  if (!Number.isInteger(maxIterations) || maxIterations < 1) {
    throw new TypeError(`continuationPermission: 'maxIterations' must be a positive integer, got ${String(maxIterations)}`);
  }
  if (!Number.isInteger(extensionAmount) || extensionAmount < 1) {
    throw new TypeError(`continuationPermission: 'extensionAmount' must be a positive integer, got ${String(extensionAmount)}`);
  }
  checkTimeoutMs('continuationPermission', 'timeout', timeout); // a longer timer would fire at once: the request would expire as it is asked
  checkScheduler('continuationPermission', scheduler);

  const limitOf = (ctx: IterationContext) => maxIterations + ctx.state(Granted);
  const answered = (ctx: IterationContext, response: AgentResponse | typeof TIMED_OUT): IterationContext => {
    if (response === TIMED_OUT || !isApproval(response)) return ctx.terminate(CONTINUATION_DENIED_MESSAGE);
    const extension = ownField(response, 'extension');
    const added = Number.isInteger(extension) && (extension as number) >= 1 ? (extension as number) : extensionAmount;
    return ctx.updateState(Granted, (granted) => granted + added);
  };

  return {
    name: 'continuationPermission',
    beforeIteration: decideOrAsk(
      (ctx) => (ctx.termination || ctx.response || ctx.iteration < limitOf(ctx) ? ctx : undefined),
      (ctx) => askWithTimeout(ctx, limitOf(ctx), timeout, scheduler),
      answered,
    ),
  };
}

/** The request, timed by `ctx.request` on the given scheduler (default: the run's). */
function askWithTimeout(ctx: IterationContext, limit: number, ms: number, scheduler: SchedulerLike | undefined): Observable<AgentResponse | typeof TIMED_OUT> {
  const event = { type: 'continuation-request', iteration: ctx.iteration, limit } as const;
  return ctx.request(event, { timeout: ms, onTimeout: TIMED_OUT, scheduler });
}

/** Own properties only: an answer that merely inherits `approved: true` approves nothing. */
function isApproval(response: AgentResponse): boolean {
  return ownField(response, 'type') === 'continuation-response' && ownField(response, 'approved') === true;
}
