import {
  SpanKind,
  SpanStatusCode,
  ValueType,
  context,
  createTraceState,
  metrics,
  trace,
  type Attributes,
  type Context,
  type Histogram,
  type Link,
  type Meter,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { Observable, type MonoTypeOperatorFunction, type Subscriber } from 'rxjs';
import {
  mapContext,
  type AgentEvent,
  type AgentMiddleware,
  type AgentResponse,
  type FunctionContext,
  type FunctionResultContext,
  type IterationContext,
  type Message,
  type ModelCallContext,
  type ModelUpdate,
  type ToolOutcome,
  type Usage,
} from '../index';
import { LinkedSubscriber } from '../internal/linkedSubscriber';
import { show } from '../internal/show';
import type { RunObserver, RunScope } from '../middleware/runScope';
import { checkOptions, optionNames } from '../internal/optionNames';

/** Options of {@link telemetry}. */
export interface TelemetryOptions {
  /** Makes the spans (default `trace.getTracer('rx-agent')`: the global provider's, whenever it is registered). */
  tracer?: Tracer;
  /** Records the metrics (default `metrics.getMeter('rx-agent')` of the global provider, looked up per run). */
  meter?: Meter;
  /**
   * Attach message content: input and output messages, instructions, tool arguments and results
   * (default false: a trace holds names, ids, counts and timings only).
   */
  captureContent?: boolean;
}

/** The bucket boundaries the GenAI conventions advise for `gen_ai.client.token.usage`. */
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];
/** The bucket boundaries the GenAI conventions advise for `gen_ai.client.operation.duration` (seconds). */
const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

/**
 * `error.type` of a model call torn down before its end (the run cancelled, its consumer gone, an
 * outer wrapper giving up on it): the name of what its aborted signal carries, as JavaScript names
 * a cancellation. Such a call gave no answer: its duration point is not counted a success.
 */
const CANCELLED = 'AbortError';

/** The runtime's own events, which the spans themselves stand for (not copied as span events). */
const OWN_EVENTS = new Set(['run-start', 'iteration-start', 'iteration-end', 'text-delta', 'reasoning-delta', 'tool-call', 'tool-result', 'run-end', 'error']);
/** Event fields that may hold message content: copied to span events only with `captureContent`. */
const CONTENT_FIELDS = new Set(['args', 'result', 'text', 'output', 'partial', 'value', 'todos', 'description', 'lastError']);

interface Instruments {
  readonly tokens: Histogram;
  readonly duration: Histogram;
}

/**
 * Each run's trace, whichever `telemetry()` made it first: a sub-agent's run (`agent.asTool()`)
 * finds its call's span here, whether its agent shares the parent's middleware or has its own.
 */
const traces = new WeakMap<RunScope, RunTrace>();

/** The options {@link telemetry} knows (any other is refused). */
const TELEMETRY_OPTIONS = optionNames<TelemetryOptions>({ tracer: true, meter: true, captureContent: true });

