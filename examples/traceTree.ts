/**
 * `npm start -- --trace`: the demo's run as OpenTelemetry spans, kept in memory and printed as a
 * tree at the end, so the trace `telemetry()` makes is visible without a collector.
 */
import { SpanStatusCode, type Attributes } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import type { AgentMiddleware } from '../src/index';
import { telemetry } from '../src/otel/index';

/** A `telemetry()` middleware on an in-memory tracer, and the printer of what it recorded. */
export function traceInMemory(): { middleware: AgentMiddleware; print(write: (line: string) => void): void } {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return {
    middleware: telemetry({ tracer: provider.getTracer('rx-agent-demo') }),
    print: (write) => printTree(exporter.getFinishedSpans(), write),
  };
}

const ms = (t: readonly [number, number]) => t[0] * 1e3 + t[1] / 1e6;

function printTree(spans: readonly ReadableSpan[], write: (line: string) => void): void {
  const children = new Map<string | undefined, ReadableSpan[]>();
  const ids = new Set(spans.map((s) => s.spanContext().spanId));
  for (const span of spans) {
    const parent = span.parentSpanContext?.spanId;
    const key = parent !== undefined && ids.has(parent) ? parent : undefined;
    children.set(key, [...(children.get(key) ?? []), span]);
  }
  for (const list of children.values()) list.sort((a, b) => ms(a.startTime) - ms(b.startTime));
  const roots = children.get(undefined) ?? [];
  if (roots.length === 0) return write('(no spans recorded)');
  write(`Trace ${roots[0].spanContext().traceId}`);
  const visit = (span: ReadableSpan, prefix: string, last: boolean, root: boolean) => {
    const branch = root ? '' : last ? '└─ ' : '├─ ';
    write(`${prefix}${branch}${describe(span)}`);
    const inner = root ? '' : `${prefix}${last ? '   ' : '│  '}`;
    for (const event of span.events)
      write(`${inner}${(children.get(span.spanContext().spanId)?.length ?? 0) > 0 ? '│' : ' '}  · ${event.name}${details(event.attributes)}`);
    const kids = children.get(span.spanContext().spanId) ?? [];
    kids.forEach((kid, i) => visit(kid, inner, i === kids.length - 1, false));
  };
  for (const root of roots) visit(root, '', true, true);
}

function describe(span: ReadableSpan): string {
  const a = span.attributes;
  const parts = [`${Math.round(ms(span.endTime) - ms(span.startTime))} ms`];
  if (a['gen_ai.usage.input_tokens'] !== undefined)
    parts.push(`${String(a['gen_ai.usage.input_tokens'])} in + ${String(a['gen_ai.usage.output_tokens'])} out tokens`);
  const finish = a['gen_ai.response.finish_reasons'];
  if (Array.isArray(finish)) parts.push(`finish ${finish.join(',')}`);
  if (a['gen_ai.tool.call.id'] !== undefined) parts.push(`call ${String(a['gen_ai.tool.call.id'])}`);
  if (a['rx_agent.run.end_reason'] !== undefined) parts.push(String(a['rx_agent.run.end_reason']));
  if (span.status.code === SpanStatusCode.ERROR) parts.push(`ERROR ${String(a['error.type'] ?? '')}`.trim());
  return `${span.name}  [${parts.join('; ')}]`;
}

function details(attributes: Attributes | undefined): string {
  const entries = Object.entries(attributes ?? {});
  return entries.length === 0 ? '' : ` (${entries.map(([k, v]) => `${k}=${Array.isArray(v) ? v.join(',') : String(v)}`).join(', ')})`;
}
