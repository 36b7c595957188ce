import { Observable, concatMap, defer, map, of } from 'rxjs';
import { textMessage } from '../messages/message';
import { IterationContext } from '../middleware/contexts';
import { runPhase } from '../middleware/runPhase';
import { addUsage, type LoopState } from '../state/loopState';
import { callModel } from './callModel';
import type { CompiledAgent } from './compileAgent';
import { runTools } from './runTools';
import type { RunScopeImpl } from './runScopeImpl';

/**
 * One iteration: beforeIteration, the model call (wrapped), the tools, afterIteration.
 * Yields the next loop state, `done` when the turn is over.
 */
export function runIteration(scope: RunScopeImpl, agent: CompiledAgent, state: LoopState): Observable<LoopState> {
  return defer(() => {
    scope.send({ type: 'iteration-start', runId: scope.runId, iteration: state.iteration });
    return runPhase(new IterationContext(scope, state), agent.hooks.beforeIteration, 'beforeIteration');
  }).pipe(
    concatMap((ctx) => (ctx.termination || ctx.response ? of(ctx) : callModel(scope, agent, ctx))),
    concatMap((ctx) => (ctx.termination ? of(ctx) : runTools(scope, agent, ctx))),
    concatMap((ctx) => runPhase(ctx, agent.hooks.afterIteration, 'afterIteration')),
    map((ctx) => endIteration(scope, agent, ctx)),
  );
}

function endIteration(scope: RunScopeImpl, agent: CompiledAgent, ctx: IterationContext): LoopState {
  const iteration = ctx.iteration;
  let loop: LoopState = { ...ctx.loop, iteration: iteration + 1, usage: addUsage(ctx.loop.usage, ctx.usage) };
  if (ctx.termination) {
    loop = terminateLoop(loop, ctx.termination.reason);
  } else if (ctx.final) {
    loop = { ...loop, done: true, endReason: 'completed' };
  } else if (iteration + 1 >= agent.maxIterations) {
    loop = { ...loop, done: true, endReason: 'max-iterations' };
  }
  scope.send(
    ctx.usage
      ? { type: 'iteration-end', runId: scope.runId, iteration, usage: ctx.usage }
      : { type: 'iteration-end', runId: scope.runId, iteration },
  );
  return loop;
}

/** Ends the loop with `reason` as the final assistant message. */
export function terminateLoop(loop: LoopState, reason: string): LoopState {
  return {
    ...loop,
    log: loop.log.append(textMessage('assistant', reason)),
    done: true,
    endReason: 'terminated',
    terminationReason: reason,
  };
}