/**
 * OpenTelemetry for agent runs, after the GenAI semantic conventions. Each run is an
 * `invoke_agent {agent}` span (INTERNAL); each model call a `chat {model}` span (CLIENT) and each
 * tool call an `execute_tool {tool}` span, both children of the run's span (so parallel tools are
 * siblings, and a tool's own instrumented calls nest under its span when a context manager is
 * registered). Attributes: `gen_ai.operation.name`, `gen_ai.provider.name` (the client's
 * `provider`), `gen_ai.request.model` (`settings.model`), `gen_ai.response.model` (the `finish`
 * update's `model`), `gen_ai.agent.name`, `gen_ai.conversation.id` (the session id),
 * `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.usage.input_tokens` / `output_tokens` (on
 * the run's span, left out when no model said what it used), `gen_ai.response.finish_reasons`;
 * an error sets the span's status and `error.type` (the error's `name`; `AbortError` for a model
 * call torn down before its end). Other middleware's events (retries, fallbacks, permission
 * requests and answers, summaries, context edits, limits, your own) become span events: on the
 * tool's span when they name its `callId` or request, else on the open `chat` span, else on the
 * run's. A sub-agent (`agent.asTool()`) with telemetry of its own has its run's span under its
 * call's `execute_tool` span, context manager or not; its events, which reach the parent as
 * `tool-progress`, are left to its own spans. Metrics: `gen_ai.client.token.usage` and
 * `gen_ai.client.operation.duration` (seconds), histograms with the conventions' attributes and
 * bucket boundaries; a middleware's own model call (`ctx.reportUsage`) counts in the token metric
 * under its model and provider.
 *
 * Register it after `modelFallback` and `contextEditing`, and before `modelRetry` and
 * `modelTimeout`: a model call is then one `chat` span however many attempts it took, with a
 * `model-retry` event for each failed one (an error that was retried is not recorded on the
 * operation's span or metric, as the semantic conventions ask), each model a fallback tries is a
 * span with its own provider, and the request recorded is the one sent. Registered after
 * `modelRetry`, every attempt is a span and a duration point of its own. With `captureContent`
 * (serialized only for spans that are recorded), the input is recorded as the model receives it,
 * the output as the run keeps it (redacted by `piiRedaction`'s `applyToOutput`), tool arguments
 * as the model wrote them and results as the model reads them.
 *
 * A journaled run (an agent with a `store`) keeps its trace context in its journal: resumed, in
 * this process or another, its new `invoke_agent` span (`rx_agent.run.resumed`) is a child of
 * the span that started it, so one run is one trace; the span it is resumed under, if it belongs
 * to another trace, is a link. A journal that keeps no context (the run started without
 * telemetry) makes the resumed run a new trace.
 *
 * Without it registered nothing is paid; with it, a text delta costs one type check (a
 * sub-agent's, reaching the parent as `tool-progress`, a few more, and makes no span event).
 *
 * @example
 * const agent = createAgent({ model, tools, middleware: [telemetry(), modelRetry(), modelTimeout()] });
 */
export function telemetry(options: TelemetryOptions = {}): AgentMiddleware {
  checkOptions('telemetry', options, TELEMETRY_OPTIONS);
  const { tracer, meter, captureContent = false } = options;
  if (tracer !== undefined && typeof (tracer as Tracer | null)?.startSpan !== 'function') {
    throw new TypeError(`telemetry: 'tracer' must be an OpenTelemetry Tracer, got ${show(tracer)}`);
  }
  if (meter !== undefined && typeof (meter as Meter | null)?.createHistogram !== 'function') {
    throw new TypeError(`telemetry: 'meter' must be an OpenTelemetry Meter, got ${show(meter)}`);
  }
  if (typeof captureContent !== 'boolean') throw new TypeError(`telemetry: 'captureContent' must be a boolean, got ${show(captureContent)}`);
  const telemetryTracer = tracer ?? trace.getTracer('rx-agent');
  const instruments = new WeakMap<Meter, Instruments>();
  const instrumentsOf = (): Instruments => {
    const m = meter ?? metrics.getMeter('rx-agent');
    let found = instruments.get(m);
    if (!found) {
      found = {
        tokens: m.createHistogram('gen_ai.client.token.usage', {
          description: 'Number of input and output tokens used.',
          unit: '{token}',
          valueType: ValueType.INT,
          advice: { explicitBucketBoundaries: TOKEN_BUCKETS },
        }),
        duration: m.createHistogram('gen_ai.client.operation.duration', {
          description: 'GenAI operation duration.',
          unit: 's',
          advice: { explicitBucketBoundaries: DURATION_BUCKETS },
        }),
      };
      instruments.set(m, found);
    }
    return found;
  };
  const runs = new WeakMap<RunScope, RunTrace>();
  /** The run's trace: made by `observeRun` when the run started (or here, for a scope it did not see). */
  const traceOf = (scope: RunScope): RunTrace => {
    let run = runs.get(scope);
    if (!run) {
      run = new RunTrace(telemetryTracer, instrumentsOf(), captureContent, scope);
      runs.set(scope, run);
      scope.observe(run);
    }
    return run;
  };
  const scopeOf = (ctx: { readonly scope: RunScope } | ModelCallContext): RunScope => (ctx as unknown as { scope: RunScope }).scope;

  const middleware: AgentMiddleware = {
    name: 'telemetry',
    // From the run's start (before `run-start`): the span's start, and what earlier middleware emit in their first hooks.
    observeRun: (scope) => {
      const run = new RunTrace(telemetryTracer, instrumentsOf(), captureContent, scope);
      runs.set(scope, run);
      return run;
    },
    wrapModel: (ctx) => chatSpan(traceOf(scopeOf(ctx)), ctx),
    wrapFunction: (ctx) => toolContext(traceOf(ctx.scope), ctx),
    afterFunction: mapContext((ctx: FunctionResultContext) => {
      if (ctx.error !== undefined) traceOf(ctx.scope).toolFailed(ctx.callId, ctx.error);
      return ctx;
    }),
  };
  // The answer, as the run keeps it, is the output of the call that gave it.
  if (captureContent) {
    middleware.afterIteration = mapContext((ctx: IterationContext) => {
      traceOf(ctx.scope).iterationEnded(ctx);
      return ctx;
    });
  }
  return middleware;
}

