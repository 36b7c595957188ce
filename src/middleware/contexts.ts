import type { Observable, SchedulerLike } from 'rxjs';
import { awaitResponse, type RequestOptions } from './awaitResponse';
import type { AgentResponse, EmittedEvent, RunEndReason } from '../events/types';
import { textMessage, type Message, type ToolCallPart, type ToolResultPart } from '../messages/message';
import type { ModelClient, ModelRequest, ModelSettings, ModelUpdate, OutputFormat, ToolChoice, ToolSpec, Usage } from '../model/types';
import type { StateDef } from '../state/defineState';
import { loopWith, replaceMessages, type LoopState } from './loopState';
import { MessageLog } from '../messages/messageLog';
import { ownGetter } from '../internal/ownGetter';
import { plainObjects } from '../internal/plainObjects';
import type { Tool } from '../tools/defineTool';
import type { RunScope } from './runScope';

type Writable<T> = { -readonly [K in keyof T]: T[K] };

const EMPTY_RESULTS: readonly ToolResultPart[] = Object.freeze([]);

/** The error of a control method called off its context (`const { terminate } = ctx; terminate('done')`). */
function unbound(method: string): TypeError {
  return new TypeError(`${method}() was called without its context: call it on the context, as ctx.${method}(…)`);
}

/** A request event as a middleware writes it; `requestId` is filled in when missing. */
export type RequestEvent = EmittedEvent extends infer E ? (E extends { requestId: string } ? Omit<E, 'requestId'> & { requestId?: string } : never) : never;

/**
 * What every context offers: the run's ids, typed state, events and requests. Contexts are
 * immutable: every control method (`with`, `skipModelCall`, `skipTools`, `block`, `terminate`,
 * `updateState`) returns a new context. `emit` is not one of them: it returns nothing, so
 * emit, then return the context (`tap((ctx) => ctx.emit(e))`, not `map((ctx) => ctx.emit(e))`).
 */
export abstract class AgentContext {
  /** @internal */
  protected constructor(
    /** @internal */ readonly scope: RunScope,
    /** @internal The run's immutable state as this context sees it. */
    readonly loop: LoopState,
  ) {}

  get runId(): string {
    return this.scope.runId;
  }
  /** The agent's `name` (`createAgent({ name })`), e.g. for logs. */
  get agentName(): string {
    return this.scope.agentName;
  }
  get sessionId(): string | undefined {
    return this.scope.sessionId;
  }
  /** The run's scheduler: use it for every timer so policies run in virtual time in tests. */
  get scheduler(): SchedulerLike {
    return this.scope.scheduler;
  }
  /** The agent's `maxIterations`: the most iterations a turn runs (one that `skipModelCall` answered counts too). */
  get maxIterations(): number {
    return this.scope.maxIterations;
  }
  /** Tool calls executed in this run by the batches that ended (the current batch's count once it ends). */
  get functionCalls(): number {
    return this.loop.functionCalls;
  }
  /** The run's usage over the iterations that ended (this iteration's call is in `usage` of its IterationContext). */
  get totalUsage(): Usage {
    return this.loop.usage;
  }
  /** The turn's iterations so far (before the loop, 0; after it, the number it ran). */
  get iterations(): number {
    return this.loop.iteration;
  }
  /** This turn's messages so far: its input, then what its iterations added. */
  get turnMessages(): readonly Message[] {
    return this.loop.log.since(this.loop.turnStart);
  }

  /** Typed read of a middleware state. */
  state<T>(def: StateDef<T>): T {
    if (!(this instanceof AgentContext)) throw unbound('state');
    return this.loop.state.get(def);
  }

  /** A new context whose state `def` is `fn(current)`. */
  updateState<T>(def: StateDef<T>, fn: (current: T) => T): this {
    if (!(this instanceof AgentContext)) throw unbound('updateState');
    const state = this.loop.state.update(def, fn);
    if (def.shared) {
      const value = state.get(def);
      if (value !== this.loop.state.get(def)) this.scope.emit({ type: 'state-changed', key: def.key, value });
    }
    return this.withLoop(loopWith(this.loop, { state }));
  }

