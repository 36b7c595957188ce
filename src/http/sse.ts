import { Observable, asyncScheduler, map, type OperatorFunction, type SchedulerAction, type SchedulerLike, type Subscriber } from 'rxjs';
import type { AgentEvent } from '../events/types';
import { show } from '../internal/show';
import { checkTimeoutMs } from '../internal/timers';
import { fromAsyncIterable } from '../bindings/fromAsyncIterable';
import { fromReadableStream } from '../bindings/fromReadableStream';
import { toReadableStream } from '../bindings/toReadableStream';
import { errorMessage } from '../internal/errorMessage';
import { isScheduler } from '../internal/isScheduler';
import { checkOptions, optionNames } from '../internal/optionNames';
import { SSEParser } from '../internal/sseParser';
import { sendableEvent } from '../internal/unsent';

/**
 * The response headers of an event stream: `content-type: text/event-stream`, no caching or
 * transformation by proxies, and no buffering by nginx (`x-accel-buffering: no`).
 *
 * @example
 * return new Response(toSSEStream(agent.run(input)), { headers: sseHeaders });
 */
export const sseHeaders: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
});

/**
 * Encodes events as Server-Sent Events frames: `event: <type>\ndata: <json>\n\n`, the data being
 * the whole event as JSON (`type` and `runId` included), so {@link decodeSSE} gives it back as is.
 * An event of a journaled run (one with a `seq`) also gets `id: <seq>`, the position a client
 * that reconnects sends back as `Last-Event-ID` to get the rest of the run.
 * JSON has no raw line breaks; should a value's serialisation ever contain one, it is split over
 * several `data:` lines, which the decoder joins again. A tool result or call arguments JSON
 * cannot hold (a `BigInt`, a cycle) go out as a string saying so (the result as an error), so
 * the client still sees the call answered and the rest of the run; any other such value as
 * `The value could not be sent: …`, as the run's journal keeps it. An event whose `type` is not a
 * non-empty string or has a line break is an Observable error.
 *
 * @example
 * agent.run('Hi').pipe(encodeSSE()).subscribe(frame => res.write(frame));
 */
export function encodeSSE(): OperatorFunction<AgentEvent, string> {
  return map(frameOrStandIn);
}

function formatFrame(event: AgentEvent): string {
  const type: unknown = (event as { type?: unknown } | null)?.type;
  if (typeof type !== 'string' || type === '') {
    throw new TypeError(`encodeSSE: an event needs a non-empty string 'type', got ${show(type)}`);
  }
  if (/[\r\n]/.test(type)) throw new TypeError(`encodeSSE: an event type cannot contain a line break: ${JSON.stringify(type)}`);
  const json: unknown = JSON.stringify(event);
  if (typeof json !== 'string') throw new TypeError(`encodeSSE: the '${type}' event cannot be serialised to JSON`);
  const data = /[\r\n]/.test(json) ? json.split(/\r\n|\r|\n/).join('\ndata: ') : json;
  const seq = event.seq;
  return typeof seq === 'number' && Number.isSafeInteger(seq) && seq >= 0
    ? `event: ${type}\nid: ${seq}\ndata: ${data}\n\n`
    : `event: ${type}\ndata: ${data}\n\n`;
}

