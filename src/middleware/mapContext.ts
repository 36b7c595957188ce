import { map, type MonoTypeOperatorFunction } from 'rxjs';

const PROJECTION = Symbol.for('rx-agent.mapContext');

/**
 * A phase hook that maps the context synchronously: rxjs `map(project)`, and in any `pipe` it is
 * exactly that. The runner recognises it and calls `project` directly, with no subscription, which
 * is what makes it the cheap way to write a synchronous hook (a phase runs on every iteration). A
 * `project` that throws fails the phase with the middleware named, as `map` would.
 *
 * @example
 * const stamp: AgentMiddleware = {
 *   name: 'stamp',
 *   beforeIteration: mapContext((ctx) => ctx.updateState(LastIteration, () => ({ n: ctx.iteration }))),
 * };
 */
export function mapContext<C>(project: (ctx: C) => C): MonoTypeOperatorFunction<C> {
  const operator = map((ctx: C) => project(ctx));
  Object.defineProperty(operator, PROJECTION, { value: project });
  return operator;
}

/** @internal The projection of a hook made by {@link mapContext}, if it is one. */
export function projectionOf<C>(hook: MonoTypeOperatorFunction<C>): ((ctx: C) => C) | undefined {
  return (hook as { [PROJECTION]?: (ctx: C) => C })[PROJECTION];
}
