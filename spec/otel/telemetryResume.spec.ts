import { AsyncLocalStorage } from 'node:async_hooks';
import { ROOT_CONTEXT, context, trace, type Context, type ContextManager } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { NEVER, lastValueFrom, of, toArray, type Observable } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore, type AgentEvent, type AgentMiddleware, type AgentStore, type JournalRecord } from 'rx-agent';
import { permissions } from 'rx-agent/operators';
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

const payCall: ScriptedTurn = { toolCalls: [{ name: 'pay', args: { n: 1 }, callId: 'c1' }] };
const REQUEST = 'r.0.c1.permission-request';
const approve = { type: 'permission-response', requestId: REQUEST, approved: true } as const;

function setup() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const tracer = provider.getTracer('test');
  return { tracer, spans: () => exporter.getFinishedSpans() };
}

const pay = () =>
  defineTool({ name: 'pay', description: 'Pays', parameters: z.object({ n: z.number() }), needsApproval: true, execute: ({ n }) => `paid ${n}` });

/** An agent on `store`, as another process would make it: its own model script, the same store. */
function agentOn(store: AgentStore, turns: ScriptedTurn[], extra: AgentMiddleware[]) {
  return createAgent({ model: scriptedModel(turns), tools: [pay()], middleware: [permissions(), ...extra], store, onRequest: 'suspend' });
}

const run = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const ends = (events: AgentEvent[]) => events.filter((e) => e.type === 'run-end').map((e) => (e as { reason: string }).reason);
const agentSpans = (spans: readonly ReadableSpan[]) => spans.filter((s) => s.name.startsWith('invoke_agent'));

async function startRecord(store: AgentStore, runId: string): Promise<Extract<JournalRecord, { kind: 'start' }>> {
  const entries = await store.read(runId, 0);
  const record = entries?.[0]?.record;
  if (record?.kind !== 'start') throw new Error('no start record');
  return record;
}