/** A model call that completed and whose output is recorded once the run holds it (captureContent). */
interface PendingChat {
  readonly span: Span;
  /** `performance.now()` when its stream ended (a time both the API and the SDKs read as such). */
  readonly end: number;
  readonly iteration: number;
  readonly finishReason: string | undefined;
}

/** One run's spans: the run's own, the open `chat` spans and the tool calls' spans by call id. */
class RunTrace implements RunObserver {
  readonly span: Span;
  /** The context whose active span is the run's: every other span of the run is its child. */
  readonly context: Context;
  private readonly tools = new Map<string, Span>();
  /** Calls whose error set their span's `error.type` already (afterFunction saw it). */
  private readonly failedTools = new Set<string>();
  /** Requests (permission, continuation) by id, with the span they belong to. */
  private readonly requests = new Map<string, Span>();
  /** The open `chat` spans, the latest last: a side request (`ctx.call`) may open one inside another. */
  private chats: Span[] = [];
  private pending: PendingChat | undefined = undefined;
  private ended = false;
  private providerSet = false;
  /** A model call of the run, or a middleware's (`reportUsage`), said what it used. */
  usageReported = false;
  readonly conversationId: string | undefined;

  constructor(
    readonly tracer: Tracer,
    readonly instruments: Instruments,
    readonly captureContent: boolean,
    scope: RunScope,
  ) {
    const attributes: Attributes = { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': scope.agentName };
    this.conversationId = scope.sessionId;
    if (scope.sessionId !== undefined) attributes['gen_ai.conversation.id'] = scope.sessionId;
    let parent = context.active();
    // A sub-agent's run is a child of its call's span, which no context carries without a context manager.
    const call = scope.parentCall;
    const callSpan = call && traces.get(call.scope)?.toolSpan(call.callId);
    if (callSpan) parent = trace.setSpan(parent, callSpan);
    let links: Link[] | undefined;
    const resumed = scope.resumed;
    if (resumed) {
      // One run, one trace: a resumed run's span is a child of the span that started it (in
      // whatever process), linked to the span it is resumed under, if any.
      attributes['rx_agent.run.resumed'] = true;
      const started = resumed.context && parseTraceContext(resumed.context);
      if (started) {
        const caller = trace.getSpanContext(parent);
        if (caller && trace.isSpanContextValid(caller) && caller.traceId !== started.traceId) links = [{ context: caller }];
        parent = trace.setSpanContext(parent, started);
      }
    }
    this.span = tracer.startSpan(
      `invoke_agent ${scope.agentName}`,
      links ? { kind: SpanKind.INTERNAL, attributes, links } : { kind: SpanKind.INTERNAL, attributes },
      parent,
    );
    this.context = trace.setSpan(parent, this.span);
    if (!traces.has(scope)) traces.set(scope, this);
  }

  /** The run's span context in W3C form, for the journal's start record (none for a span that is not traced). */
  journalContext(): Record<string, string> | undefined {
    const spanContext = this.span.spanContext();
    if (!trace.isSpanContextValid(spanContext)) return undefined;
    const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
    const kept: Record<string, string> = { traceparent: `00-${spanContext.traceId}-${spanContext.spanId}-${flags}` };
    const state = spanContext.traceState?.serialize();
    if (state) kept.tracestate = state;
    return kept;
  }

  /** A `chat` span begins (the run learns its provider and model from the first one). */
  chatStarted(span: Span, provider: string | undefined, model: string | undefined): void {
    this.finishPending(undefined);
    this.chats.push(span);
    if (!this.providerSet) {
      this.providerSet = true;
      if (provider !== undefined) this.span.setAttribute('gen_ai.provider.name', provider);
      if (model !== undefined) this.span.setAttribute('gen_ai.request.model', model);
    }
  }

  /** A `chat` span is over: at once, or (captureContent, completed) once the run holds the answer. */
  chatEnded(span: Span, pending: PendingChat | undefined): void {
    const open = this.chats.indexOf(span);
    if (open >= 0) this.chats.splice(open, 1);
    if (pending) this.pending = pending;
  }

  /** The iteration's answer, as the run keeps it, is the pending call's output. */
  iterationEnded(ctx: IterationContext): void {
    if (this.pending?.iteration === ctx.iteration && !ctx.modelCallSkipped) this.finishPending(ctx.response);
  }

  private finishPending(response: Message | undefined): void {
    const pending = this.pending;
    if (!pending) return;
    this.pending = undefined;
    if (response) pending.span.setAttribute('gen_ai.output.messages', JSON.stringify([outputMessage(response, pending.finishReason)]));
    pending.span.end(pending.end);
  }

  /** The latest open `chat` span, else the run's: where a model call's events go. */
  private chat(): Span {
    const chats = this.chats;
    return chats.length > 0 ? chats[chats.length - 1] : this.span;
  }

  toolFailed(callId: string, error: unknown): void {
    const span = this.tools.get(callId);
    if (!span) return;
    this.failedTools.add(callId);
    span.setAttribute('error.type', errorType(error));
    span.setStatus({ code: SpanStatusCode.ERROR, message: errorText(error) });
  }

  toolSpan(callId: string): Span | undefined {
    return this.tools.get(callId);
  }

  event(event: AgentEvent): void {
    // The most frequent event first: a text delta is told to no span.
    if (event.type === 'text-delta' || this.ended) return;
    switch (event.type) {
      case 'tool-call': {
        const attributes: Attributes = {
          'gen_ai.operation.name': 'execute_tool',
          'gen_ai.tool.name': event.name,
          'gen_ai.tool.call.id': event.callId,
          'gen_ai.tool.type': 'function',
        };
        if (this.conversationId !== undefined) attributes['gen_ai.conversation.id'] = this.conversationId;
        const span = this.tracer.startSpan(`execute_tool ${event.name}`, { kind: SpanKind.INTERNAL, attributes }, this.context);
        if (this.captureContent && span.isRecording()) span.setAttribute('gen_ai.tool.call.arguments', json(event.args));
        this.tools.set(event.callId, span);
        return;
      }
      case 'tool-result': {
        const span = this.tools.get(event.callId);
        if (!span) return;
        this.tools.delete(event.callId);
        if (this.captureContent && span.isRecording()) span.setAttribute('gen_ai.tool.call.result', json(event.result));
        if (event.denied) span.setAttribute('rx_agent.tool.denied', true);
        if (event.replayed) span.setAttribute('rx_agent.tool.replayed', true);
        if (event.isError && !this.failedTools.delete(event.callId)) {
          span.setAttribute('error.type', '_OTHER');
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
        span.end();
        return;
      }
      case 'error': {
        const type = event.error.name || '_OTHER';
        this.span.setAttribute('error.type', type);
        this.span.setStatus({ code: SpanStatusCode.ERROR, message: event.error.message });
        const attributes: Attributes = { 'exception.type': type, 'exception.message': event.error.message, 'rx_agent.error.source': event.source };
        if (event.middleware !== undefined) attributes['rx_agent.error.middleware'] = event.middleware;
        if (event.hook !== undefined) attributes['rx_agent.error.hook'] = event.hook;
        this.span.addEvent('exception', attributes);
        return;
      }
      case 'run-end': {
        const { usage } = event;
        // run-end's usage is 0 where no model said what it used: left out then, not told as 0.
        if (this.usageReported || usage.inputTokens !== 0 || usage.outputTokens !== 0) {
          this.span.setAttributes({ 'gen_ai.usage.input_tokens': usage.inputTokens, 'gen_ai.usage.output_tokens': usage.outputTokens });
        }
        this.span.setAttribute('rx_agent.run.end_reason', event.reason);
        // Calls of tools the client runs: their spans end with the run, marked as left to the client.
        if (event.clientCalls) for (const call of event.clientCalls) this.tools.get(call.callId)?.setAttribute('rx_agent.tool.client', true);
        this.end();
        return;
      }
      case 'tool-progress':
        // A sub-agent's event (`agent.asTool()`), each of its text deltas included: left to its own
        // spans. A tool's own report is an event of its call's span.
        if (!isRunEvent(event.value)) this.spanEvent(event);
        return;
      default:
        if (!OWN_EVENTS.has(event.type)) this.spanEvent(event);
    }
  }

  /** Another middleware's event, as a span event of the span it belongs to. */
  private spanEvent(event: AgentEvent): void {
    const fields = event as unknown as Record<string, unknown>;
    const span = this.spanFor(fields);
    if (span.isRecording()) span.addEvent(event.type, eventAttributes(fields, this.captureContent));
    const requestId = fields.requestId;
    if (typeof requestId === 'string' && event.type !== 'request-expired') this.requests.set(requestId, span);
    else if (typeof requestId === 'string') this.requests.delete(requestId);
  }

  /** The span an event belongs to: its tool call's, its request's, the open model call's, or the run's. */
  private spanFor(fields: Record<string, unknown>): Span {
    const callId = fields.callId;
    if (typeof callId === 'string') {
      const tool = this.tools.get(callId);
      if (tool) return tool;
    }
    const requestId = fields.requestId;
    if (typeof requestId === 'string') {
      const asked = this.requests.get(requestId);
      if (asked) return asked;
    }
    return this.chat();
  }

  response(response: AgentResponse, callId: string | undefined): void {
    if (this.ended) return;
    // A resumed run finds an answer given while it was suspended without asking again: the call
    // the request is about tells where the answer belongs.
    const span = this.requests.get(response.requestId) ?? (callId !== undefined ? this.tools.get(callId) : undefined) ?? this.span;
    this.requests.delete(response.requestId);
    if (span.isRecording()) span.addEvent(response.type, eventAttributes(response, this.captureContent, true));
  }

  usage(usage: Usage, model: string | undefined, provider?: string): void {
    if (this.ended) return;
    this.usageReported = true;
    const attributes: Attributes = { 'gen_ai.operation.name': 'chat' };
    if (provider !== undefined) attributes['gen_ai.provider.name'] = provider;
    if (model !== undefined) attributes['gen_ai.request.model'] = model;
    recordTokens(this.instruments, usage.inputTokens, usage.outputTokens, attributes);
    this.chat().addEvent('usage-reported', {
      ...attributes,
      'gen_ai.usage.input_tokens': usage.inputTokens,
      'gen_ai.usage.output_tokens': usage.outputTokens,
    });
  }

  closed(): void {
    if (this.ended) return;
    // The consumer left before `run-end`.
    this.span.setAttribute('rx_agent.run.end_reason', 'unsubscribed');
    this.end();
  }

  /** Ends every span still open (a cancelled run's tool calls, its model call), then the run's. */
  private end(): void {
    this.ended = true;
    this.finishPending(undefined);
    for (const chat of this.chats) chat.end();
    this.chats = [];
    for (const span of this.tools.values()) span.end();
    this.tools.clear();
    this.requests.clear();
    this.span.end();
  }
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The span context a journal keeps as a W3C `traceparent` (and `tracestate`); undefined when it holds none that is valid. */
function parseTraceContext(kept: Readonly<Record<string, string>>): SpanContext | undefined {
  const match = typeof kept.traceparent === 'string' ? TRACEPARENT.exec(kept.traceparent.trim()) : null;
  if (!match || match[1] === 'ff' || (match[1] === '00' && match[5] !== undefined)) return undefined;
  const spanContext: SpanContext = { traceId: match[2], spanId: match[3], traceFlags: parseInt(match[4], 16), isRemote: true };
  if (typeof kept.tracestate === 'string' && kept.tracestate !== '') spanContext.traceState = createTraceState(kept.tracestate);
  return trace.isSpanContextValid(spanContext) ? spanContext : undefined;
}

function recordTokens(instruments: Instruments, input: number, output: number, attributes: Attributes): void {
  instruments.tokens.record(input, { ...attributes, 'gen_ai.token.type': 'input' });
  instruments.tokens.record(output, { ...attributes, 'gen_ai.token.type': 'output' });
}

/** The `wrapModel` of telemetry: each subscription (each attempt) is a `chat` span. */
function chatSpan(run: RunTrace, ctx: ModelCallContext): MonoTypeOperatorFunction<ModelUpdate> {
  return (source) => new ChatCall(run, ctx, source);
}

class ChatCall extends Observable<ModelUpdate> {
  constructor(
    private readonly run: RunTrace,
    private readonly ctx: ModelCallContext,
    private readonly inner: Observable<ModelUpdate>,
  ) {
    super();
  }

  /** @internal rxjs 7's subscribe calls `_subscribe`. */
  protected _subscribe(subscriber: Subscriber<ModelUpdate>): void {
    const { run, ctx } = this;
    const { request } = ctx;
    const model = typeof request.settings.model === 'string' ? request.settings.model : typeof ctx.client.model === 'string' ? ctx.client.model : undefined;
    const provider = typeof ctx.client.provider === 'string' ? ctx.client.provider : undefined;
    const metricAttributes: Attributes = { 'gen_ai.operation.name': 'chat' };
    if (provider !== undefined) metricAttributes['gen_ai.provider.name'] = provider;
    if (model !== undefined) metricAttributes['gen_ai.request.model'] = model;
    const attributes: Attributes = { ...metricAttributes };
    if (run.conversationId !== undefined) attributes['gen_ai.conversation.id'] = run.conversationId;
    const { temperature, maxTokens } = request.settings;
    if (typeof temperature === 'number') attributes['gen_ai.request.temperature'] = temperature;
    if (typeof maxTokens === 'number') attributes['gen_ai.request.max_tokens'] = maxTokens;
    const started = performance.now();
    // With content its end is given later, as a time: its start is given too, on the same clock.
    const options = run.captureContent ? { kind: SpanKind.CLIENT, attributes, startTime: started } : { kind: SpanKind.CLIENT, attributes };
    const span = run.tracer.startSpan(model === undefined ? 'chat' : `chat ${model}`, options, run.context);
    // The conversation is serialized only for a span that keeps it (not one sampled out).
    if (run.captureContent && span.isRecording()) {
      span.setAttribute('gen_ai.input.messages', JSON.stringify(request.messages.map(inputMessage)));
      if (request.instructions !== undefined)
        span.setAttribute('gen_ai.system_instructions', JSON.stringify([{ type: 'text', content: request.instructions }]));
    }
    run.chatStarted(span, provider, model);
    const sink = new ChatSink(subscriber, run, span, metricAttributes, ctx.iteration, started, context.active());
    // The model client is called during subscribe: its own instrumented calls (HTTP) nest under the span.
    context.with(trace.setSpan(run.context, span), () => this.inner.subscribe(sink));
  }
}

/** Follows one attempt's updates: a type check per text delta, the rest is read at the end. */
class ChatSink extends LinkedSubscriber<ModelUpdate> {
  private usage: { inputTokens: number; outputTokens: number } | undefined = undefined;
  private finishReason: string | undefined = undefined;
  private responseModel: string | undefined = undefined;
  private done = false;

  constructor(
    destination: Subscriber<ModelUpdate>,
    private readonly run: RunTrace,
    private readonly span: Span,
    private readonly metricAttributes: Attributes,
    private readonly iteration: number,
    /** `performance.now()` when the call began. */
    private readonly started: number,
    /**
     * The context the call was made in. The client's callbacks (a stream read in promises) carry
     * the span's context, and the run goes on from its end: it goes on in this one instead.
     */
    private readonly outer: Context,
  ) {
    super(destination);
  }

  override next(update: ModelUpdate): void {
    if (this.isStopped) return;
    if (update.type !== 'text-delta') {
      if (update.type === 'usage') {
        // Summed, as the run sums them: a client may report input and output tokens apart.
        const before = this.usage;
        this.usage = before
          ? { inputTokens: before.inputTokens + update.inputTokens, outputTokens: before.outputTokens + update.outputTokens }
          : { inputTokens: update.inputTokens, outputTokens: update.outputTokens };
      } else if (update.type === 'finish') {
        this.finishReason = update.reason;
        if (update.model !== undefined) this.responseModel = update.model;
      }
    }
    this.destination.next(update);
  }

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.settle(error, true);
    context.with(this.outer, () => super.error(error));
  }

  override complete(): void {
    if (this.isStopped) return;
    this.settle(undefined, false);
    context.with(this.outer, () => super.complete());
  }

  override unsubscribe(): void {
    if (!this.done && !this.isStopped) {
      // Torn down before its end: an outer timeout, a retry's cancel, the run cancelled.
      this.span.addEvent('cancelled');
      this.settle(undefined, true, true);
    }
    super.unsubscribe();
  }

  /** `failed`: it errored, or (`cancelled`) was torn down before its end. */
  private settle(error: unknown, failed: boolean, cancelled = false): void {
    if (this.done) return;
    this.done = true;
    const { span, run } = this;
    const end = performance.now();
    const attributes: Attributes = { ...this.metricAttributes };
    if (this.responseModel !== undefined) {
      attributes['gen_ai.response.model'] = this.responseModel;
      span.setAttribute('gen_ai.response.model', this.responseModel);
    }
    if (this.usage) {
      run.usageReported = true;
      span.setAttribute('gen_ai.usage.input_tokens', this.usage.inputTokens);
      span.setAttribute('gen_ai.usage.output_tokens', this.usage.outputTokens);
      recordTokens(run.instruments, this.usage.inputTokens, this.usage.outputTokens, attributes);
    }
    if (this.finishReason !== undefined) span.setAttribute('gen_ai.response.finish_reasons', [FINISH_REASONS[this.finishReason] ?? this.finishReason]);
    if (failed) {
      const type = cancelled ? CANCELLED : errorType(error);
      attributes['error.type'] = type;
      span.setAttribute('error.type', type);
      span.setStatus({ code: SpanStatusCode.ERROR, message: cancelled ? 'Cancelled before its end' : errorText(error) });
    }
    run.instruments.duration.record((end - this.started) / 1000, attributes);
    if (run.captureContent && !failed && span.isRecording()) {
      // Its output is recorded once the run holds the answer (after every wrapper: redacted, say).
      run.chatEnded(span, { span, end, iteration: this.iteration, finishReason: this.finishReason });
    } else {
      run.chatEnded(span, undefined);
      span.end();
    }
  }
}

/** The run's finish reasons as the conventions spell them (OpenAI's values). */
const FINISH_REASONS: Record<string, string> = { stop: 'stop', 'tool-calls': 'tool_calls', length: 'length', 'content-filter': 'content_filter' };

/**
 * The `wrapFunction` of telemetry: the tool runs with its `execute_tool` span active, and its
 * outcome comes back in the context the call was made in (the run goes on from there, not from
 * inside the tool's span, which the tool's own promises would carry).
 */
function toolContext(run: RunTrace, ctx: FunctionContext): MonoTypeOperatorFunction<ToolOutcome> {
  return (source) =>
    new Observable<ToolOutcome>((subscriber) => {
      const outer = context.active();
      const span = run.toolSpan(ctx.callId);
      // The span began with the call's announcement: an approval or a sequential queue may have come first.
      span?.addEvent('started');
      return context.with(span ? trace.setSpan(run.context, span) : run.context, () =>
        source.subscribe({
          next: (outcome) => context.with(outer, () => subscriber.next(outcome)),
          error: (error: unknown) => context.with(outer, () => subscriber.error(error)),
          complete: () => context.with(outer, () => subscriber.complete()),
        }),
      );
    });
}

/** A `tool-progress` value that is an event of a run: a sub-agent's, as `agent.asTool()` reports them. */
function isRunEvent(value: unknown): boolean {
  return typeof value === 'object' && value !== null && typeof (value as AgentEvent).type === 'string' && typeof (value as AgentEvent).runId === 'string';
}

/** `error.type`: the error's `name` (a class's, e.g. `ModelError`), or `_OTHER`. */
function errorType(error: unknown): string {
  const name = (error as { name?: unknown } | null)?.name;
  return typeof name === 'string' && name !== '' ? name : '_OTHER';
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function json(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * An event's fields as span event attributes: scalars and string lists; content only when asked.
 * `reason` is content where a person wrote it (`reasonIsContent`: an answer), not where it is a
 * code (`request-expired`'s `timeout`, say).
 */
function eventAttributes(fields: Record<string, unknown>, captureContent: boolean, reasonIsContent = false): Attributes {
  const attributes: Attributes = {};
  for (const key of Object.keys(fields)) {
    if (key === 'type' || key === 'runId') continue;
    const value = fields[key];
    if (key === 'error' && value !== null && typeof value === 'object') {
      attributes['error.type'] = errorType(value);
      continue;
    }
    if (CONTENT_FIELDS.has(key) || (key === 'reason' && reasonIsContent)) {
      if (captureContent) attributes[key] = json(value);
      continue;
    }
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') attributes[key] = value;
    else if (Array.isArray(value) && value.every((v) => typeof v === 'string')) attributes[key] = value;
  }
  return attributes;
}

/** A message in the conventions' `gen_ai.input.messages` shape. */
function inputMessage(message: Message): { role: string; parts: unknown[] } {
  return { role: message.role, parts: message.content.map(partOf) };
}

function outputMessage(message: Message, finishReason: string | undefined): { role: string; parts: unknown[]; finish_reason?: string } {
  const out: { role: string; parts: unknown[]; finish_reason?: string } = inputMessage(message);
  if (finishReason !== undefined) out.finish_reason = FINISH_REASONS[finishReason] ?? finishReason;
  return out;
}

function partOf(part: Message['content'][number]): unknown {
  switch (part.type) {
    case 'text':
      return { type: 'text', content: part.text };
    case 'tool-call':
      return { type: 'tool_call', id: part.callId, name: part.name, arguments: part.args };
    case 'tool-result':
      return { type: 'tool_call_response', id: part.callId, response: part.result };
    case 'reasoning':
      return { type: 'reasoning', content: part.text };
    default:
      return { type: (part as { type: string }).type };
  }
}