  /**
   * Sends an event to the run's subscriber (the run's `runId` is added). Returns nothing (`void`),
   * not a context like the control methods: chaining it fails. `ctx.emit(e).with(…)` throws a
   * TypeError, and a hook that returns its result (`map((ctx) => ctx.emit(e))`) emits `undefined`,
   * which fails the run ("emitted undefined, not a context"). Emit, then pass the context on.
   *
   * @example
   * beforeIteration: tap((ctx) => ctx.emit({ type: 'circuit-breaker-triggered', toolName: 'search', count: 3, iteration: ctx.iteration })),
   */
  emit(event: EmittedEvent): void {
    if (!(this instanceof AgentContext)) throw unbound('emit');
    this.scope.emit(event);
  }

  /**
   * Counts the tokens of a model call this middleware made itself (a summary, a tool selection):
   * they join the run's usage (the current iteration's `usage`, `totalUsage`, `run-end.usage`, so
   * `costBudget` prices them) and telemetry's token metrics, under `model` and `provider` (the
   * GenAI name, as a model client's `provider`) when given.
   *
   * @example
   * ctx.reportUsage({ inputTokens: 812, outputTokens: 95 }, { model: 'gpt-4o-mini', provider: 'openai' });
   */
  reportUsage(usage: Usage, options?: { model?: string; provider?: string }): void {
    if (!(this instanceof AgentContext)) throw unbound('reportUsage');
    this.scope.reportUsage(usage, options);
  }

  /**
   * Emits a request event and returns an Observable of the matching response, or of
   * `onTimeout` when `timeout` (ms, on the run's scheduler) passes first.
   */
  request<D = undefined>(event: RequestEvent, options: RequestOptions<D> = {}): Observable<AgentResponse | D> {
    if (!(this instanceof AgentContext)) throw unbound('request');
    const { journal } = this.scope;
    // A journaled run's ids name where they were asked (the turn's start or end, or an iteration
    // and call), so that a resumed run asking again gets the same id.
    const where = this instanceof TurnContext ? (this.loop.done ? 'end' : 'turn') : this.loop.iteration;
    const requestId = event.requestId ?? (journal ? journal.requestId(where, (this as { callId?: string }).callId, event.type) : this.scope.newId('req'));
    return awaitResponse(this.scope, { ...event, requestId }, options);
  }

  /** @internal The same context over another loop state. */
  atLoop(loop: LoopState): this {
    return loop === this.loop ? this : this.withLoop(loop);
  }

  /** @internal A copy over `loop` (a context type may make it without a patch object). */
  protected withLoop(loop: LoopState): this {
    return this.copy({ loop } as Partial<this>);
  }

  /**
   * @internal A copy with `patch` applied. Every context class initialises all of its fields in
   * its constructor and `clone` goes through it, so copies share one hidden class per context
   * type (property reads on contexts stay monomorphic however many copies a run makes).
   */
  protected copy(patch: Partial<this>): this {
    return Object.assign(this.clone(), patch);
  }

  /** @internal A field-for-field copy. */
  protected abstract clone(): this;
}

/** Why and how a phase ended the run early. */
export interface Termination {
  readonly reason: string;
}

/** The context of `beforeMessageTurn` and `afterMessageTurn`. */
export class TurnContext extends AgentContext {
  /** Set by `terminate`. */
  readonly termination: Termination | undefined;
  /** After the turn: the final assistant message, if any. */
  readonly response: Message | undefined;

  private constructor(scope: RunScope, loop: LoopState, response: Message | undefined, termination: Termination | undefined) {
    super(scope, loop);
    this.termination = termination;
    this.response = response;
  }

  /** @internal */
  static create(scope: RunScope, loop: LoopState, response?: Message): TurnContext {
    return new TurnContext(scope, loop, response, undefined);
  }

  /** @internal */
  protected clone(): this {
    return new TurnContext(this.scope, this.loop, this.response, this.termination) as this;
  }

  /** This turn's messages: the input before the turn, everything the turn added after it. */
  get input(): readonly Message[] {
    return this.loop.log.since(this.loop.turnStart);
  }
  /** History and this turn's messages. */
  get messages(): readonly Message[] {
    return this.loop.log.toArray();
  }
  get instructions(): string | undefined {
    return this.loop.instructions;
  }
  get tools(): readonly Tool[] {
    return this.loop.tools;
  }
  get toolChoice(): ToolChoice | undefined {
    return this.loop.toolChoice;
  }
  get settings(): ModelSettings {
    return this.loop.settings;
  }
  /** How the loop ended, once it has (undefined in `beforeMessageTurn`). */
  get endReason(): RunEndReason | undefined {
    return this.loop.endReason;
  }
  /** The reason a middleware gave when it terminated the loop. */
  get terminationReason(): string | undefined {
    return this.loop.terminationReason;
  }