describe('telemetry of a resumed run', () => {
  it('continues the trace: the resumed run span is a child of the span that started the run', async () => {
    const { tracer, spans } = setup();
    const store = memoryStore();
    const a = agentOn(store, [payCall], [telemetry({ tracer })]);
    const b = agentOn(store, ['done'], [telemetry({ tracer })]);
    expect(ends(await run(a.run('pay', { runId: 'r' })))).toEqual(['suspended']);
    const kept = (await startRecord(store, 'r')).context;
    expect(await b.respond('r', approve)).toBe(true);
    expect(ends(await run(b.resume('r')))).toEqual(['completed']);

    const [first, second] = agentSpans(spans());
    expect(agentSpans(spans())).toHaveLength(2);
    expect(second.spanContext().traceId).toBe(first.spanContext().traceId);
    expect(second.parentSpanContext?.spanId).toBe(first.spanContext().spanId);
    expect(second.parentSpanContext?.isRemote).toBe(true);
    expect(second.links).toEqual([]);
    expect(first.attributes['rx_agent.run.end_reason']).toBe('suspended');
    expect(first.attributes['rx_agent.run.resumed']).toBeUndefined();
    expect(second.attributes).toMatchObject({ 'rx_agent.run.resumed': true, 'rx_agent.run.end_reason': 'completed' });
    // The tool that ran after the resume, and the model call, are in the run's one trace too.
    const tool = spans().find((s) => s.name === 'execute_tool pay');
    const chats = spans().filter((s) => s.name.startsWith('chat'));
    expect(chats).toHaveLength(2);
    for (const span of [tool, ...chats]) expect(span?.spanContext().traceId).toBe(first.spanContext().traceId);
    expect(chats[1].parentSpanContext?.spanId).toBe(second.spanContext().spanId);

    // The journal kept it in W3C form, in the start record.
    const { traceId, spanId } = first.spanContext();
    expect(kept).toEqual({ traceparent: `00-${traceId}-${spanId}-01` });
  });

  it('marks the execute_tool span of a call whose journaled outcome the resumed run took: replayed, never started', async () => {
    const { tracer, spans } = setup();
    const store = memoryStore();
    const quick = defineTool({ name: 'quick', description: 'Quick', parameters: z.object({}), execute: () => 'q' });
    const slow = (result: Observable<string>) =>
      defineTool({ name: 'slow', description: 'Slow', parameters: z.object({}), idempotent: true, execute: () => result });
    const batch: ScriptedTurn = {
      toolCalls: [
        { name: 'quick', args: {}, callId: 'c1' },
        { name: 'slow', args: {}, callId: 'c2' },
      ],
    };
    const a = createAgent({ model: scriptedModel([batch]), tools: [quick, slow(NEVER)], middleware: [telemetry({ tracer })], store });
    const b = createAgent({ model: scriptedModel(['done']), tools: [quick, slow(of('s'))], middleware: [telemetry({ tracer })], store });
    // The first process stops while c2 runs, c1's outcome journaled.
    await new Promise<void>((resolve) => {
      const running = a.run('go', { runId: 'r' }).subscribe((event) => {
        if (event.type === 'tool-result' && event.callId === 'c1') setTimeout(() => (running.unsubscribe(), resolve()), 20);
      });
    });
    expect(ends(await run(b.resume('r')))).toEqual(['completed']);

    const resumedRun = agentSpans(spans()).find((s) => s.attributes['rx_agent.run.resumed'] === true);
    const inResumed = spans().filter((s) => s.parentSpanContext?.spanId === resumedRun?.spanContext().spanId);
    const replayed = inResumed.find((s) => s.name === 'execute_tool quick');
    const again = inResumed.find((s) => s.name === 'execute_tool slow');
    expect(replayed?.attributes['rx_agent.tool.replayed']).toBe(true);
    expect(replayed?.events.map((e) => e.name)).not.toContain('started');
    expect(again?.attributes['rx_agent.tool.replayed']).toBeUndefined();
    expect(again?.events.map((e) => e.name)).toContain('started');
  });

  describe('with a context manager', () => {
    beforeAll(() => {
      context.setGlobalContextManager(new AsyncContextManager());
    });
    afterAll(() => {
      context.disable();
    });

    it('links the span the run is resumed under (another trace), and keeps the run in its own trace', async () => {
      const { tracer, spans } = setup();
      const store = memoryStore();
      const a = agentOn(store, [payCall], [telemetry({ tracer })]);
      const b = agentOn(store, ['done'], [telemetry({ tracer })]);
      expect(ends(await run(a.run('pay', { runId: 'r' })))).toEqual(['suspended']);
      await b.respond('r', approve);
      const caller = tracer.startSpan('POST /runs/r/resume');
      const resumed = await context.with(trace.setSpan(context.active(), caller), () => run(b.resume('r')));
      caller.end();
      expect(ends(resumed)).toEqual(['completed']);

      const [first, second] = agentSpans(spans());
      expect(second.spanContext().traceId).toBe(first.spanContext().traceId);
      expect(second.parentSpanContext?.spanId).toBe(first.spanContext().spanId);
      expect(caller.spanContext().traceId).not.toBe(first.spanContext().traceId);
      expect(second.links.map((l) => l.context.spanId)).toEqual([caller.spanContext().spanId]);
    });
  });

  it("puts an answer given while the run was suspended on its call's execute_tool span in the resumed run", async () => {
    const { tracer, spans } = setup();
    const store = memoryStore();
    const a = agentOn(store, [payCall], [telemetry({ tracer })]);
    const b = agentOn(store, ['done'], [telemetry({ tracer })]);
    expect(ends(await run(a.run('pay', { runId: 'r' })))).toEqual(['suspended']);
    expect(await b.respond('r', approve)).toBe(true);
    expect(ends(await run(b.resume('r')))).toEqual(['completed']);

    const [, resumed] = agentSpans(spans());
    const tools = spans().filter((s) => s.name === 'execute_tool pay');
    const ranHere = tools.find((s) => s.parentSpanContext?.spanId === resumed.spanContext().spanId);
    expect(ranHere?.events.map((e) => e.name)).toEqual(['permission-response', 'started']);
    expect(ranHere?.events[0].attributes).toMatchObject({ approved: true, requestId: REQUEST });
    expect(resumed.events.map((e) => e.name)).not.toContain('permission-response');
  });

  it('journals and resumes a run without telemetry; resumed with it, the run starts a new trace', async () => {
    const { tracer, spans } = setup();
    const store = memoryStore();
    const a = agentOn(store, [payCall], []);
    const b = agentOn(store, ['done'], [telemetry({ tracer })]);
    expect(ends(await run(a.run('pay', { runId: 'r' })))).toEqual(['suspended']);
    expect((await startRecord(store, 'r')).context).toBeUndefined();
    await b.respond('r', approve);
    expect(ends(await run(b.resume('r')))).toEqual(['completed']);

    const [only] = agentSpans(spans());
    expect(agentSpans(spans())).toHaveLength(1);
    expect(only.parentSpanContext).toBeUndefined();
    expect(only.links).toEqual([]);
    expect(only.attributes['rx_agent.run.resumed']).toBe(true);

    // Without telemetry on either side, the run resumes as ever.
    const c = agentOn(store, [payCall], []);
    const d = agentOn(store, ['done'], []);
    expect(ends(await run(c.run('pay', { runId: 'r2' })))).toEqual(['suspended']);
    await d.respond('r2', { ...approve, requestId: 'r2.0.c1.permission-request' });
    const events = await run(d.resume('r2'));
    expect(ends(events)).toEqual(['completed']);
    expect(events.some((e) => e.type === 'tool-result')).toBe(true);
  });

  it('starts a new trace when the journal keeps a trace context it cannot read', async () => {
    const { tracer, spans } = setup();
    const store = memoryStore();
    const a = agentOn(store, [payCall], [telemetry({ tracer })]);
    expect(ends(await run(a.run('pay', { runId: 'r' })))).toEqual(['suspended']);
    const entries = store.read('r', 0) ?? [];
    // The same journal in another store, its traceparent garbled (a store hands back whatever JSON it kept).
    const other = memoryStore();
    const records = entries.map((e, i) =>
      i === 0 ? ({ ...e.record, context: { traceparent: '00-00000000000000000000000000000000-0000000000000000-01' } } as JournalRecord) : e.record,
    );
    other.append('r', 0, records);
    const b = agentOn(other, ['done'], [telemetry({ tracer })]);
    await b.respond('r', approve);
    expect(ends(await run(b.resume('r')))).toEqual(['completed']);

    const [first, second] = agentSpans(spans());
    expect(second.spanContext().traceId).not.toBe(first.spanContext().traceId);
    expect(second.parentSpanContext).toBeUndefined();
    expect(second.attributes['rx_agent.run.resumed']).toBe(true);
  });
});
