import { NEVER, Observable, Subscriber, throwError, type MonoTypeOperatorFunction, type SchedulerLike, type Subscription } from 'rxjs';
import type { AgentEvent, EmittedEvent } from '../events/types';
import type { StateDef } from '../state/defineState';
import type { ModelClient, ModelRequest, ModelUpdate, Usage } from '../model/types';
import { callIdOf, ResponseAssembler } from '../model/assembleResponse';
import { messageId } from '../messages/message';
import type { IterationContext, ModelCallContext } from '../middleware/contexts';
import { applyWrapper, checkOperator, continueWith, type StepOwner } from '../middleware/runPhase';
import { LinkedSubscriber } from '../internal/linkedSubscriber';
import { HookFailure } from '../middleware/types';
import type { CompiledAgent } from './compileAgent';
import { unsubscribeQuietly } from '../internal/unsubscribeQuietly';
import { isPromiseLike } from '../internal/isPromiseLike';
import { show } from '../internal/show';
import type { RunScopeImpl } from './runScopeImpl';
import { isSubscribable } from '../internal/isSubscribable';
import { PartialJson } from '../internal/partialJson';
import { modelUpdateProblem } from '../model/modelUpdateProblem';

/** A model stream's error (after the wrappers), tagged so the run reports source `model`. */
export class ModelFailure {
  constructor(readonly error: unknown) {}
}

/**
 * Calls the model through the `wrapModel` chain (first registered outermost), streams its text
 * to the run's events, and continues with the iteration context holding the assembled response
 * and usage. The answer gets the id `answerId` (the one `iteration-start` announced); after a
 * `model-retry` or `model-fallback`, the next attempt's answer gets the new id the event carries.
 */
export function callModel(
  owner: StepOwner,
  scope: RunScopeImpl,
  agent: CompiledAgent,
  ctx: IterationContext,
  answerId: string,
  done: (ctx: IterationContext) => void,
): void {
  const call = new ModelCall(scope, agent.modelWrappers, ctx, owner, answerId);
  let stream: Observable<ModelUpdate>;
  try {
    stream = call.chain(0, ctx.toRequest(), agent.model);
  } catch (error) {
    owner.fail(error instanceof HookFailure ? error : new ModelFailure(error));
    return;
  }
  // An inner wrapper failed while a wrapper built it through ctx.call(): the run is failing already.
  if (owner.subscription.closed) return;
  // A sink of its own with structured output, so that the common one's per-delta path stays as it is.
  const Sink = scope.output ? OutputUpdateSink : ModelUpdateSink;
  const sink = new Sink(call.assembler, scope, ctx.iteration, owner, () => {
    owner.subscription.remove(sink);
    const usage = call.assembler.usage;
    scope.pendingUsage = usage; // spent even if the iteration fails or is cancelled before its end
    continueWith(owner, done, ctx.answered(call.assembler.message(), usage));
  });
  owner.subscription.add(sink);
  stream.subscribe(sink);
}

/** One model call: its assembler and its chain of wrappers. */
class ModelCall {
  readonly assembler: ResponseAssembler;
  /** The model has been called (by any chain of this call: a retry, a fallback, a side request). */
  called = false;
  // What every wrapper's context offers, made once per call and shared by the wrappers' contexts.
  readonly state: <T>(def: StateDef<T>) => T;
  readonly emit: (event: EmittedEvent) => void;
  readonly discardPartialResponse: () => void;
  readonly reportUsage: (usage: Usage, options?: { model?: string; provider?: string }) => void;

  constructor(
    readonly scope: RunScopeImpl,
    private readonly wrappers: CompiledAgent['modelWrappers'],
    readonly ctx: IterationContext,
    private readonly owner: StepOwner,
    answerId: string,
  ) {
    const assembler = (this.assembler = new ResponseAssembler(answerId));
    this.state = (def) => ctx.state(def);
    this.emit = (event) => {
      if (event.type === 'model-retry' || event.type === 'model-fallback') {
        // The failed attempt's partial answer is dropped; the next one is another message, told by the event.
        assembler.reset();
        assembler.messageId = messageId();
        scope.emit({ ...event, messageId: assembler.messageId });
        return;
      }
      scope.emit(event);
    };
    this.discardPartialResponse = () => assembler.reset();
    this.reportUsage = (usage, options) => scope.reportUsage(usage, options);
  }

