import type { MonoTypeOperatorFunction } from 'rxjs';
import type { ModelUpdate } from '../model/types';
import type { StateDef } from '../state/defineState';
import type { Tool } from '../tools/defineTool';
import type { ErrorContext, FunctionContext, FunctionResultContext, IterationContext, ModelCallContext, ToolBatchContext, TurnContext } from './contexts';
import type { RunObserver, RunScope } from './runScope';

/** What a function call produced: the value the model reads, and whether it is an error. */
export interface ToolOutcome {
  readonly result: unknown;
  readonly isError: boolean;
  /**
   * The error `result` stands for, set by the runtime when a call ends with one (afterFunction's
   * `ctx.error`); a wrapper's own outcomes leave it out.
   */
  readonly error?: unknown;
}

/**
 * A middleware: a name and any of the hooks. A phase hook is an operator over a stream of
 * exactly one context and must emit exactly one; a wrap hook is an operator over the inner
 * stream (the model's updates, or one function call's outcome).
 *
 * @example
 * const shout: AgentMiddleware = {
 *   name: 'shout',
 *   beforeIteration: map(ctx => ctx.with({ instructions: (ctx.instructions ?? '') + '\nAnswer in capitals.' })),
 *   wrapFunction: () => timeout(5000),
 * };
 */
export interface AgentMiddleware {
  readonly name: string;
  /** Tools this middleware adds to every turn (for example `activate_skill`). */
  readonly tools?: readonly Tool[];
  /**
   * The state definitions this middleware keeps. A run may start those defined with
   * `shared: true` from values of its own (`run(input, { state: { [key]: value } })`, the
   * state an AG-UI client sends); the others are the middleware's alone.
   *
   * @example
   * const cart: AgentMiddleware = {
   *   name: 'cart',
   *   state: [Cart], // defined with shared: true: run(input, { state: { [Cart.key]: { items: 2 } } }) starts it at 2
   *   beforeIteration: mapContext((ctx) => ctx.with({ instructions: `The cart holds ${ctx.state(Cart).items} items.` })),
   * };
   */
  readonly state?: readonly StateDef<unknown>[];
  beforeMessageTurn?: MonoTypeOperatorFunction<TurnContext>;
  beforeIteration?: MonoTypeOperatorFunction<IterationContext>;
  wrapModel?: (ctx: ModelCallContext) => MonoTypeOperatorFunction<ModelUpdate>;
  beforeToolExecution?: MonoTypeOperatorFunction<ToolBatchContext>;
  beforeFunction?: MonoTypeOperatorFunction<FunctionContext>;
  wrapFunction?: (ctx: FunctionContext) => MonoTypeOperatorFunction<ToolOutcome>;
  afterFunction?: MonoTypeOperatorFunction<FunctionResultContext>;
  afterIteration?: MonoTypeOperatorFunction<IterationContext>;
  afterMessageTurn?: MonoTypeOperatorFunction<TurnContext>;
  onError?: MonoTypeOperatorFunction<ErrorContext>;
  /** @internal Follows every run from its start, before `run-start` (telemetry). */
  observeRun?: (scope: RunScope) => RunObserver;
}

/** The names of the phase hooks (those that see one context). */
export type PhaseName =
  'beforeMessageTurn' | 'beforeIteration' | 'beforeToolExecution' | 'beforeFunction' | 'afterFunction' | 'afterIteration' | 'afterMessageTurn' | 'onError';

/**
 * A middleware failed: a hook threw, errored, or emitted other than exactly one context.
 * `cause` is the original error when there was one.
 */
export class MiddlewareError extends Error {
  override readonly name = 'MiddlewareError';
  constructor(
    readonly middleware: string,
    readonly phase: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * @internal A middleware's failure on its way to the run's report: the error, and the middleware
 * and hook to name. It travels only the runtime's own failure path (a step owner's `fail`, the
 * iteration loop's error), never a stream a middleware sees: an inner wrapper's failure while
 * `ctx.call()` builds it fails the run there and then (see `ModelCallContext.call`), so no user
 * operator (a `retry()`, a `catchError`) has to tell it from a model's error.
 */
export class HookFailure {
  constructor(
    readonly error: unknown,
    readonly middleware: string,
    readonly phase: string,
  ) {}

  /** A middleware broke the hook contract (no operator, no context, no outcome): a `MiddlewareError` saying so. */
  static breach(middleware: string, phase: string, message: string): HookFailure {
    return new HookFailure(new MiddlewareError(middleware, phase, message), middleware, phase);
  }

  /** What a hook threw, named after its middleware, unless the runtime already named one (a breach found inside it). */
  static of(error: unknown, middleware: string, phase: string): HookFailure {
    return error instanceof HookFailure ? error : new HookFailure(error, middleware, phase);
  }
}
