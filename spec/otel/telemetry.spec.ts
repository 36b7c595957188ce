import { AsyncLocalStorage } from 'node:async_hooks';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, trace, type Context, type ContextManager } from '@opentelemetry/api';
import { AggregationTemporality, MeterProvider, MetricReader, type HistogramMetricData } from '@opentelemetry/sdk-metrics';
import { AlwaysOffSampler, BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Observable, Subject, concatMap, filter, ignoreElements, lastValueFrom, map, merge, of, switchMap, tap, timer, toArray } from 'rxjs';
import { z } from 'zod';
import {
  ModelError,
  createAgent,
  createSession,
  defineClientTool,
  defineTool,
  type AgentMiddleware,
  type AgentResponse,
  type ModelClient,
  type ModelUpdate,
} from 'rx-agent';
import { modelFallback, modelRetry, modelTimeout, permissions, piiRedaction, summarization } from 'rx-agent/operators';
import { telemetry } from 'rx-agent/otel';
import { scriptedModel, type ScriptedTurn } from 'rx-agent/testing';

/** The context manager Node SDKs register (AsyncLocalStorage), in a few lines. */
class AsyncContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.storage.run(ctx, () => fn.apply(thisArg, args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.storage.disable();
    return this;
  }
}

/** Collects every metric point on demand. */
class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

function setup(options: { captureContent?: boolean } = {}) {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const reader = new TestReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const middleware = telemetry({ tracer: provider.getTracer('test'), meter: meterProvider.getMeter('test'), ...options });
  const spans = () => exporter.getFinishedSpans();
  const histograms = async () => {
    const { resourceMetrics } = await reader.collect();
    return resourceMetrics.scopeMetrics.flatMap((s) => s.metrics) as HistogramMetricData[];
  };
  return { middleware, spans, histograms };
}

/** A scripted model that names its provider and ends with the model that answered. */
function providerModel(turns: readonly ScriptedTurn[], provider: string, responseModel?: string): ModelClient {
  const inner = scriptedModel(turns);
  const client = (request: Parameters<ModelClient>[0]) =>
    inner(request).pipe(map((u): ModelUpdate => (u.type === 'finish' && responseModel ? { ...u, model: responseModel } : u)));
  return Object.assign(client, { provider });
}

const named = (spans: readonly ReadableSpan[], name: string) => spans.filter((s) => s.name === name);
const one = (spans: readonly ReadableSpan[], name: string) => {
  const found = named(spans, name);
  expect(found).toHaveLength(1);
  return found[0];
};
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
const ms = (t: [number, number]) => t[0] * 1000 + t[1] / 1e6;

const slowTool = (name: string, delay: number) =>
  defineTool({
    name,
    description: `${name} something`,
    parameters: z.object({ q: z.string() }),
    execute: ({ q }) => lastValueFrom(timer(delay).pipe(map(() => `${name}:${q}`))),
  });

const retryable = () => new ModelError('overloaded', { retryable: true, status: 529 });