  /** The stream of wrapper `index` and the ones inside it, for `request` to `client`. */
  chain(index: number, request: ModelRequest, client: ModelClient): Observable<ModelUpdate> {
    const wrappers = this.wrappers;
    if (index === wrappers.length) return index === 0 ? modelStream(client, request) : new ClientCall(this, client, request);
    const { wrap, middleware } = wrappers[index];
    let operator: MonoTypeOperatorFunction<ModelUpdate>;
    try {
      operator = wrap(new WrapperContext(this, index, request, client));
    } catch (error) {
      throw new HookFailure(error, middleware, 'wrapModel');
    }
    checkOperator(operator, middleware, 'wrapModel'); // before the wrappers inside it are built
    return applyWrapper(operator, this.chain(index + 1, request, client), middleware, 'wrapModel');
  }

  /**
   * `ctx.call()` of wrapper `index - 1`: the chain from wrapper `index` on. When a wrapper in it
   * fails to build (its hook throws or breaks the contract), that is the middleware's failure, not
   * the stream's: it fails the run at once, naming that middleware, and the calling wrapper gets a
   * stream that never emits (the run is being torn down). So its operators never see the failure: a
   * `retry()` would only rebuild the same breach, a `catchError` would hide a bug. Once the call is
   * over (a context kept past it), there is no run step left to fail: the stream errors with it.
   */
  innerCall(index: number, request: ModelRequest, client: ModelClient): Observable<ModelUpdate> {
    try {
      return this.chain(index, request, client);
    } catch (error) {
      const failure = error instanceof HookFailure ? error : new ModelFailure(error);
      if (this.owner.subscription.closed) return throwError(() => failure.error);
      this.owner.fail(failure);
      return NEVER;
    }
  }
}

/**
 * What a `wrapModel` hook sees. Every member is an own property (its functions need no `this`),
 * so a wrapper may destructure it (`({ call, request }) => …`) or spread it into another.
 */
class WrapperContext implements ModelCallContext {
  readonly iteration: number;
  readonly runId: string;
  readonly agentName: string;
  readonly scheduler: SchedulerLike;
  readonly state: <T>(def: StateDef<T>) => T;
  readonly emit: (event: EmittedEvent) => void;
  readonly discardPartialResponse: () => void;
  readonly reportUsage: (usage: Usage, options?: { model?: string; provider?: string }) => void;
  readonly call: (request?: ModelRequest, client?: ModelClient) => Observable<ModelUpdate>;
  /** @internal The run's scope (telemetry finds the run's trace by it). */
  readonly scope: RunScopeImpl;
  /**
   * @internal The answer being assembled. Its `resets` count moves when what the model streamed so
   * far is dropped (a retry or fallback inside this wrapper): a wrapper that holds text back drops it too.
   */
  readonly answer: { readonly resets: number };

  constructor(
    model: ModelCall,
    index: number,
    readonly request: ModelRequest,
    readonly client: ModelClient,
  ) {
    this.iteration = model.ctx.iteration;
    this.runId = model.scope.runId;
    this.agentName = model.scope.agentName;
    this.scheduler = model.scope.scheduler;
    this.state = model.state;
    this.emit = model.emit;
    this.discardPartialResponse = model.discardPartialResponse;
    this.reportUsage = model.reportUsage;
    this.scope = model.scope;
    this.answer = model.assembler;
    this.call = (nextRequest, nextClient) => model.innerCall(index + 1, nextRequest ?? request, nextClient ?? client);
  }
}

/**
 * `defer(() => client(request))`: the model is called again on every subscription (a retry), and
 * a client that throws errors the stream. Subscribed again (a plain rxjs `retry()` in a wrapper,
 * which emits no `model-retry`), it drops what the earlier attempt assembled; so does another chain
 * made by `ctx.call()` while the answer so far has no finish (a hand-written fallback after a
 * failure), but not after one (a side request, whose output a wrapper may not pass on). A class
 * of its own: it is made on every model call.
 */
class ClientCall extends Observable<ModelUpdate> {
  private subscribed = false;

  constructor(
    private readonly call: ModelCall,
    private readonly client: ModelClient,
    private readonly request: ModelRequest,
  ) {
    super();
  }

  /** @internal rxjs 7's subscribe calls `_subscribe` and turns a throw into an error. */
  protected _subscribe(subscriber: Subscriber<ModelUpdate>): Subscription {
    const { call } = this;
    if (this.subscribed || (call.called && call.assembler.finishReason === undefined)) call.assembler.reset();
    this.subscribed = true;
    call.called = true;
    return modelStream(this.client, this.request).subscribe(subscriber);
  }
}

