import { Observable, Subscriber, type MonoTypeOperatorFunction, type Subscription } from 'rxjs';
import { LinkedSubscriber } from '../internal/linkedSubscriber';
import { unsubscribeQuietly } from '../internal/unsubscribeQuietly';
import { projectionOf } from './mapContext';
import { HookFailure, type AgentMiddleware, type PhaseName } from './types';
import { isSubscribable } from '../internal/isSubscribable';
import { show } from '../internal/show';

/** One middleware's hook for a phase, with the middleware's name for error messages. */
export interface PhaseHook<C> {
  readonly middleware: string;
  readonly hook: MonoTypeOperatorFunction<C>;
  /** The hook's projection when it was made by `mapContext`: called directly, not subscribed to. */
  readonly project: ((ctx: C) => C) | undefined;
}

/**
 * The hooks of `phase`, in the order they run: registration order for before* hooks,
 * reverse order for after* hooks and onError.
 */
export function hooksOf<C>(middleware: readonly AgentMiddleware[], phase: PhaseName): PhaseHook<C>[] {
  const hooks: PhaseHook<C>[] = [];
  for (const m of middleware) {
    const hook = m[phase] as MonoTypeOperatorFunction<C> | undefined;
    if (hook) hooks.push({ middleware: m.name, hook, project: projectionOf(hook) });
  }
  return phase.startsWith('after') || phase === 'onError' ? hooks.reverse() : hooks;
}

/** Where a continuation-style step belongs: the subscription that tears it down, and its failure path. */
export interface StepOwner {
  readonly subscription: Subscription;
  fail(error: unknown): void;
}

/**
 * Runs a phase and continues with `next(ctx)`: each hook in turn over `of(ctx)`, checking that it
 * emitted exactly one context; a `mapContext` hook's projection is called directly. With no hooks
 * it continues at once, with no Observable at all (the common case on the hot loop); a hook still
 * running is held by `owner` until it settles. A hook that throws, errors or emits other than one
 * context fails the owner with a {@link HookFailure} naming the middleware; an exception thrown by
 * `next` fails the owner too. Once the owner is closed (the run cancelled), no further hook runs.
 */
export function phaseThen<C>(ctx: C, hooks: readonly PhaseHook<C>[], phase: PhaseName, owner: StepOwner, next: (ctx: C) => void): void {
  runHooksFrom(0, ctx, hooks, phase, owner, next);
}

function runHooksFrom<C>(index: number, ctx: C, hooks: readonly PhaseHook<C>[], phase: PhaseName, owner: StepOwner, next: (ctx: C) => void): void {
  for (; index < hooks.length; index++) {
    // Cancelled or unsubscribed by the hook before: no further hook runs.
    if (owner.subscription.closed) return;
    const { project, middleware } = hooks[index];
    if (project === undefined) return subscribeHook(index, ctx, hooks, phase, owner, next);
    let out: C;
    try {
      out = project(ctx);
    } catch (error) {
      return owner.fail(new HookFailure(error, middleware, phase));
    }
    if (!sameKind(out, ctx)) return owner.fail(notAContext(out, middleware, phase));
    ctx = out;
  }
  continueWith(owner, next, ctx);
}

/** Whether a hook's output is a context of the kind it was given (the same class). */
function sameKind(out: unknown, given: unknown): boolean {
  return typeof out === 'object' && out !== null && out.constructor === (given as object).constructor;
}

function notAContext(out: unknown, middleware: string, phase: PhaseName): HookFailure {
  const what = out === null || typeof out !== 'object' ? String(out) : `an instance of ${out.constructor?.name ?? 'no class'}`;
  const message = `Middleware '${middleware}' ${phase} emitted ${what}, not a context`;
  return HookFailure.breach(middleware, phase, message);
}

/**
 * Applies what a wrap hook (`wrapModel`, `wrapFunction`) returned to the stream inside it, held
 * to the contract: an operator that returns an Observable. A breach, or what the operator throws,
 * is the middleware's failure.
 */
export function applyWrapper<T>(operator: unknown, inner: Observable<T>, middleware: string, phase: WrapPhase): Observable<T> {
  checkOperator(operator, middleware, phase);
  let stream: unknown;
  try {
    stream = operator(inner);
  } catch (error) {
    throw new HookFailure(error, middleware, phase);
  }
  if (!isSubscribable(stream)) {
    throw HookFailure.breach(middleware, phase, `Middleware '${middleware}' ${phase}'s operator returned ${show(stream)}, not an Observable`);
  }
  return stream as Observable<T>;
}

type WrapPhase = 'wrapModel' | 'wrapFunction';

