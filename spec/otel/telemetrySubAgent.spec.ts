import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore, type Agent, type AgentMiddleware, type ModelClient, type Tool } from 'rx-agent';
import { telemetry } from 'rx-agent/otel';
import { scriptedModel, type ScriptedTurn } from 'rx-agent/testing';

// No context manager is registered here (as with a BasicTracerProvider of SDK 2.x and only
// `trace.setGlobalTracerProvider`): nothing carries the active span from the parent's tool call
// to the sub-agent's run but the framework itself.

function setup() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const tracer = provider.getTracer('test');
  return { tracer, spans: () => exporter.getFinishedSpans() };
}

const model = (turns: readonly ScriptedTurn[]): ModelClient => Object.assign(scriptedModel(turns), { provider: 'openai' });
const one = (spans: readonly ReadableSpan[], name: string) => {
  const found = spans.filter((s) => s.name === name);
  expect(found).toHaveLength(1);
  return found[0];
};
const idOf = (span: ReadableSpan) => span.spanContext().spanId;

/** A parent whose model calls `research` (the child as a tool) once, then answers. */
function parentOf(child: Agent, middleware: AgentMiddleware, tools: readonly Tool[] = []) {
  return createAgent({
    name: 'boss',
    model: model([
      { toolCalls: [{ name: 'research', args: { input: 'x' }, callId: 'c1' }, ...tools.map((t, i) => ({ name: t.name, args: {}, callId: `t${i}` }))] },
      'ok',
    ]),
    settings: { model: 'big' },
    tools: [child.asTool({ name: 'research', description: 'Finds things' }), ...tools],
    middleware: [middleware],
  });
}

describe('telemetry of sub-agents (agent.asTool())', () => {
  it.each([
    ['its own telemetry()', false],
    ["the parent's telemetry()", true],
  ])("makes the sub-agent's run a child of its call's execute_tool span without a context manager, with %s", async (_, shared) => {
    const { tracer, spans } = setup();
    const parentTelemetry = telemetry({ tracer });
    const child = createAgent({
      name: 'researcher',
      model: model([{ text: 'found it' }]),
      settings: { model: 'small' },
      middleware: [shared ? parentTelemetry : telemetry({ tracer })],
    });
    const events = await lastValueFrom(parentOf(child, parentTelemetry).run('go').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });

    const all = spans();
    const boss = one(all, 'invoke_agent boss');
    const call = one(all, 'execute_tool research');
    const researcher = one(all, 'invoke_agent researcher');
    expect(researcher.parentSpanContext?.spanId).toBe(idOf(call));
    expect(researcher.spanContext().traceId).toBe(boss.spanContext().traceId);
    expect(one(all, 'chat small').parentSpanContext?.spanId).toBe(idOf(researcher));
  });

  it("makes a journaled sub-agent's run a child of its call's span too", async () => {
    const { tracer, spans } = setup();
    const child = createAgent({ name: 'researcher', model: model([{ text: 'found it' }]), store: memoryStore(), middleware: [telemetry({ tracer })] });
    const events = await lastValueFrom(parentOf(child, telemetry({ tracer })).run('go').pipe(toArray()));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'ok' });
    expect(one(spans(), 'invoke_agent researcher').parentSpanContext?.spanId).toBe(idOf(one(spans(), 'execute_tool research')));
  });

  it('leaves a run that a tool starts by hand (not through asTool()) where the active context puts it', async () => {
    const { tracer, spans } = setup();
    const child = createAgent({ name: 'researcher', model: model([{ text: 'found it' }]), middleware: [telemetry({ tracer })] });
    // The tool runs the child itself, not through asTool(): nothing names its call.
    const byHand = defineTool({
      name: 'research',
      description: 'd',
      parameters: z.object({ input: z.string() }),
      execute: ({ input }) => child.invoke(input).then((r) => r.text),
    });
    const parent = createAgent({
      name: 'boss',
      model: model([{ toolCalls: [{ name: 'research', args: { input: 'x' }, callId: 'c1' }] }, 'ok']),
      tools: [byHand],
      middleware: [telemetry({ tracer })],
    });
    await lastValueFrom(parent.run('go').pipe(toArray()));
    expect(one(spans(), 'invoke_agent researcher').parentSpanContext).toBeUndefined();
  });

  it("makes no span event of a sub-agent's events (each text delta among them): the call's span keeps its own", async () => {
    const { tracer, spans } = setup();
    const middleware = telemetry({ tracer, captureContent: true });
    const words = Array.from({ length: 300 }, (_, i) => `w${i} `);
    const child = createAgent({ name: 'researcher', model: model([{ text: words, usage: { inputTokens: 3, outputTokens: 300 } }]), middleware: [middleware] });
    // A tool of the parent's that reports its own progress: that stays an event of its span.
    const counter = defineTool({
      name: 'count',
      description: 'd',
      parameters: z.object({}),
      execute: (_, ctx) => {
        ctx.progress({ done: 1, of: 2 });
        return 'counted';
      },
    });
    const events = await lastValueFrom(parentOf(child, middleware, [counter]).run('go').pipe(toArray()));
    expect(events.filter((e) => e.type === 'tool-progress' && e.callId === 'c1')).toHaveLength(300 + 4);

    const all = spans();
    const call = one(all, 'execute_tool research');
    expect(call.events.map((e) => e.name)).toEqual(['started']);
    expect(call.droppedEventsCount).toBe(0);
    // The child's own spans hold what it did, its end included.
    expect(one(all, 'invoke_agent researcher').attributes).toMatchObject({ 'rx_agent.run.end_reason': 'completed', 'gen_ai.usage.output_tokens': 300 });
    const count = one(all, 'execute_tool count');
    expect(count.events.map((e) => e.name)).toEqual(['started', 'tool-progress']);
    expect(count.events[1]?.attributes).toMatchObject({ callId: 't0', value: '{"done":1,"of":2}' });
  });
});