/** Options of {@link toSSEStream}. */
export interface SSEStreamOptions {
  /**
   * Send a comment line (`: ping`) every so many ms (a positive number, at most 2147483647), so
   * that proxies and load balancers do not close a connection that is quiet while a tool or the
   * model works. Off by default; `Infinity` is off too.
   */
  heartbeatMs?: number;
  /** Runs the heartbeat (default `asyncScheduler`; a `TestScheduler` in marble tests). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link SSEStreamOptions}: any other is refused. */
const SSE_STREAM_OPTIONS = optionNames<SSEStreamOptions>({ heartbeatMs: true, scheduler: true });

/**
 * An event stream ready to be an HTTP response body: the run's events as UTF-8 SSE frames
 * (see {@link encodeSSE}, which also says what happens to values JSON cannot hold). Lazy: the run
 * starts when the body is first read. When the client
 * goes away, the framework cancels the body, which unsubscribes and so cancels the run.
 *
 * @example
 * // A Next.js route handler (app/api/chat/route.ts), or any fetch-style server.
 * export async function POST(req: Request) {
 *   const { message } = await req.json();
 *   return new Response(toSSEStream(agent.run(message, { signal: req.signal })), { headers: sseHeaders });
 * }
 */
export function toSSEStream(events$: Observable<AgentEvent>, options: SSEStreamOptions = {}): ReadableStream<Uint8Array> {
  checkOptions('toSSEStream', options, SSE_STREAM_OPTIONS);
  const { heartbeatMs = Infinity, scheduler = asyncScheduler } = options;
  checkTimeoutMs('toSSEStream', 'heartbeatMs', heartbeatMs);
  if (!isScheduler(scheduler)) throw new TypeError("toSSEStream: 'scheduler' must be an rxjs SchedulerLike");
  const encoder = new TextEncoder();
  const frames$ = events$.pipe(encodeSSE());
  const body$ = heartbeatMs === Infinity ? frames$ : withHeartbeat(frames$, heartbeatMs, scheduler);
  return toReadableStream(body$.pipe(map((frame) => encoder.encode(frame))));
}

/**
 * The frame of `event`. A tool's result, or a call's arguments (in a `tool-call` or a
 * `permission-request`), that JSON cannot hold is sent as a string saying so, the result as an
 * error; any other such value as `The value could not be sent: …`. An event without a usable
 * `type` throws.
 */
function frameOrStandIn(event: AgentEvent): string {
  try {
    return formatFrame(event);
  } catch (error) {
    const type: unknown = (event as { type?: unknown } | null)?.type;
    if (typeof type !== 'string' || type === '' || /[\r\n]/.test(type)) throw error; // the type is wrong, not a value
    const kept = sendableEvent(event);
    if (kept === event) throw error;
    return formatFrame(kept as AgentEvent);
  }
}

/** The frames, with `: ping` every `ms` on `scheduler` until they end. */
function withHeartbeat(frames$: Observable<string>, ms: number, scheduler: SchedulerLike): Observable<string> {
  return new Observable<string>((subscriber) => {
    const subscription = frames$.subscribe(subscriber);
    if (!subscription.closed) subscription.add(scheduler.schedule(ping, ms, { subscriber, ms }));
    return subscription;
  });
}

interface Heartbeat {
  readonly subscriber: Subscriber<string>;
  readonly ms: number;
}

function ping(this: SchedulerAction<Heartbeat>, heartbeat?: Heartbeat): void {
  heartbeat!.subscriber.next(': ping\n\n');
  this.schedule(heartbeat, heartbeat!.ms);
}

/** What {@link decodeSSE} reads: a byte stream such as `fetch(...).body`, or chunks of bytes or text. */
export type SSESource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string>;

/**
 * Decodes an SSE stream produced by {@link toSSEStream} back into events. It follows the SSE
 * parsing rules: chunks may split a frame anywhere (even inside a multi-byte UTF-8 character),
 * lines may end with LF, CRLF or CR, `:` lines are comments, several `data:` lines are joined
 * with `\n`, `id:` and `retry:` are ignored. Unlike those rules, a last frame without its blank
 * line is still delivered at the end. Work is linear in the size of the stream.
 *
 * Data that is not JSON, or not a JSON object, is an Observable error that names the event
 * type. A data object without `type` takes the frame's `event:` name.
 *
 * Unsubscribing cancels the reader, so for `fetch(...).body` it aborts the HTTP request (for an
 * async iterable it calls the iterator's `return()`). A stream can be read once: subscribe once,
 * or wrap in `defer` with a new request per subscription, whose `AbortController` the teardown
 * aborts (`finalize(() => abort.abort())`: an unsubscribe before the response came has no body
 * to cancel yet; docs/guide/streaming-to-a-ui.md has the whole pattern).
 *
 * @example
 * const res = await fetch('/api/chat', { method: 'POST', body: JSON.stringify({ message: 'Hi' }) });
 * decodeSSE(res.body!).pipe(ofType('text-delta')).subscribe(e => output.append(e.text));
 */
export function decodeSSE(source: SSESource): Observable<AgentEvent> {
  return new Observable<AgentEvent>((subscriber) => {
    if (!isReadableStream(source) && typeof (source as Partial<AsyncIterable<unknown>>)?.[Symbol.asyncIterator] !== 'function') {
      subscriber.error(new TypeError('decodeSSE: expected a ReadableStream or an AsyncIterable of chunks (e.g. `response.body`)'));
      return;
    }
    const chunks$: Observable<Uint8Array | string> = isReadableStream(source) ? fromReadableStream(source) : fromAsyncIterable(source);
    const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
    const parser = new SSEParser(
      (type, data) => subscriber.next(toEvent(type, data)),
      () => subscriber.closed,
    );
    return chunks$.subscribe({
      next(chunk) {
        try {
          parser.push(typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true }));
        } catch (error) {
          subscriber.error(error);
        }
      },
      error: (error) => subscriber.error(error),
      complete() {
        try {
          parser.push(decoder.decode());
          parser.end();
        } catch (error) {
          subscriber.error(error);
          return;
        }
        subscriber.complete();
      },
    });
  });
}

function isReadableStream(source: SSESource): source is ReadableStream<Uint8Array> {
  return typeof (source as { getReader?: unknown } | null)?.getReader === 'function';
}

function toEvent(type: string, data: string): AgentEvent {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch (error) {
    const reason = errorMessage(error);
    throw new SyntaxError(`decodeSSE: bad JSON in the data of a '${type}' event (${reason}): ${excerpt(data)}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(`decodeSSE: the data of a '${type}' event is not a JSON object: ${excerpt(data)}`);
  }
  const event = value as { type?: unknown };
  if (typeof event.type !== 'string') event.type = type;
  return event as AgentEvent;
}

function excerpt(data: string): string {
  return JSON.stringify(data.length > 200 ? `${data.slice(0, 200)}…` : data);
}
