import { Observable, Subscriber, defer } from 'rxjs';
import type { ModelClient, ModelRequest, ModelUpdate } from '../model/types';
import { ResponseAssembler } from '../model/assembleResponse';
import type { IterationContext, ModelCallContext } from '../middleware/contexts';
import { continueWith, type StepOwner } from '../middleware/runPhase';
import { HookFailure } from '../middleware/types';
import type { CompiledAgent } from './compileAgent';
import type { RunScopeImpl } from './runScopeImpl';

/** A model stream's error (after the wrappers), tagged so the run reports source `model`. */
export class ModelFailure {
  constructor(readonly error: unknown) {}
}

/**
 * Calls the model through the `wrapModel` chain (first registered outermost), streams its text
 * to the run's events, and continues with the iteration context holding the assembled response
 * and usage.
 */
export function callModel(owner: StepOwner, scope: RunScopeImpl, agent: CompiledAgent, ctx: IterationContext, done: (ctx: IterationContext) => void): void {
  const assembler = new ResponseAssembler();
  const { iteration } = ctx;
  const wrappers = agent.modelWrappers;

  const chain = (index: number, request: ModelRequest, client: ModelClient): Observable<ModelUpdate> => {
    if (index === wrappers.length) return wrappers.length === 0 ? client(request) : defer(() => client(request));
    const { wrap, middleware } = wrappers[index];
    const callCtx: ModelCallContext = {
      request,
      iteration,
      runId: scope.runId,
      scheduler: scope.scheduler,
      client,
      state: (def) => ctx.state(def),
      emit: (event) => {
        if (event.type === 'model-retry' || event.type === 'model-fallback') assembler.reset();
        scope.emit(event);
      },
      call: (nextRequest, nextClient) => chain(index + 1, nextRequest ?? request, nextClient ?? client),
      discardPartialResponse: () => assembler.reset(),
    };
    let operator;
    try {
      operator = wrap(callCtx);
    } catch (error) {
      throw new HookFailure(error, middleware, 'wrapModel');
    }
    return chain(index + 1, request, client).pipe(operator);
  };

  let stream: Observable<ModelUpdate>;
  try {
    stream = chain(0, ctx.toRequest(), agent.model);
  } catch (error) {
    owner.fail(error instanceof HookFailure ? error : new ModelFailure(error));
    return;
  }
  const sink = new ModelUpdateSink(assembler, scope, iteration, owner, () => {
    owner.subscription.remove(sink);
    continueWith(owner, done, ctx.record({ response: assembler.message(), usage: assembler.usage }));
  });
  owner.subscription.add(sink);
  stream.subscribe(sink);
}

/**
 * The end of the model stream: every update is assembled and every text delta becomes an event.
 * This is the per-delta hot path, so it is a Subscriber of its own whose `next` the stream calls
 * directly (no observer wrapper, a call site that stays monomorphic).
 */
class ModelUpdateSink extends Subscriber<ModelUpdate> {
  constructor(
    private readonly assembler: ResponseAssembler,
    private readonly scope: RunScopeImpl,
    private readonly iteration: number,
    private readonly owner: StepOwner,
    private readonly done: () => void,
  ) {
    super();
  }

  override next(update: ModelUpdate): void {
    if (this.isStopped) return;
    this.assembler.add(update);
    if (update.type === 'text-delta') {
      this.scope.send({ type: 'text-delta', runId: this.scope.runId, iteration: this.iteration, text: update.text });
    } else if (update.type === 'reasoning-delta') {
      this.scope.send({ type: 'reasoning-delta', runId: this.scope.runId, iteration: this.iteration, text: update.text });
    }
  }

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.isStopped = true;
    this.unsubscribe();
    this.owner.fail(error instanceof HookFailure ? error : new ModelFailure(error));
  }

  override complete(): void {
    if (this.isStopped) return;
    this.isStopped = true;
    this.unsubscribe();
    this.done();
  }
}
