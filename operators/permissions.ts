import type { Observable, SchedulerLike } from 'rxjs';
import { z } from 'zod';
import { decideOrAsk } from './internal/decideOrAsk';
import { defineState, type AgentMiddleware, type AgentResponse, type FunctionContext } from '../src/index';
import { checkOptions, checkScheduler, optionNames } from './internal/checkOptions';
import { checkTimeoutMs } from '../src/internal/timers';
import { ownField } from '../src/internal/ownField';

/** What happens to a call of a tool: ask a person, run it, or refuse it. */
export type PermissionPolicy = 'ask' | 'allow' | 'deny';

/** Options of {@link permissions}. */
export interface PermissionsOptions {
  /** A policy per tool name; overrides the tool's own `needsApproval`. */
  tools?: Readonly<Record<string, PermissionPolicy>>;
  /** How long to wait for an answer, in ms on the scheduler (default 300000; `Infinity`: no limit). */
  timeout?: number;
  /** Runs the timeout (default: the run's scheduler). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link PermissionsOptions}: any other is refused. */
const OPTIONS = optionNames<PermissionsOptions>({ tools: true, timeout: true, scheduler: true });

/** Choices remembered per tool name for the session (`'always'` allows, `'never'` denies). */
const Remembered = defineState({
  key: 'rx-agent.permissions.remembered',
  schema: z.record(z.string(), z.enum(['always', 'never'])),
  initial: (): Record<string, 'always' | 'never'> => ({}),
  scope: 'session',
});

const TIMED_OUT: unique symbol = Symbol('timed out');
const POLICIES: readonly string[] = ['ask', 'allow', 'deny'];

/** The result the model reads for a denied call. */
export function permissionDeniedMessage(toolName: string, reason: string): string {
  return `Permission denied for '${toolName}': ${reason}`;
}

/**
 * Tool approval. Before each call, its policy is: a remembered choice for the tool in this
 * session, else `tools[name]` if given, else `'ask'` when the tool was defined with
 * `needsApproval: true` (or a predicate that does not return `false` for these arguments: a
 * predicate that throws, or an async one's Promise, asks too, so a mistake fails closed; the rest
 * of the batch goes on), else `'allow'`.
 *
 * `'ask'` emits `permission-request { requestId, callId, toolName, args, description }`
 * (`description`: the tool's) and waits for `permission-response { requestId, approved, remember?, reason? }`.
 * `remember: 'always'` / `'never'` is kept in session state: later calls of that tool in the
 * session are allowed / denied without asking (the call asked about follows `approved`; a
 * response of another type with the same id counts as a denial). A denied call does not run: it gets the error
 * result `Permission denied for '<tool>': <reason>` (reason: the response's `reason`, else
 * `denied by user`; `denied by policy`; `denied (remembered)`; `timed out`), its `tool-result` event carries `denied: true` and that
 * `reason`, and the rest of
 * the batch still runs. The questions of a parallel batch are asked one after another in the
 * model's order (the runtime runs `beforeFunction` sequentially), so a choice remembered for one
 * call already applies to the next. A run cancelled while waiting ends with `request-expired`
 * (reason `cancelled`) and `run-end` reason `cancelled`.
 *
 * Options (defaults): `tools` (none: the tools' `needsApproval` decides), `timeout` ms (300000),
 * `scheduler` (the run's).
 *
 * @example
 * const deleteFile = defineTool({ name: 'delete_file', description: 'Deletes a file', needsApproval: true, parameters, execute });
 * const agent = createAgent({ model, tools: [deleteFile, readFile], middleware: [permissions({ tools: { shell: 'deny' } })] });
 * const run = agent.start('Clean up /tmp');
 * run.events$.pipe(ofType('permission-request')).subscribe((r) =>
 *   run.respond({ type: 'permission-response', requestId: r.requestId, approved: confirm(`Run ${r.toolName}?`), remember: 'always' }));
 */
export function permissions(options: PermissionsOptions = {}): AgentMiddleware {
  checkOptions('permissions', options, OPTIONS);
  const { tools = {}, timeout = 300000, scheduler } = options;
  if (tools === null || typeof tools !== 'object' || Array.isArray(tools)) {
    throw new TypeError("permissions: 'tools' must be an object mapping tool names to 'ask', 'allow' or 'deny'");
  }
  for (const [name, policy] of Object.entries(tools)) {
    if (!POLICIES.includes(policy)) {
      throw new TypeError(`permissions: 'tools.${name}' must be 'ask', 'allow' or 'deny', got ${JSON.stringify(policy)}`);
    }
  }
  checkTimeoutMs('permissions', 'timeout', timeout); // a longer timer would fire at once: the request would expire as it is asked
  checkScheduler('permissions', scheduler);
  const policies = new Map<string, PermissionPolicy>(Object.entries(tools));

  const policyOf = (ctx: FunctionContext): PermissionPolicy => {
    const given = policies.get(ctx.toolName);
    if (given) return given;
    const needsApproval = ctx.tool.needsApproval;
    if (needsApproval === true) return 'ask';
    if (typeof needsApproval === 'function') return predicateAllows(needsApproval, ctx.args) ? 'allow' : 'ask';
    return 'allow';
  };

  const deny = (ctx: FunctionContext, reason: string) => ctx.block(permissionDeniedMessage(ctx.toolName, reason), { isError: true, denied: reason });

  /** The context after the answer (or the timeout) to the question about `ctx`. */
  const answered = (ctx: FunctionContext, response: AgentResponse | typeof TIMED_OUT): FunctionContext => {
    if (response === TIMED_OUT) return deny(ctx, 'timed out');
    // Own properties only: an answer that merely inherits `approved: true` approves nothing.
    const isPermission = ownField(response, 'type') === 'permission-response';
    const given = isPermission ? ownField(response, 'remember') : undefined;
    const remember: 'always' | 'never' | undefined = given === 'always' || given === 'never' ? given : undefined;
    const next = remember ? ctx.updateState(Remembered, (r) => ({ ...r, [ctx.toolName]: remember })) : ctx;
    if (isPermission && ownField(response, 'approved') === true) return next;
    const said = isPermission ? ownField(response, 'reason') : undefined;
    const reason = typeof said === 'string' && said !== '' ? said : 'denied by user';
    return deny(next, reason);
  };

  /** The context at once, or undefined when a person must be asked. */
  const decide = (ctx: FunctionContext): FunctionContext | undefined => {
    if (ctx.blocked) return ctx;
    const remembered = ctx.state(Remembered)[ctx.toolName];
    if (remembered === 'always') return ctx;
    if (remembered === 'never') return deny(ctx, 'denied (remembered)');
    const policy = policyOf(ctx);
    if (policy === 'allow') return ctx;
    if (policy === 'deny') return deny(ctx, 'denied by policy');
    return undefined;
  };

  return {
    name: 'permissions',
    beforeFunction: decideOrAsk(decide, (ctx) => askWithTimeout(ctx, timeout, scheduler), answered),
  };
}

/**
 * Whether a `needsApproval` predicate lets the call run unasked. Only its `false` does: anything
 * else asks, so a mistake fails closed. A missing return, a Promise (an async predicate's, never
 * awaited: the call asks whatever it settles to, and its rejection is handled here rather than
 * left unhandled) and a throw all ask, for this call only: the throw does not fail the phase,
 * so the rest of the batch is decided as usual.
 */
function predicateAllows(predicate: (args: unknown) => unknown, args: unknown): boolean {
  try {
    const answer = predicate(args);
    if (answer === false) return true;
    if (typeof (answer as PromiseLike<unknown> | null | undefined)?.then === 'function') Promise.resolve(answer).catch(ignore);
    return false;
  } catch {
    return false; // a predicate that throws asks
  }
}

const ignore = (): void => undefined;

/** The request, timed by `ctx.request` on the given scheduler (default: the run's). */
function askWithTimeout(ctx: FunctionContext, ms: number, scheduler: SchedulerLike | undefined): Observable<AgentResponse | typeof TIMED_OUT> {
  const event = {
    type: 'permission-request',
    callId: ctx.callId,
    toolName: ctx.toolName,
    args: ctx.args,
    description: ctx.tool.description,
  } as const;
  return ctx.request(event, { timeout: ms, onTimeout: TIMED_OUT, scheduler });
}