  /**
   * A new context with the turn's input, whole message list, instructions, tools or settings
   * replaced (they hold for every iteration of the turn).
   */
  with(patch: {
    input?: readonly Message[];
    messages?: readonly Message[];
    instructions?: string | undefined;
    tools?: readonly Tool[];
    toolChoice?: ToolChoice | undefined;
    settings?: ModelSettings;
  }): TurnContext {
    if (!(this instanceof AgentContext)) throw unbound('with');
    let loop = this.loop;
    if (patch.messages) loop = replaceMessages(loop, patch.messages);
    if (patch.input) {
      loop = loopWith(loop, { log: MessageLog.of([...loop.log.since(0).slice(0, loop.turnStart), ...patch.input]) });
    }
    const next: Writable<Partial<LoopState>> = {};
    if ('instructions' in patch) next.instructions = patch.instructions;
    if (patch.tools) next.tools = patch.tools;
    if ('toolChoice' in patch) next.toolChoice = patch.toolChoice;
    if (patch.settings) next.settings = patch.settings;
    return this.copy({ loop: loopWith(loop, next) } as Partial<this>);
  }

  /** Ends the run before (or after) its iterations, with `reason` as the final answer. */
  terminate(reason: string): TurnContext {
    if (!(this instanceof AgentContext)) throw unbound('terminate');
    return this.copy({ termination: { reason } } as Partial<this>);
  }
}

/** The context of `beforeIteration` and `afterIteration`. */
export class IterationContext extends AgentContext {
  readonly iteration: number;
  readonly instructions: string | undefined;
  readonly tools: readonly Tool[];
  readonly toolChoice: ToolChoice | undefined;
  readonly settings: ModelSettings;
  /** The assistant message of this iteration (after the model call, or the one given to `skipModelCall`). */
  readonly response: Message | undefined;
  /** The tool results of this iteration, in the model's order (in `afterIteration`). */
  readonly toolResults: readonly ToolResultPart[];
  /**
   * Usage of this iteration: its model call's, if the model reported it, and what middleware
   * reported with `reportUsage` since the previous iteration (in `afterIteration`).
   */
  readonly usage: Usage | undefined;
  /** True when `skipModelCall` stood in for the model. */
  readonly modelCallSkipped: boolean;
  readonly termination: Termination | undefined;
  /**
   * True in `afterIteration` when this iteration ends the turn: no tool calls, skipped tools with a
   * response, terminated, or the last iteration `maxIterations` allows.
   */
  readonly final: boolean;

  /** @internal An iteration's first context (`from` absent), or a copy of `from` over `loop`. */
  constructor(scope: RunScope, loop: LoopState, from?: IterationContext) {
    super(scope, loop);
    if (from) {
      this.iteration = from.iteration;
      this.instructions = from.instructions;
      this.tools = from.tools;
      this.toolChoice = from.toolChoice;
      this.settings = from.settings;
      this.response = from.response;
      this.toolResults = from.toolResults;
      this.usage = from.usage;
      this.modelCallSkipped = from.modelCallSkipped;
      this.termination = from.termination;
      this.final = from.final;
    } else {
      this.iteration = loop.iteration;
      this.instructions = loop.instructions;
      this.tools = loop.tools;
      this.toolChoice = loop.toolChoice;
      this.settings = loop.settings;
      this.response = undefined;
      this.toolResults = EMPTY_RESULTS;
      this.usage = undefined;
      this.modelCallSkipped = false;
      this.termination = undefined;
      this.final = false;
    }
  }

  /** @internal */
  protected clone(): this {
    return this.withLoop(this.loop);
  }

  /** @internal A state update per iteration is common (costBudget, iterationLogging): one object, no patch. */
  protected override withLoop(loop: LoopState): this {
    return new IterationContext(this.scope, loop, this) as this;
  }

  /** History and this turn's messages so far. */
  get messages(): readonly Message[] {
    return this.loop.log.toArray();
  }
  /** The tool calls of `response`, in the model's order. */
  get toolCalls(): readonly ToolCallPart[] {
    const content = this.response?.content;
    if (!content) return [];
    let count = 0;
    for (const p of content) if (p.type === 'tool-call') count++;
    // Sized: a pushed-to empty array reserves 17 slots, and this is read on every iteration.
    const calls = new Array<ToolCallPart>(count);
    let at = 0;
    for (const p of content) if (p.type === 'tool-call') calls[at++] = p;
    return calls;
  }