/** What `client(request)` returned, when it is an Observable (else a TypeError saying so). */
function modelStream(client: ModelClient, request: ModelRequest): Observable<ModelUpdate> {
  const stream: unknown = client(request);
  if (!isSubscribable(stream)) {
    const got = isPromiseLike(stream) ? 'a Promise' : show(stream);
    throw new TypeError(`The model client must return an Observable of model updates (see fromAsyncIterable), got ${got}`);
  }
  return stream as Observable<ModelUpdate>;
}

/**
 * The end of the model stream: every update is assembled and every text delta becomes an event.
 * This is the per-delta hot path, so it is a Subscriber of its own whose `next` the stream calls
 * directly (no observer wrapper, a call site that stays monomorphic).
 */
class ModelUpdateSink extends LinkedSubscriber<ModelUpdate> {
  /** The run's subscriber and id, read once here rather than through the scope per delta. */
  protected readonly events: Subscriber<AgentEvent>;
  protected readonly runId: string;

  constructor(
    protected readonly assembler: ResponseAssembler,
    scope: RunScopeImpl,
    protected readonly iteration: number,
    private readonly owner: StepOwner,
    private readonly done: () => void,
  ) {
    super();
    this.events = scope.subscriber;
    this.runId = scope.runId;
  }

  override next(update: ModelUpdate): void {
    if (this.isStopped) return;
    // The text's check is one typeof here; any other update, rarer, is checked whole.
    if (update != null && update.type === 'text-delta' && typeof update.text === 'string') {
      this.assembler.addText(update.text);
      this.events.next({ type: 'text-delta', runId: this.runId, iteration: this.iteration, text: update.text });
      return;
    }
    const problem = modelUpdateProblem(update);
    if (problem !== undefined) {
      this.error(new TypeError(`The model stream (the model client, or a wrapModel) emitted ${show(update).slice(0, 200)}, not a model update: ${problem}`));
      return;
    }
    this.assembler.add(update);
    if (update.type === 'reasoning-delta') {
      this.events.next({ type: 'reasoning-delta', runId: this.runId, iteration: this.iteration, text: update.text });
    } else if (update.type === 'tool-call-delta') {
      this.toolInput(update.index, update.argsDelta);
    }
  }

  /**
   * `tool-input-start` once a call has a name (the pieces of arguments sent before it follow as one
   * delta), then `tool-input-delta` per piece. The ids are those the `tool-call` event will carry.
   */
  private toolInput(index: number, argsDelta: string): void {
    const call = this.assembler.pendingCall(index);
    if (!call || call.name === '') return;
    const { runId, iteration } = this;
    const callId = callIdOf(call, index);
    const name = call.name;
    if (!call.announced) {
      call.announced = true;
      this.events.next({ type: 'tool-input-start', runId, iteration, callId, name });
      argsDelta = call.argsText;
    }
    if (argsDelta) this.events.next({ type: 'tool-input-delta', runId, iteration, callId, name, argsDelta });
  }

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.isStopped = true;
    unsubscribeQuietly(this); // the stream's own error is the one to report
    this.owner.fail(new ModelFailure(error));
  }

  override complete(): void {
    if (this.isStopped) return;
    this.isStopped = true;
    const teardownError = unsubscribeQuietly(this);
    if (teardownError === undefined) this.done();
    else this.owner.fail(new ModelFailure(teardownError));
  }
}

/**
 * The sink of a run with structured output: the answer's text also feeds an incremental JSON
 * parser, and each delta that changes the value parsed so far sends `output-delta { partial }`.
 * The parser starts again when the answer so far is dropped (a retry, a fallback).
 */
class OutputUpdateSink extends ModelUpdateSink {
  private parser = new PartialJson();
  private resets = this.assembler.resets;

  override next(update: ModelUpdate): void {
    super.next(update);
    // Stopped first: an update the check refused may not be an object.
    if (this.isStopped || update.type !== 'text-delta') return;
    if (this.assembler.resets !== this.resets) {
      this.resets = this.assembler.resets;
      this.parser = new PartialJson();
    }
    if (this.parser.push(update.text)) {
      this.events.next({ type: 'output-delta', runId: this.runId, iteration: this.iteration, partial: this.parser.value() });
    }
  }
}
