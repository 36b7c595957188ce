import { of, type MonoTypeOperatorFunction, type Observable, type Subscription } from 'rxjs';
import { HookFailure, MiddlewareError, type AgentMiddleware, type PhaseName } from './types';

/** One middleware's hook for a phase, with the middleware's name for error messages. */
export interface PhaseHook<C> {
  readonly middleware: string;
  readonly hook: MonoTypeOperatorFunction<C>;
}

/**
 * The hooks of `phase`, in the order they run: registration order for before* hooks,
 * reverse order for after* hooks and onError.
 */
export function hooksOf<C>(middleware: readonly AgentMiddleware[], phase: PhaseName): PhaseHook<C>[] {
  const hooks: PhaseHook<C>[] = [];
  for (const m of middleware) {
    const hook = m[phase] as MonoTypeOperatorFunction<C> | undefined;
    if (hook) hooks.push({ middleware: m.name, hook });
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
 * emitted exactly one context. With no hooks it continues at once, with no Observable at all (the
 * common case on the hot loop); a hook still running is held by `owner` until it settles. A hook
 * that throws, errors or emits other than one context fails the owner with a {@link HookFailure}
 * naming the middleware; an exception thrown by `next` fails the owner too.
 */
export function phaseThen<C>(ctx: C, hooks: readonly PhaseHook<C>[], phase: PhaseName, owner: StepOwner, next: (ctx: C) => void): void {
  runHooksFrom(0, ctx, hooks, phase, owner, next);
}

function runHooksFrom<C>(index: number, ctx: C, hooks: readonly PhaseHook<C>[], phase: PhaseName, owner: StepOwner, next: (ctx: C) => void): void {
  if (index === hooks.length) return continueWith(owner, next, ctx);
  const { hook, middleware } = hooks[index];
  const fail = (error: unknown) => owner.fail(error instanceof HookFailure ? error : new HookFailure(error, middleware, phase));
  let output: Observable<C>;
  try {
    output = hook(of(ctx));
  } catch (error) {
    return fail(error);
  }
  if (!output || typeof output.subscribe !== 'function') {
    return fail(new MiddlewareError(middleware, phase, `Middleware '${middleware}' ${phase} is not an operator: it returned ${String(output)}`));
  }
  let count = 0;
  let result: C;
  let subscription: Subscription | undefined;
  const release = () => subscription && owner.subscription.remove(subscription);
  subscription = output.subscribe({
    next: (value) => {
      count++;
      result = value;
    },
    error: (error) => {
      release();
      fail(error);
    },
    complete: () => {
      release();
      if (count === 1) runHooksFrom(index + 1, result, hooks, phase, owner, next);
      else fail(new MiddlewareError(middleware, phase, `Middleware '${middleware}' ${phase} emitted ${count} contexts; a phase hook must emit exactly one`));
    },
  });
  if (!subscription.closed) owner.subscription.add(subscription);
}

/** Calls a continuation, turning an exception into the owner's failure. */
export function continueWith<T>(owner: StepOwner, next: (value: T) => void, value: T): void {
  try {
    next(value);
  } catch (error) {
    owner.fail(error);
  }
}