  /**
   * A new context. `messages` replaces the conversation from now on (also in the session);
   * `instructions`, `tools`, `toolChoice` and `settings` change this iteration's model call only.
   */
  with(patch: {
    messages?: readonly Message[];
    instructions?: string | undefined;
    tools?: readonly Tool[];
    toolChoice?: ToolChoice | undefined;
    settings?: ModelSettings;
  }): IterationContext {
    if (!(this instanceof AgentContext)) throw unbound('with');
    const next: Writable<Partial<IterationContext>> = {};
    if (patch.messages) next.loop = replaceMessages(this.loop, patch.messages);
    if ('instructions' in patch) next.instructions = patch.instructions;
    if (patch.tools) next.tools = patch.tools;
    if ('toolChoice' in patch) next.toolChoice = patch.toolChoice;
    if (patch.settings) next.settings = patch.settings;
    return this.copy(next as Partial<this>);
  }

  /** @internal The model's answer and its usage: {@link record} without a patch object (one per iteration). */
  answered(response: Message, usage: Usage | undefined): IterationContext {
    const next = new IterationContext(this.scope, this.loop, this);
    const fields = next as Writable<IterationContext>;
    fields.response = response;
    fields.usage = usage;
    return next;
  }

  /** @internal The tool step's end (the loop with its messages, whether the turn is over): {@link record} without a patch object. */
  toolsDone(loop: LoopState, final: boolean, toolResults: readonly ToolResultPart[], termination: Termination | undefined): IterationContext {
    const next = new IterationContext(this.scope, loop, this);
    const fields = next as Writable<IterationContext>;
    fields.final = final;
    fields.toolResults = toolResults;
    fields.termination = termination;
    return next;
  }

  /** @internal The runtime records what the model and the tools produced. */
  record(outcome: {
    loop?: LoopState;
    response?: Message;
    usage?: Usage;
    toolResults?: readonly ToolResultPart[];
    final?: boolean;
    termination?: Termination;
  }): IterationContext {
    return this.copy(outcome as Partial<this>);
  }

  /** Skips the model call; `response` stands in for the model's answer (its tool calls run). */
  skipModelCall(response: Message): IterationContext {
    if (!(this instanceof AgentContext)) throw unbound('skipModelCall');
    return this.copy({ response, modelCallSkipped: true } as Partial<this>);
  }

  /** Ends the run after this iteration with `reason` as the final answer (before the call: no call). */
  terminate(reason: string): IterationContext {
    if (!(this instanceof AgentContext)) throw unbound('terminate');
    // final: the hooks that see it next (an earlier-registered afterIteration) know the turn ends.
    return this.copy({ termination: { reason }, final: true } as Partial<this>);
  }

  /** The model request this iteration sends. */
  toRequest(): ModelRequest {
    return buildRequest(this.loop, this.instructions, this.scope.toolSpecs(this.tools), this.toolChoice, this.settings, this.scope.output?.format);
  }
}

/**
 * Builds a request whose `messages` are materialised only when read (an own, enumerable getter:
 * see ownGetter), so that the loop never copies the history for a request nobody reads.
 */
function buildRequest(
  loop: LoopState,
  instructions: string | undefined,
  tools: readonly ToolSpec[],
  toolChoice: ToolChoice | undefined,
  settings: ModelSettings,
  output: OutputFormat | undefined,
): ModelRequest {
  const request = new RequestFields(tools, settings) as Writable<ModelRequest>;
  if (instructions !== undefined) request.instructions = instructions;
  if (toolChoice !== undefined) request.toolChoice = toolChoice;
  if (output !== undefined) request.output = output;
  defineMessages(request, loop.log);
  return request;
}

/** A request's fields, made without an object literal (see plainObjects): one per iteration. */
const RequestFields: new (tools: readonly ToolSpec[], settings: ModelSettings) => ModelRequest = plainObjects(function (
  this: Writable<ModelRequest>,
  tools: readonly ToolSpec[],
  settings: ModelSettings,
) {
  this.tools = tools;
  this.settings = settings;
});

const defineMessages = ownGetter('messages', (log: MessageLog): readonly Message[] => log.view());