/** Throws the middleware's failure unless what its wrap hook returned is an operator (a function). */
export function checkOperator(operator: unknown, middleware: string, phase: WrapPhase): asserts operator is (source: Observable<unknown>) => unknown {
  if (typeof operator !== 'function') {
    throw HookFailure.breach(middleware, phase, `Middleware '${middleware}' ${phase} is not an operator: it returned ${show(operator)}`);
  }
}

/** Runs hook `index` over `of(ctx)`; {@link HookRun} goes on with the next hook once it settles. */
function subscribeHook<C>(index: number, ctx: C, hooks: readonly PhaseHook<C>[], phase: PhaseName, owner: StepOwner, next: (ctx: C) => void): void {
  const { hook, middleware } = hooks[index];
  let output: Observable<C>;
  try {
    output = hook(new Just(ctx));
  } catch (error) {
    return owner.fail(new HookFailure(error, middleware, phase));
  }
  if (!isSubscribable(output)) {
    const message = `Middleware '${middleware}' ${phase} is not an operator: it returned ${String(output)}`;
    return owner.fail(HookFailure.breach(middleware, phase, message));
  }
  const run = new HookRun(index, ctx, hooks, phase, owner, next);
  output.subscribe(run);
  if (!run.closed) run.holdBy(owner.subscription);
}

/**
 * `of(value)` for one value: what a phase hook receives. A class of its own because it is made
 * for every hook on every iteration, and `of` costs an argument array, a scheduler check and a
 * closure more.
 */
class Just<T> extends Observable<T> {
  constructor(private readonly value: T) {
    super();
  }

  /** @internal rxjs 7's subscribe calls `_subscribe` (as Subject's own override does). */
  protected _subscribe(subscriber: Subscriber<T>): void {
    subscriber.next(this.value);
    subscriber.complete();
  }
}

/**
 * Subscribes to one hook's output: counts the contexts it emits and, when it completes with
 * exactly one, runs the next hook. A Subscriber of its own, so rxjs adds no observer wrapper.
 */
class HookRun<C> extends LinkedSubscriber<C> {
  private count = 0;
  private result: C | undefined = undefined;
  /** The owner's subscription, once the hook did not settle during subscribe. */
  private heldBy: Subscription | undefined = undefined;

  constructor(
    private readonly index: number,
    /** What the hook was given (its output must be of the same kind). */
    private readonly given: C,
    private readonly hooks: readonly PhaseHook<C>[],
    private readonly phase: PhaseName,
    private readonly owner: StepOwner,
    private readonly then: (ctx: C) => void,
  ) {
    super();
  }

  override next(value: C): void {
    if (this.isStopped) return;
    this.count++;
    this.result = value;
    if (this.count === 2) {
      this.isStopped = true;
      this.wrongCount();
      this.settle();
    }
  }

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.isStopped = true;
    const { middleware } = this.hooks[this.index];
    // The owner fails before the hook is torn down: what the teardown closes (a request the hook
    // waits for) ends with the run, and the hook's own error is the one reported.
    this.owner.fail(new HookFailure(error, middleware, this.phase));
    this.settle();
  }

  override complete(): void {
    if (this.isStopped) return;
    const teardownError = this.settle();
    const { index, hooks, phase, owner } = this;
    const { middleware } = hooks[index];
    if (teardownError !== undefined) return owner.fail(new HookFailure(teardownError, middleware, phase));
    if (this.count === 1) {
      if (!sameKind(this.result, this.given)) return owner.fail(notAContext(this.result, middleware, phase));
      return runHooksFrom(index + 1, this.result as C, hooks, phase, owner, this.then);
    }
    this.wrongCount();
  }

  /** Not exactly one context: none at completion, or a second one (reported at once: the hook may never complete). */
  private wrongCount(): void {
    const { middleware } = this.hooks[this.index];
    const message = `Middleware '${middleware}' ${this.phase} emitted ${this.count} contexts; a phase hook must emit exactly one`;
    this.owner.fail(HookFailure.breach(middleware, this.phase, message));
  }

  /** A hook still running when subscribe returned is torn down with its owner. */
  holdBy(subscription: Subscription): void {
    this.heldBy = subscription;
    subscription.add(this);
  }

  /** Ends this subscription; returns what the hook's teardown threw, if anything. */
  private settle(): unknown {
    this.isStopped = true;
    this.heldBy?.remove(this);
    return unsubscribeQuietly(this);
  }
}

/**
 * Calls a continuation, turning an exception into the owner's failure. An owner torn down
 * meanwhile (cancelled or unsubscribed while a synchronous hook, tool or model call ran, before
 * it could be held) continues no further.
 */
export function continueWith<T>(owner: StepOwner, next: (value: T) => void, value: T): void {
  if (owner.subscription.closed) return;
  try {
    next(value);
  } catch (error) {
    owner.fail(error);
  }
}