describe('telemetry', () => {
  it('makes one invoke_agent span with a chat span per attempt (retry, fallback) and parallel execute_tool spans under it', async () => {
    const { middleware, spans } = setup();
    const primary = providerModel(
      [{ error: retryable() }, { error: retryable() }, { text: 'All done.', usage: { inputTokens: 30, outputTokens: 4 } }],
      'openai',
    );
    const fallback = providerModel(
      [
        {
          toolCalls: [
            { name: 'search', args: { q: 'a' }, callId: 'c1' },
            { name: 'lookup', args: { q: 'b' }, callId: 'c2' },
          ],
          usage: { inputTokens: 20, outputTokens: 9 },
        },
      ],
      'anthropic',
    );
    const agent = createAgent({
      name: 'helper',
      model: primary,
      settings: { model: 'gpt-4o' },
      tools: [slowTool('search', 30), slowTool('lookup', 30)],
      middleware: [modelFallback(fallback), modelRetry({ maxRetries: 1, initialDelayMs: 1, jitter: 0 }), middleware],
    });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });

    const all = spans();
    const run = one(all, 'invoke_agent helper');
    expect(run.kind).toBe(SpanKind.INTERNAL);
    expect(parentOf(run)).toBeUndefined();
    const chats = named(all, 'chat gpt-4o');
    // Two failed attempts on the agent's model, one on the fallback, then the second iteration's call.
    expect(chats).toHaveLength(4);
    const ordered = [...chats].sort((a, b) => ms(a.startTime) - ms(b.startTime));
    expect(ordered.map((s) => s.status.code)).toEqual([SpanStatusCode.ERROR, SpanStatusCode.ERROR, SpanStatusCode.UNSET, SpanStatusCode.UNSET]);
    expect(ordered.map((s) => s.attributes['gen_ai.provider.name'])).toEqual(['openai', 'openai', 'anthropic', 'openai']);
    for (const chat of chats) {
      expect(chat.kind).toBe(SpanKind.CLIENT);
      expect(parentOf(chat)).toBe(run.spanContext().spanId);
      expect(chat.spanContext().traceId).toBe(run.spanContext().traceId);
    }
    expect(ordered[0]?.attributes['error.type']).toBe('ModelError');

    const search = one(all, 'execute_tool search');
    const lookup = one(all, 'execute_tool lookup');
    expect(parentOf(search)).toBe(run.spanContext().spanId);
    expect(parentOf(lookup)).toBe(run.spanContext().spanId);
    // They ran at the same time: each started before the other ended.
    expect(ms(search.startTime)).toBeLessThan(ms(lookup.endTime));
    expect(ms(lookup.startTime)).toBeLessThan(ms(search.endTime));
    expect(search.attributes).toMatchObject({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'search', 'gen_ai.tool.call.id': 'c1' });
    expect(lookup.attributes).toMatchObject({ 'gen_ai.tool.name': 'lookup', 'gen_ai.tool.call.id': 'c2' });

    // The other middleware's events are span events of the run.
    const names = run.events.map((e) => e.name);
    expect(names.filter((n) => n === 'model-retry')).toHaveLength(1);
    expect(names).toContain('model-fallback');
    expect(run.events.find((e) => e.name === 'model-fallback')?.attributes).toMatchObject({ from: 0, to: 1, 'error.type': 'ModelError' });
    expect(run.attributes).toMatchObject({ 'gen_ai.usage.input_tokens': 50, 'gen_ai.usage.output_tokens': 13 });
  });

  it('registered before modelRetry (as advised), makes one chat span and one duration point of a retried call; after it, one of each attempt', async () => {
    const slowThenFast = () => scriptedModel([{ text: 'late', delay: 200 }, { text: 'on time' }]);
    const durations = async (histograms: () => Promise<HistogramMetricData[]>) =>
      (await histograms())
        .find((m) => m.descriptor.name === 'gen_ai.client.operation.duration')!
        .dataPoints.map((p) => [p.attributes['error.type'], p.value.count]);

    // Advised: the span covers the logical call, its retries included, and the retry is an event of it.
    const advised = setup();
    const outermost = createAgent({
      name: 't',
      model: slowThenFast(),
      settings: { model: 'm' },
      middleware: [advised.middleware, modelRetry({ maxRetries: 1, initialDelayMs: 1, jitter: 0 }), modelTimeout({ firstTokenMs: 20 })],
    });
    expect((await lastValueFrom(outermost.run('go').pipe(toArray()))).at(-1)).toMatchObject({ reason: 'completed', text: 'on time' });
    const only = one(advised.spans(), 'chat m');
    expect(only.status.code).toBe(SpanStatusCode.UNSET);
    expect(only.attributes['error.type']).toBeUndefined();
    expect(only.events.map((e) => [e.name, e.attributes?.['error.type']])).toEqual([['model-retry', 'ModelTimeoutError']]);
    expect(await durations(advised.histograms)).toEqual([[undefined, 1]]);

    // After modelRetry and before modelTimeout: each attempt, the timed-out one failing with ModelTimeoutError.
    const inner = setup();
    const agent = createAgent({
      name: 't',
      model: slowThenFast(),
      settings: { model: 'm' },
      middleware: [modelRetry({ maxRetries: 1, initialDelayMs: 1, jitter: 0 }), inner.middleware, modelTimeout({ firstTokenMs: 20 })],
    });
    expect((await lastValueFrom(agent.run('go').pipe(toArray()))).at(-1)).toMatchObject({ reason: 'completed', text: 'on time' });
    const attempts = named(inner.spans(), 'chat m').sort((a, b) => ms(a.startTime) - ms(b.startTime));
    expect(attempts.map((s) => s.attributes['error.type'])).toEqual(['ModelTimeoutError', undefined]);
    expect(attempts.map((s) => s.events.map((e) => e.name))).toEqual([[], []]);
    const points = await durations(inner.histograms);
    expect(points).toHaveLength(2);
    expect(points).toEqual(
      expect.arrayContaining([
        ['ModelTimeoutError', 1],
        [undefined, 1],
      ]),
    );
  });

  it("keeps a model call's events on its chat span after a side request made meanwhile has ended", async () => {
    const { middleware, spans } = setup();
    // Registered outside telemetry: 5 ms into the call it asks another model aside (ctx.call), which
    // answers at once; at the call's finish it reports usage of its own.
    const aside: AgentMiddleware = {
      name: 'aside',
      wrapModel: (ctx) => (source) =>
        merge(
          source.pipe(tap((update) => update.type === 'finish' && ctx.reportUsage({ inputTokens: 1, outputTokens: 1 }, { model: 'checker' }))),
          timer(5).pipe(
            switchMap(() => ctx.call(undefined, scriptedModel(['aside']))),
            ignoreElements(),
          ),
        ),
    };
    const agent = createAgent({ name: 't', model: scriptedModel([{ text: 'main', delay: 30 }]), settings: { model: 'm' }, middleware: [aside, middleware] });
    expect((await lastValueFrom(agent.run('go').pipe(toArray()))).at(-1)).toMatchObject({ reason: 'completed', text: 'main' });
    const [main, side] = named(spans(), 'chat m').sort((a, b) => ms(a.startTime) - ms(b.startTime));
    expect(ms(side.endTime)).toBeLessThan(ms(main.endTime));
    expect(main.events.map((e) => e.name)).toEqual(['usage-reported']);
    expect(one(spans(), 'invoke_agent t').events.map((e) => e.name)).toEqual([]);
  });

  it('sets every GenAI attribute it knows: operation, provider, models, agent, conversation, usage, finish reasons', async () => {
    const { middleware, spans } = setup();
    const model = providerModel(
      [
        { toolCalls: [{ name: 'search', args: { q: 'x' }, callId: 'call-7' }], usage: { inputTokens: 12, outputTokens: 5 } },
        { text: 'Found.', usage: { inputTokens: 20, outputTokens: 2 } },
      ],
      'openai',
      'gpt-4o-mini-2024-07-18',
    );
    const session = createSession({ id: 'conv-1' });
    const agent = createAgent({
      name: 'finder',
      model,
      settings: { model: 'gpt-4o-mini', temperature: 0.2, maxTokens: 100 },
      tools: [slowTool('search', 1)],
      middleware: [middleware],
    });
    await lastValueFrom(agent.run('find x', { session }).pipe(toArray()));

    const all = spans();
    const run = one(all, 'invoke_agent finder');
    expect(run.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'finder',
      'gen_ai.conversation.id': 'conv-1',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'gpt-4o-mini',
      'gen_ai.usage.input_tokens': 32,
      'gen_ai.usage.output_tokens': 7,
    });
    // Told apart by their finish reasons, not by start time: two spans started within a millisecond may tie.
    const chats = named(all, 'chat gpt-4o-mini');
    expect(chats).toHaveLength(2);
    const askedForTools = (span: ReadableSpan) => (span.attributes['gen_ai.response.finish_reasons'] as string[] | undefined)?.includes('tool_calls');
    const first = chats.find(askedForTools)!;
    const second = chats.find((span) => !askedForTools(span))!;
    expect(first?.attributes).toEqual({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'gpt-4o-mini',
      'gen_ai.conversation.id': 'conv-1',
      'gen_ai.request.temperature': 0.2,
      'gen_ai.request.max_tokens': 100,
      'gen_ai.response.model': 'gpt-4o-mini-2024-07-18',
      'gen_ai.usage.input_tokens': 12,
      'gen_ai.usage.output_tokens': 5,
      'gen_ai.response.finish_reasons': ['tool_calls'],
    });
    expect(second?.attributes['gen_ai.response.finish_reasons']).toEqual(['stop']);
    expect(one(all, 'execute_tool search').attributes).toEqual({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'search',
      'gen_ai.tool.call.id': 'call-7',
      'gen_ai.tool.type': 'function',
      'gen_ai.conversation.id': 'conv-1',
    });
  });

  it('marks the execute_tool span of a call left to the client, ended with the run', async () => {
    const { middleware, spans } = setup();
    const pickColor = defineClientTool({ name: 'pick_color', description: 'Asks the user', parameters: { type: 'object', properties: {} } });
    const agent = createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'pick_color', args: {}, callId: 'c1' }] }]),
      tools: [pickColor],
      middleware: [middleware],
    });
    await lastValueFrom(agent.run('Pick').pipe(toArray()));
    const call = one(spans(), 'execute_tool pick_color');
    expect(call.attributes['rx_agent.tool.client']).toBe(true);
    expect(call.status.code).toBe(SpanStatusCode.UNSET);
    expect(parentOf(call)).toBe(one(spans(), 'invoke_agent agent').spanContext().spanId);
  });

  it('records errors: a failing tool on its span, a failing model on the chat and run spans', async () => {
    const { middleware, spans } = setup();
    const broken = defineTool({
      name: 'broken',
      description: 'fails',
      parameters: z.object({}),
      execute: () => {
        throw new RangeError('out of range');
      },
    });
    const model = scriptedModel([
      { toolCalls: [{ name: 'broken', args: {}, callId: 'b1' }] },
      { error: new ModelError('bad key', { retryable: false, status: 401 }) },
    ]);
    const agent = createAgent({ name: 'a', model, settings: { model: 'm' }, tools: [broken], middleware: [middleware] });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });

    const all = spans();
    const tool = one(all, 'execute_tool broken');
    expect(tool.status).toEqual({ code: SpanStatusCode.ERROR, message: 'out of range' });
    expect(tool.attributes['error.type']).toBe('RangeError');
    const failed = named(all, 'chat m').find((s) => s.status.code === SpanStatusCode.ERROR);
    expect(failed?.attributes['error.type']).toBe('ModelError');
    const run = one(all, 'invoke_agent a');
    expect(run.status).toEqual({ code: SpanStatusCode.ERROR, message: 'bad key' });
    expect(run.attributes).toMatchObject({ 'error.type': 'ModelError', 'rx_agent.run.end_reason': 'error' });
    expect(run.events.map((e) => e.name)).toContain('exception');
  });

  it("names a failing middleware and its hook on the run span's exception event", async () => {
    const { middleware, spans } = setup();
    const guard: AgentMiddleware = {
      name: 'guard',
      beforeIteration: map(() => {
        throw new TypeError('no');
      }),
    };
    await lastValueFrom(
      createAgent({ name: 'a', model: scriptedModel(['ok']), middleware: [middleware, guard] })
        .run('go')
        .pipe(toArray()),
    );
    const exception = one(spans(), 'invoke_agent a').events.find((e) => e.name === 'exception');
    expect(exception?.attributes).toEqual({
      'exception.type': 'TypeError',
      'exception.message': 'no',
      'rx_agent.error.source': 'middleware',
      'rx_agent.error.middleware': 'guard',
      'rx_agent.error.hook': 'beforeIteration',
    });
  });

  it.each([false, true])('puts permission requests and answers on the tool call span (captureContent %s)', async (captureContent) => {
    const { middleware, spans } = setup({ captureContent });
    const model = scriptedModel([{ toolCalls: [{ name: 'search', args: { q: 'x' }, callId: 'p1' }] }, 'ok']);
    const agent = createAgent({ name: 'a', model, tools: [slowTool('search', 1)], middleware: [permissions({ tools: { search: 'ask' } }), middleware] });
    const responses = new Subject<AgentResponse>();
    await lastValueFrom(
      agent.run('go', { responses }).pipe(
        tap((e) => {
          if (e.type === 'permission-request') responses.next({ type: 'permission-response', requestId: e.requestId, approved: false, reason: 'no' });
        }),
        toArray(),
      ),
    );
    const tool = one(spans(), 'execute_tool search');
    expect(tool.events.map((e) => e.name)).toEqual(['permission-request', 'permission-response']);
    expect(tool.events[1]?.attributes).toMatchObject({ approved: false });
    expect(tool.status.code).toBe(SpanStatusCode.ERROR);
    expect(tool.attributes['rx_agent.tool.denied']).toBe(true);
    // The person's reason is content: not in the trace without captureContent.
    const reasons = spans().flatMap((span) => span.events.filter((e) => e.attributes?.reason !== undefined).map((e) => [e.name, e.attributes?.reason]));
    expect(reasons).toEqual(captureContent ? [['permission-response', 'no']] : []);
  });

  it('attaches no message content by default', async () => {
    const { middleware, spans } = setup();
    const model = scriptedModel([{ toolCalls: [{ name: 'search', args: { q: 'secret' }, callId: 's1' }] }, 'The answer is secret.']);
    const agent = createAgent({ model, instructions: 'Be terse.', tools: [slowTool('search', 1)], middleware: [middleware] });
    await lastValueFrom(agent.run('tell me the secret').pipe(toArray()));
    const all = spans();
    expect(all.length).toBeGreaterThan(3);
    for (const span of all) {
      expect(JSON.stringify(span.attributes)).not.toContain('secret');
      expect(JSON.stringify(span.events)).not.toContain('secret');
      for (const key of [
        'gen_ai.input.messages',
        'gen_ai.output.messages',
        'gen_ai.system_instructions',
        'gen_ai.tool.call.arguments',
        'gen_ai.tool.call.result',
      ]) {
        expect(span.attributes[key]).toBeUndefined();
      }
    }
  });

  it.each(['before', 'after'])('with captureContent, records content as redacted by a piiRedaction registered %s it', async (where) => {
    const { middleware, spans } = setup({ captureContent: true });
    const redaction = piiRedaction({ rules: { email: 'redact' }, applyToOutput: true, applyToToolResults: true });
    const model = scriptedModel([{ toolCalls: [{ name: 'search', args: { q: 'x' }, callId: 's1' }] }, { text: ['Write to ', 'bob@example.com', ' now.'] }]);
    const tool = defineTool({ name: 'search', description: 'd', parameters: z.object({ q: z.string() }), execute: () => 'owner: carol@example.com' });
    const agent = createAgent({
      model,
      instructions: 'Be terse.',
      settings: { model: 'm' },
      tools: [tool],
      middleware: where === 'before' ? [redaction, middleware] : [middleware, redaction],
    });
    const events = await lastValueFrom(agent.run('Mail alice@example.com').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Write to [REDACTED_EMAIL] now.' });

    const all = spans();
    expect(JSON.stringify(all.map((s) => [s.attributes, s.events]))).not.toMatch(/alice@|bob@|carol@/);
    // Told apart by what they answered, not by start time: two spans started within a millisecond may tie.
    const chats = named(all, 'chat m');
    expect(chats).toHaveLength(2);
    const answeredWithCall = (span: ReadableSpan) => String(span.attributes['gen_ai.output.messages']).includes('"tool_call"');
    const first = chats.find(answeredWithCall)!;
    const second = chats.find((span) => !answeredWithCall(span))!;
    expect(JSON.parse(first?.attributes['gen_ai.input.messages'] as string)).toEqual([
      { role: 'user', parts: [{ type: 'text', content: 'Mail [REDACTED_EMAIL]' }] },
    ]);
    expect(JSON.parse(first?.attributes['gen_ai.system_instructions'] as string)).toEqual([{ type: 'text', content: 'Be terse.' }]);
    expect(JSON.parse(first?.attributes['gen_ai.output.messages'] as string)).toEqual([
      { role: 'assistant', parts: [{ type: 'tool_call', id: 's1', name: 'search', arguments: { q: 'x' } }], finish_reason: 'tool_calls' },
    ]);
    expect(JSON.parse(second?.attributes['gen_ai.output.messages'] as string)).toEqual([
      { role: 'assistant', parts: [{ type: 'text', content: 'Write to [REDACTED_EMAIL] now.' }], finish_reason: 'stop' },
    ]);
    // The chat span still ends when the model's stream did, before the tool ran.
    const toolSpan = one(all, 'execute_tool search');
    expect(ms(first.endTime)).toBeLessThanOrEqual(ms(toolSpan.startTime) + 1);
    expect(toolSpan.attributes).toMatchObject({ 'gen_ai.tool.call.arguments': '{"q":"x"}', 'gen_ai.tool.call.result': 'owner: [REDACTED_EMAIL]' });
  });

  it('records gen_ai.client.token.usage and gen_ai.client.operation.duration with the conventions attributes and buckets', async () => {
    const { middleware, histograms } = setup();
    const model = providerModel([{ error: retryable() }, { text: 'hi', usage: { inputTokens: 7, outputTokens: 3 } }], 'openai', 'gpt-x-1');
    const agent = createAgent({ model, settings: { model: 'gpt-x' }, middleware: [modelRetry({ maxRetries: 1, initialDelayMs: 1, jitter: 0 }), middleware] });
    await lastValueFrom(agent.run('hi').pipe(toArray()));

    const metrics = await histograms();
    const tokens = metrics.find((m) => m.descriptor.name === 'gen_ai.client.token.usage');
    expect(tokens?.descriptor.unit).toBe('{token}');
    const byType = Object.fromEntries(tokens!.dataPoints.map((p) => [p.attributes['gen_ai.token.type'], p]));
    expect(byType.input?.value.sum).toBe(7);
    expect(byType.output?.value.sum).toBe(3);
    expect(byType.input?.attributes).toEqual({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'gpt-x',
      'gen_ai.response.model': 'gpt-x-1',
      'gen_ai.token.type': 'input',
    });
    expect(byType.input?.value.buckets.boundaries).toEqual([1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]);

    const duration = metrics.find((m) => m.descriptor.name === 'gen_ai.client.operation.duration');
    expect(duration?.descriptor.unit).toBe('s');
    const points = duration!.dataPoints;
    const failed = points.find((p) => p.attributes['error.type'] === 'ModelError');
    const ok = points.find((p) => p.attributes['error.type'] === undefined);
    expect(failed?.value.count).toBe(1);
    expect(ok?.value.count).toBe(1);
    expect(ok?.attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-x' });
    expect(ok?.value.buckets.boundaries).toEqual([0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]);
  });

  it('counts a middleware’s own model call (reportUsage) in the token metric and as a span event', async () => {
    const { middleware, spans, histograms } = setup();
    const side: AgentMiddleware = {
      name: 'side',
      beforeIteration: (source) =>
        source.pipe(
          map((ctx) => {
            ctx.reportUsage({ inputTokens: 100, outputTokens: 10 }, { model: 'small' });
            return ctx;
          }),
        ),
    };
    const agent = createAgent({
      model: scriptedModel([{ text: 'x', usage: { inputTokens: 1, outputTokens: 1 } }]),
      settings: { model: 'big' },
      middleware: [side, middleware],
    });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', usage: { inputTokens: 101, outputTokens: 11 } });
    const run = spans().find((s) => s.name.startsWith('invoke_agent'));
    expect(run?.events.find((e) => e.name === 'usage-reported')?.attributes).toMatchObject({
      'gen_ai.request.model': 'small',
      'gen_ai.usage.input_tokens': 100,
    });
    const tokens = (await histograms()).find((m) => m.descriptor.name === 'gen_ai.client.token.usage');
    const small = tokens!.dataPoints.find((p) => p.attributes['gen_ai.request.model'] === 'small' && p.attributes['gen_ai.token.type'] === 'input');
    expect(small?.value.sum).toBe(100);
  });

  it('tells the provider of a reported model call (reportUsage { provider }) in the token metric', async () => {
    const { middleware, spans, histograms } = setup();
    // The summary model says which provider it talks to, as every model client may.
    const summarizer: ModelClient = Object.assign(scriptedModel([{ text: 'The gist.', usage: { inputTokens: 40, outputTokens: 4 } }]), {
      provider: 'anthropic',
      model: 'claude-small',
    });
    const agent = createAgent({
      model: scriptedModel([{ text: 'ok', usage: { inputTokens: 1, outputTokens: 1 } }]),
      settings: { model: 'big' },
      middleware: [summarization({ model: summarizer, trigger: { messages: 3 }, keep: { messages: 1 } }), middleware],
    });
    const history = ['one', 'two', 'three', 'four'].map((text) => ({ role: 'user' as const, content: [{ type: 'text' as const, text }] }));
    const events = await lastValueFrom(agent.run(history).pipe(toArray()));
    expect(events.find((e) => e.type === 'summarized')).toBeDefined();
    expect(events.at(-1)).toMatchObject({ type: 'run-end', usage: { inputTokens: 41, outputTokens: 5 } });
    const run = spans().find((s) => s.name.startsWith('invoke_agent'));
    expect(run?.events.find((e) => e.name === 'usage-reported')?.attributes).toMatchObject({
      'gen_ai.provider.name': 'anthropic',
      'gen_ai.request.model': 'claude-small',
    });
    const tokens = (await histograms()).find((m) => m.descriptor.name === 'gen_ai.client.token.usage');
    const input = tokens!.dataPoints.find((p) => p.attributes['gen_ai.request.model'] === 'claude-small' && p.attributes['gen_ai.token.type'] === 'input');
    expect(input?.attributes['gen_ai.provider.name']).toBe('anthropic');
    expect(input?.value.sum).toBe(40);
    // Without a provider the attribute is left out, not set to undefined.
    const small = createAgent({
      model: scriptedModel([{ text: 'x' }]),
      middleware: [{ name: 'side', beforeIteration: map((ctx) => (ctx.reportUsage({ inputTokens: 7, outputTokens: 0 }, { model: 'bare' }), ctx)) }, middleware],
    });
    await lastValueFrom(small.run('go').pipe(toArray()));
    const bare = (await histograms())
      .find((m) => m.descriptor.name === 'gen_ai.client.token.usage')!
      .dataPoints.find((p) => p.attributes['gen_ai.request.model'] === 'bare');
    expect(bare).toBeDefined();
    expect('gen_ai.provider.name' in bare!.attributes).toBe(false);
  });

  it('rejects a reported provider that is not a string with a TypeError naming it', async () => {
    const agent = createAgent({
      model: scriptedModel([{ text: 'x' }]),
      middleware: [{ name: 'side', beforeIteration: map((ctx) => (ctx.reportUsage({ inputTokens: 1, outputTokens: 0 }, { provider: 42 as never }), ctx)) }],
    });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.find((e) => e.type === 'error')).toMatchObject({
      error: { name: 'TypeError', message: expect.stringContaining("'provider' must be a string") },
    });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('ends every open span when the run is cancelled or its consumer leaves', async () => {
    const { middleware, spans } = setup();
    const hanging = defineTool({ name: 'wait', description: 'd', parameters: z.object({}), execute: () => new Observable<string>(() => undefined) });
    const agent = createAgent({
      name: 'c',
      model: scriptedModel([{ toolCalls: [{ name: 'wait', args: {}, callId: 'w1' }] }], { loop: true }),
      tools: [hanging],
      middleware: [middleware],
    });
    const controller = new AbortController();
    const done = lastValueFrom(agent.run('go', { signal: controller.signal }).pipe(toArray()));
    await lastValueFrom(timer(5));
    controller.abort();
    expect((await done).at(-1)).toMatchObject({ type: 'run-end', reason: 'cancelled' });
    expect(one(spans(), 'invoke_agent c').attributes['rx_agent.run.end_reason']).toBe('cancelled');
    expect(one(spans(), 'execute_tool wait')).toBeDefined();

    const sub = agent.run('again').subscribe();
    await lastValueFrom(timer(5));
    sub.unsubscribe();
    const runs = named(spans(), 'invoke_agent c');
    expect(runs).toHaveLength(2);
    expect(runs[1]?.attributes['rx_agent.run.end_reason']).toBe('unsubscribed');
    expect(named(spans(), 'execute_tool wait')).toHaveLength(2);

    // Left during a model call: the call's span ends first, saying so, then the run's.
    const slow = createAgent({ name: 's', model: scriptedModel([{ text: 'late', delay: 1000 }]), settings: { model: 'm' }, middleware: [middleware] });
    const leaving = slow.run('go').subscribe();
    await lastValueFrom(timer(5));
    leaving.unsubscribe();
    const chat = one(spans(), 'chat m');
    expect(chat.events.map((e) => e.name)).toEqual(['cancelled']);
    // Ended first: the processor exports spans as they end. (Not by endTime: the SDK anchors each
    // span's clock to Date.now() at its start, so two spans ending together can differ by ~1 ms.)
    const order = spans().map((span) => span.name);
    expect(order.indexOf('chat m')).toBeLessThan(order.indexOf('invoke_agent s'));
  });

  it('makes the tool call span the active one while the tool runs', async () => {
    const { middleware } = setup();
    context.setGlobalContextManager(new AsyncContextManager());
    try {
      let seen: string | undefined;
      const probe = defineTool({
        name: 'probe',
        description: 'd',
        parameters: z.object({}),
        execute: async () => {
          await Promise.resolve();
          seen = (trace.getActiveSpan() as unknown as ReadableSpan | undefined)?.name;
          return 'ok';
        },
      });
      const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'probe', args: {} }] }, 'done']), tools: [probe], middleware: [middleware] });
      await lastValueFrom(agent.run('go').pipe(toArray()));
      expect(seen).toBe('execute_tool probe');
    } finally {
      context.disable();
    }
  });

  it("goes on in the caller's context after a model call and after a tool: later hooks, the consumer and a chained run see no ended span", async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    const tracer = provider.getTracer('test');
    const middleware = telemetry({ tracer });
    context.setGlobalContextManager(new AsyncContextManager());
    try {
      const active = () => (trace.getActiveSpan() as unknown as ReadableSpan | undefined)?.name ?? 'none';
      const seen: string[] = [];
      const spy: AgentMiddleware = {
        name: 'spy',
        beforeIteration: map((ctx) => (seen.push(`beforeIteration ${ctx.iteration}: ${active()}`), ctx)),
        afterIteration: map((ctx) => (seen.push(`afterIteration ${ctx.iteration}: ${active()}`), ctx)),
      };
      const lookup = slowTool('lookup', 5);
      // Delays on the async scheduler: the model's updates come from timers set inside the call.
      const model = scriptedModel([
        { toolCalls: [{ name: 'lookup', args: { q: 'x' } }], delay: 5 },
        { text: 'done', delay: 5 },
      ]);
      const first = createAgent({ name: 'first', model, tools: [lookup], middleware: [spy, middleware] });
      const second = createAgent({ name: 'second', model: scriptedModel([{ text: 'again', delay: 5 }]), middleware: [middleware] });
      const request = tracer.startSpan('request');
      await context.with(trace.setSpan(context.active(), request), () =>
        lastValueFrom(
          first.run('go').pipe(
            tap((event) => event.type === 'run-end' && seen.push(`run-end: ${active()}`)),
            filter((event) => event.type === 'run-end'),
            concatMap(() => second.run('again')),
            toArray(),
          ),
        ),
      );
      request.end();
      expect(seen).toEqual([
        'beforeIteration 0: request',
        'afterIteration 0: request',
        'beforeIteration 1: request',
        'afterIteration 1: request',
        'run-end: request',
      ]);
      const spans = exporter.getFinishedSpans();
      expect(parentOf(one(spans, 'invoke_agent second'))).toBe(one(spans, 'request').spanContext().spanId);
    } finally {
      context.disable();
    }
  });

  it("goes on in the caller's context after a model call that failed: the run's error and end are seen there", async () => {
    const { middleware } = setup();
    const tracer = new BasicTracerProvider().getTracer('caller');
    context.setGlobalContextManager(new AsyncContextManager());
    try {
      const active = () => (trace.getActiveSpan() as unknown as ReadableSpan | undefined)?.name ?? 'none';
      const seen: string[] = [];
      // The failure comes from a timer set inside the call, in the chat span's context.
      const agent = createAgent({ model: scriptedModel([{ error: retryable(), delay: 5 }]), middleware: [middleware] });
      const request = tracer.startSpan('request');
      await context.with(trace.setSpan(context.active(), request), () =>
        lastValueFrom(
          agent.run('go').pipe(
            tap((event) => (event.type === 'error' || event.type === 'run-end') && seen.push(`${event.type}: ${active()}`)),
            toArray(),
          ),
        ),
      );
      request.end();
      expect(seen).toEqual(['error: request', 'run-end: request']);
    } finally {
      context.disable();
    }
  });

  it("marks when a tool began on its span: sequential calls' spans start together, their started events one after the other", async () => {
    const { middleware, spans } = setup();
    const calls = [
      { name: 'a', args: { q: '1' }, callId: 'c1' },
      { name: 'b', args: { q: '2' }, callId: 'c2' },
    ];
    const agent = createAgent({
      model: scriptedModel([{ toolCalls: calls }, 'done']),
      tools: [slowTool('a', 40), slowTool('b', 40)],
      toolExecution: 'sequential',
      middleware: [middleware],
    });
    await lastValueFrom(agent.run('go').pipe(toArray()));
    const [a, b] = [one(spans(), 'execute_tool a'), one(spans(), 'execute_tool b')];
    const started = (span: ReadableSpan) => span.events.filter((e) => e.name === 'started').map((e) => ms(e.time));
    expect(started(a)).toHaveLength(1);
    expect(started(b)).toHaveLength(1);
    // b waited behind a: its span covers the wait, its started event comes after a's end.
    expect(started(b)[0]).toBeGreaterThanOrEqual(ms(a.endTime) - 1);
    expect(ms(b.startTime)).toBeLessThan(ms(a.endTime));
  });

  it('records a model call torn down before its end as failed with AbortError, on its span and its duration point', async () => {
    const { middleware, spans, histograms } = setup();
    const slow = createAgent({
      name: 's',
      model: scriptedModel([{ text: ['a', 'b', 'c'], delay: 1000 }], { loop: true }),
      settings: { model: 'm' },
      middleware: [middleware],
    });
    // Its consumer leaves; then a run cancelled through its signal.
    const leaving = slow.run('go').subscribe();
    await lastValueFrom(timer(5));
    leaving.unsubscribe();
    const controller = new AbortController();
    const cancelled = lastValueFrom(slow.run('go', { signal: controller.signal }).pipe(toArray()));
    await lastValueFrom(timer(5));
    controller.abort();
    expect((await cancelled).at(-1)).toMatchObject({ type: 'run-end', reason: 'cancelled' });

    const chats = named(spans(), 'chat m');
    expect(chats).toHaveLength(2);
    for (const chat of chats) {
      expect(chat.attributes['error.type']).toBe('AbortError');
      expect(chat.status.code).toBe(SpanStatusCode.ERROR);
      expect(chat.events.map((e) => e.name)).toEqual(['cancelled']);
    }
    const duration = (await histograms()).find((m) => m.descriptor.name === 'gen_ai.client.operation.duration');
    expect(duration!.dataPoints.map((p) => [p.attributes['error.type'], p.value.count])).toEqual([['AbortError', 2]]);
  });

  it("leaves the run's usage out when no model said what it used (not 0 tokens), and keeps reported zeros", async () => {
    const { middleware, spans } = setup();
    await lastValueFrom(
      createAgent({ name: 'silent', model: scriptedModel(['hi']), middleware: [middleware] })
        .run('go')
        .pipe(toArray()),
    );
    const silent = one(spans(), 'invoke_agent silent');
    expect(silent.attributes['rx_agent.run.end_reason']).toBe('completed');
    expect(silent.attributes['gen_ai.usage.input_tokens']).toBeUndefined();
    expect(silent.attributes['gen_ai.usage.output_tokens']).toBeUndefined();

    await lastValueFrom(
      createAgent({ name: 'cached', model: scriptedModel([{ text: 'hi', usage: { inputTokens: 0, outputTokens: 0 } }]), middleware: [middleware] })
        .run('go')
        .pipe(toArray()),
    );
    expect(one(spans(), 'invoke_agent cached').attributes).toMatchObject({ 'gen_ai.usage.input_tokens': 0, 'gen_ai.usage.output_tokens': 0 });
  });

  it('with captureContent, serializes no content for spans that are not recorded (sampled out)', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ sampler: new AlwaysOffSampler(), spanProcessors: [new SimpleSpanProcessor(exporter)] });
    // JSON.stringify calls of a run: the runtime's own (and zod's, compiling a new schema) are the same with content or without.
    const stringifyCalls = async (captureContent: boolean) => {
      const reporting = defineTool({
        name: 'search',
        description: 'd',
        parameters: z.object({ q: z.string() }),
        execute: ({ q }, ctx) => {
          ctx.progress({ done: 1 });
          return { found: q };
        },
      });
      const agent = createAgent({
        model: scriptedModel([{ toolCalls: [{ name: 'search', args: { q: 'x' }, callId: 's1' }] }, 'Found x.']),
        instructions: 'Be terse.',
        tools: [reporting],
        middleware: [telemetry({ tracer: provider.getTracer('test'), captureContent })],
      });
      const spy = jest.spyOn(JSON, 'stringify');
      try {
        expect((await lastValueFrom(agent.run('find x').pipe(toArray()))).at(-1)).toMatchObject({ reason: 'completed' });
        return spy.mock.calls.length;
      } finally {
        spy.mockRestore();
      }
    };
    expect(await stringifyCalls(true)).toBe(await stringifyCalls(false));
    expect(exporter.getFinishedSpans()).toEqual([]);
  });

  it('sums the usage a model reports in parts, as the run does', async () => {
    const { middleware, spans, histograms } = setup();
    const parts: ModelClient = () =>
      of<ModelUpdate[]>(
        { type: 'usage', inputTokens: 100, outputTokens: 0 },
        { type: 'text-delta', text: 'hi' },
        { type: 'usage', inputTokens: 0, outputTokens: 7 },
        { type: 'finish', reason: 'stop' },
      );
    const events = await lastValueFrom(
      createAgent({ model: parts, middleware: [middleware] })
        .run('hi')
        .pipe(toArray()),
    );
    expect(events.at(-1)).toMatchObject({ type: 'run-end', usage: { inputTokens: 100, outputTokens: 7 } });
    expect(one(spans(), 'chat').attributes).toMatchObject({ 'gen_ai.usage.input_tokens': 100, 'gen_ai.usage.output_tokens': 7 });
    const tokens = (await histograms()).find((m) => m.descriptor.name === 'gen_ai.client.token.usage');
    const sums = Object.fromEntries(tokens!.dataPoints.map((p) => [p.attributes['gen_ai.token.type'], p.value.sum]));
    expect(sums).toEqual({ input: 100, output: 7 });
  });

  it('checks its options', () => {
    expect(() => telemetry(null as never)).toThrow('telemetry: options must be an object, got null');
    expect(() => telemetry({ tracer: {} as never })).toThrow("telemetry: 'tracer' must be an OpenTelemetry Tracer");
    expect(() => telemetry({ meter: 3 as never })).toThrow("telemetry: 'meter' must be an OpenTelemetry Meter, got 3");
    expect(() => telemetry({ captureContent: 'yes' as never })).toThrow(`telemetry: 'captureContent' must be a boolean, got "yes"`);
  });

  it('refuses an unknown option (a misspelt one is not left out in silence), naming it and the known ones', () => {
    expect(() => telemetry({ captureContents: true } as never)).toThrow(
      new TypeError("telemetry: unknown option(s) 'captureContents' (known: tracer, meter, captureContent)"),
    );
    expect(() => telemetry({ tracerProvider: {}, meterProvider: undefined } as never)).toThrow(
      "telemetry: unknown option(s) 'tracerProvider', 'meterProvider' (known: tracer, meter, captureContent)",
    );
    expect(() => telemetry({ tracer: undefined, meter: undefined, captureContent: false })).not.toThrow();
  });

  it('costs nothing per text delta beyond a type check: a run streams through it with the global no-op tracer', async () => {
    const deltas = Array.from({ length: 1000 }, () => ({ type: 'text-delta', text: 't' }) as const);
    const model: ModelClient = () => of<ModelUpdate[]>(...deltas, { type: 'finish', reason: 'stop' });
    const agent = createAgent({ model, middleware: [telemetry()] });
    const events = await lastValueFrom(agent.run('go').pipe(toArray()));
    expect(events.filter((e) => e.type === 'text-delta')).toHaveLength(1000);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 't'.repeat(1000) });
  });
});
