import { Observable, of, type MonoTypeOperatorFunction, type OperatorFunction, type Subscription } from 'rxjs';
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

/**
 * Runs one phase: `of(ctx).pipe(hook1, hook2, …)`, checking after each hook that it emitted
 * exactly one context. A hook that throws, errors, or emits zero or several contexts fails the
 * phase with a {@link HookFailure} that names the middleware.
 */
export function runPhase<C>(ctx: C, hooks: readonly PhaseHook<C>[], phase: PhaseName): Observable<C> {
  if (hooks.length === 0) return of(ctx);
  let stream: Observable<C> = of(ctx);
  for (const { middleware, hook } of hooks) stream = stream.pipe(applyHook(hook, middleware, phase));
  return stream;
}

function applyHook<C>(hook: MonoTypeOperatorFunction<C>, middleware: string, phase: string): OperatorFunction<C, C> {
  return (source) =>
    new Observable<C>((subscriber) => {
      let count = 0;
      let last: C | undefined;
      const fail = (error: unknown) => subscriber.error(new HookFailure(error, middleware, phase));
      let output: Observable<C>;
      try {
        output = hook(source);
      } catch (error) {
        fail(error);
        return;
      }
      if (!output || typeof (output as Observable<C>).subscribe !== 'function') {
        fail(new MiddlewareError(middleware, phase, `Middleware '${middleware}' ${phase} is not an operator: it returned ${String(output)}`));
        return;
      }
      return output.subscribe({
        next: (value) => {
          count++;
          last = value;
        },
        // An earlier hook's failure passes through this hook unchanged, still naming its middleware.
        error: (error) => (error instanceof HookFailure ? subscriber.error(error) : fail(error)),
        complete: () => {
          if (count === 1) {
            subscriber.next(last as C);
            subscriber.complete();
          } else {
            fail(
              new MiddlewareError(
                middleware,
                phase,
                `Middleware '${middleware}' ${phase} emitted ${count} contexts; a phase hook must emit exactly one`,
              ),
            );
          }
        },
      });
    });
}

/** Where a continuation-style step belongs: the subscription that tears it down, and its failure path. */
export interface StepOwner {
  readonly subscription: Subscription;
  fail(error: unknown): void;
}

/**
 * Runs a phase and continues with `next(ctx)`. With no hooks it continues at once, with no
 * Observable at all (the common case on the hot loop); otherwise the phase's subscription is
 * held by `owner` until it settles. An exception thrown by `next` fails the owner.
 */
export function phaseThen<C>(ctx: C, hooks: readonly PhaseHook<C>[], phase: PhaseName, owner: StepOwner, next: (ctx: C) => void): void {
  if (hooks.length === 0) {
    continueWith(owner, next, ctx);
    return;
  }
  let result: C;
  let subscription: Subscription | undefined;
  subscription = runPhase(ctx, hooks, phase).subscribe({
    next: (value) => (result = value),
    error: (error) => owner.fail(error),
    complete: () => {
      if (subscription) owner.subscription.remove(subscription);
      continueWith(owner, next, result);
    },
  });
  if (!subscription.closed) owner.subscription.add(subscription);
  else subscription = undefined;
}

/** Calls a continuation, turning an exception into the owner's failure. */
export function continueWith<T>(owner: StepOwner, next: (value: T) => void, value: T): void {
  try {
    next(value);
  } catch (error) {
    owner.fail(error);
  }
}