/** The context a `wrapModel` hook receives. */
export interface ModelCallContext {
  /** The request about to be sent. */
  readonly request: ModelRequest;
  readonly iteration: number;
  readonly runId: string;
  /** The agent's `name`. */
  readonly agentName: string;
  readonly scheduler: SchedulerLike;
  /** The model this call goes to. */
  readonly client: ModelClient;
  state<T>(this: void, def: StateDef<T>): T;
  /** Sends an event to the run's subscriber; returns nothing (`void`), so it does not chain. */
  emit(this: void, event: EmittedEvent): void;
  /** Counts the tokens of a model call this wrapper made itself (see `AgentContext.reportUsage`). */
  reportUsage(this: void, usage: Usage, options?: { model?: string; provider?: string }): void;
  /**
   * The inner chain (the wrappers inside this one, then the model) for another request or
   * another model: how a fallback or a request rewrite is written. Its errors are the model's
   * (and those of the wrappers' streams), for this wrapper's operators to retry or catch. A
   * middleware inside that fails while being built here (its hook throws or breaks the contract)
   * is not one of them: the run fails at once, naming that middleware, and the stream returned
   * never emits; so a plain `retry()` here never rebuilds a broken middleware, and a `catchError`
   * never hides one.
   *
   * @example
   * const retried: AgentMiddleware = { name: 'retried', wrapModel: (ctx) => () => defer(() => ctx.call()).pipe(retry(2)) };
   */
  call(this: void, request?: ModelRequest, client?: ModelClient): Observable<ModelUpdate>;
  /**
   * Drops what the model has streamed so far in this call from the turn's text and messages
   * (after a failed attempt). `model-retry` and `model-fallback` events do this by themselves.
   */
  discardPartialResponse(this: void): void;
}

/** The context of `beforeToolExecution`: the whole batch of calls the model asked for. */
export class ToolBatchContext extends AgentContext {
  readonly skipped: { readonly response: Message | undefined } | undefined = undefined;
  readonly termination: Termination | undefined = undefined;

  /** @internal */
  constructor(
    scope: RunScope,
    loop: LoopState,
    readonly iteration: number,
    /** The assistant message holding the calls. */
    readonly response: Message,
    readonly toolCalls: readonly ToolCallPart[],
    readonly tools: readonly Tool[],
  ) {
    super(scope, loop);
  }

  /** @internal */
  protected clone(): this {
    const c = new ToolBatchContext(this.scope, this.loop, this.iteration, this.response, this.toolCalls, this.tools);
    return Object.assign(c, { skipped: this.skipped, termination: this.termination }) as this;
  }

  /** History and this turn's messages so far (without `response`). */
  get messages(): readonly Message[] {
    return this.loop.log.toArray();
  }

  /** A new context with the calls replaced (for example rewritten arguments). */
  with(patch: { toolCalls?: readonly ToolCallPart[] }): ToolBatchContext {
    if (!(this instanceof AgentContext)) throw unbound('with');
    return this.copy({ toolCalls: patch.toolCalls ?? this.toolCalls } as Partial<this>);
  }

  /**
   * Skips every call of the batch. With `response`, the turn ends with it as the final assistant
   * message; without, each call gets the error result `Tool execution was skipped.` and the loop goes on.
   */
  skipTools(response?: Message | string): ToolBatchContext {
    if (!(this instanceof AgentContext)) throw unbound('skipTools');
    const message = typeof response === 'string' ? textMessage('assistant', response) : response;
    return this.copy({ skipped: { response: message } } as Partial<this>);
  }

  /** No call of the batch runs; the run ends with `reason` as the final answer. */
  terminate(reason: string): ToolBatchContext {
    if (!(this instanceof AgentContext)) throw unbound('terminate');
    return this.copy({ termination: { reason } } as Partial<this>);
  }
}

/** The context of `beforeFunction` and of `wrapFunction`: one call about to run. */
export class FunctionContext extends AgentContext {
  readonly blocked: { readonly result: unknown; readonly isError: boolean; readonly denied?: string } | undefined = undefined;

  /** @internal */
  constructor(
    scope: RunScope,
    loop: LoopState,
    readonly iteration: number,
    readonly callId: string,
    readonly toolName: string,
    /** The arguments, parsed by the tool's schema. */
    readonly args: unknown,
    readonly tool: Tool,
    /** The call's position in the batch (the model's order). */
    readonly index: number,
  ) {
    super(scope, loop);
  }

  /** @internal */
  protected clone(): this {
    const c = new FunctionContext(this.scope, this.loop, this.iteration, this.callId, this.toolName, this.args, this.tool, this.index);
    (c as Writable<FunctionContext>).blocked = this.blocked;
    return c as this;
  }

  /** A new context with other arguments (they are not checked again). */
  with(patch: { args?: unknown }): FunctionContext {
    if (!(this instanceof AgentContext)) throw unbound('with');
    return this.copy({ args: 'args' in patch ? patch.args : this.args } as Partial<this>);
  }

  /**
   * The function does not run; the model reads `result` instead. With `denied` (the reason), the
   * call was refused by a person or a policy: its `tool-result` event carries `denied: true` and
   * `reason`, so a UI shows a refusal rather than an error. A block without it (a cached or
   * rewritten answer, a limit) is a plain result.
   *
   * @example
   * beforeFunction: map((ctx) => (ctx.toolName === 'shell' ? ctx.block("Permission denied for 'shell'", { isError: true, denied: 'denied by policy' }) : ctx))
   */
  block(result: unknown, options: { isError?: boolean; denied?: string } = {}): FunctionContext {
    if (!(this instanceof AgentContext)) throw unbound('block');
    const { isError = false, denied } = options;
    return this.copy({ blocked: denied === undefined ? { result, isError } : { result, isError, denied } } as Partial<this>);
  }
}

/** The context of `afterFunction`: one call and its result. */
export class FunctionResultContext extends AgentContext {
  /** @internal */
  constructor(
    scope: RunScope,
    loop: LoopState,
    readonly iteration: number,
    readonly callId: string,
    readonly toolName: string,
    readonly args: unknown,
    readonly result: unknown,
    readonly isError: boolean,
    /** True when a `beforeFunction` hook blocked the call (or it never reached the tool). */
    readonly blocked: boolean,
    /**
     * The error the call ended with: what the tool threw (or its Promise rejected with, or its
     * Observable errored with), or what a `wrapFunction` threw in its place (toolRetry's
     * `ToolError`, with the tool's error as `cause`; toolTimeout's `ToolTimeoutError`), as the
     * `onError` hooks left it; the model reads it as `result`. Undefined for a value, for a blocked
     * call, and when a wrapper turned the error into a result itself.
     */
    readonly error: unknown = undefined,
  ) {
    super(scope, loop);
  }

  /** @internal */
  protected clone(): this {
    const { scope, loop, iteration, callId, toolName, args, result, isError, blocked, error } = this;
    return new FunctionResultContext(scope, loop, iteration, callId, toolName, args, result, isError, blocked, error) as this;
  }

  /** A new context with the result the model reads rewritten (made a success, it has no `error`). */
  with(patch: { result?: unknown; isError?: boolean }): FunctionResultContext {
    if (!(this instanceof AgentContext)) throw unbound('with');
    const isError = patch.isError ?? this.isError;
    return this.copy({
      result: 'result' in patch ? patch.result : this.result,
      isError,
      error: isError ? this.error : undefined,
    } as Partial<this>);
  }
}

/** Where an error came from. */
export type ErrorSource = 'model' | 'tool' | 'middleware' | 'run';

/** The context of `onError`: an error from a model call, a tool or a hook. */
export class ErrorContext extends AgentContext {
  /** @internal */
  constructor(
    scope: RunScope,
    loop: LoopState,
    readonly error: unknown,
    readonly source: ErrorSource,
    readonly iteration: number,
    readonly middleware: string | undefined,
    /** For a tool error: the call. */
    readonly callId: string | undefined,
    readonly toolName: string | undefined,
    /** For a middleware's error: the hook that failed (`beforeIteration`, `wrapModel`…). */
    readonly hook: string | undefined = undefined,
  ) {
    super(scope, loop);
  }

  /** @internal */
  protected clone(): this {
    const { scope, loop, error, source, iteration, middleware, callId, toolName, hook } = this;
    return new ErrorContext(scope, loop, error, source, iteration, middleware, callId, toolName, hook) as this;
  }

  /** A new context carrying another error (for example a clearer one). */
  with(patch: { error?: unknown }): ErrorContext {
    if (!(this instanceof AgentContext)) throw unbound('with');
    return this.copy({ error: 'error' in patch ? patch.error : this.error } as Partial<this>);
  }
}
