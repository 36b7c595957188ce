import {
  EMPTY,
  Observable,
  asyncScheduler,
  concat,
  defer,
  filter,
  finalize,
  from,
  repeat,
  retry,
  switchMap,
  tap,
  throwError,
  timer,
  type SchedulerLike,
} from 'rxjs';
import type { AgentEvent, AgentResponse, RunInfo, RunInput } from '../index';
import { isScheduler } from '../internal/isScheduler';
import { show } from '../internal/show';
import { checkTimeoutMs } from '../internal/timers';
import { decodeSSE } from './sse';
import { checkOptions, optionNames } from '../internal/optionNames';

/**
 * A request to a runs server answered with an error status: `status` and the server's message.
 * Not retried (a 403 or a 404 does not get better by asking again).
 *
 * @example
 * client.events(runId).subscribe({ error: (e) => e instanceof RunsHttpError && e.status === 404 && forget(runId) });
 */
export class RunsHttpError extends Error {
  override readonly name = 'RunsHttpError';
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Options of {@link runsClient}. */
export interface RunsClientOptions {
  /** The fetch to use (default the global one): one that adds credentials, say. */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
  /** Headers sent with every request (an `authorization`, say), or a function giving them per request. */
  headers?: Record<string, string> | (() => Record<string, string>);
  /** How long to wait before reconnecting a stream that was cut (default 1000 ms). */
  retryMs?: number;
  /**
   * How many reconnections in a row without an event in between before the stream errors (default
   * 10): a network error, a 5xx, or a stream that the server ended without sending an event. A
   * 4xx, or a response that is not an event stream, errors at once.
   */
  maxRetries?: number;
  /** Runs the reconnection delay (default `asyncScheduler`). */
  scheduler?: SchedulerLike;
}

/** A client of {@link runsHandler}'s routes. */
export interface RunsClient {
  /** Starts a run (`POST /runs`); resolves with its id. */
  start(body: { readonly input: RunInput; readonly sessionId?: string; readonly [key: string]: unknown }): Promise<string>;
  /**
   * The run's events (`GET /runs/:id/events`) after `after` (a seq, default 0), up to the run's
   * end. A cut connection is reconnected with `Last-Event-ID`, so no event is lost or repeated (unless
   * the server that streamed them ran the run and was killed: see the runs-over-HTTP guide).
   * Unsubscribing aborts the request; the run goes on (cancel it with `cancel`).
   */
  events(runId: string, options?: { readonly after?: number }): Observable<AgentEvent>;
  /** Answers a request of the run (`POST /runs/:id/responses`): false when the run does not wait for it. */
  respond(runId: string, response: AgentResponse): Promise<boolean>;
  /** Cancels the run (`POST /runs/:id/cancel`): false when it has ended already (a `RunsHttpError` 404 once the store dropped it). */
  cancel(runId: string): Promise<boolean>;
  /**
   * The run as the server's `agent.runs.get()` tells it, without its lease (`GET /runs/:id`);
   * undefined when the store has no such run. Any other 4xx (a 404 of no route: a wrong base URL)
   * rejects with a {@link RunsHttpError}.
   */
  get(runId: string): Promise<Omit<RunInfo, 'lease'> | undefined>;
}

/**
 * A browser (or Node) client of {@link runsHandler}: `fetch` and `ReadableStream`, no
 * `EventSource` (so it can send headers and POST answers), the package's SSE decoder, and
 * reconnection with `Last-Event-ID` when the network drops. Runs in every evergreen browser.
 *
 * @example
 * const runs = runsClient('/runs');
 * const runId = await runs.start({ input: 'Book a table for two' });
 * sessionStorage.setItem('runId', runId); // a reload follows the same run
 * runs.events(runId).subscribe((event) => {
 *   if (event.type === 'text-delta') output.append(event.text);
 *   if (event.type === 'permission-request') void runs.respond(runId, { type: 'permission-response', requestId: event.requestId, approved: confirm('Allow?') });
 * });
 */
export function runsClient(baseUrl: string, options: RunsClientOptions = {}): RunsClient {
  if (typeof baseUrl !== 'string' || baseUrl === '')
    throw new TypeError(`runsClient: the base URL must be a non-empty string (e.g. '/runs'), got ${show(baseUrl)}`);
  checkOptions('runsClient', options, CLIENT_OPTIONS);
  const { retryMs = 1000, maxRetries = 10, scheduler = asyncScheduler, headers = {} } = options;
  if (typeof headers !== 'function')
    checkHeaders(headers, "runsClient: 'headers' must be an object of string values (e.g. { authorization: 'Bearer …' }) or a function returning one");
  const doFetch = options.fetch ?? ((input: string, init: RequestInit) => fetch(input, init));
  if (typeof doFetch !== 'function') throw new TypeError(`runsClient: 'fetch' must be a function, got ${show(doFetch)}`);
  checkTimeoutMs('runsClient', 'retryMs', retryMs);
  if (!Number.isInteger(maxRetries) || maxRetries < 0) throw new TypeError(`runsClient: 'maxRetries' must be a whole number >= 0, got ${show(maxRetries)}`);
  if (!isScheduler(scheduler)) throw new TypeError("runsClient: 'scheduler' must be an rxjs SchedulerLike");
  const base = baseUrl.replace(/\/+$/, '');
  const runUrl = (runId: string, action?: string) => {
    if (typeof runId !== 'string' || runId === '') throw new TypeError(`runsClient: a run id must be a non-empty string, got ${show(runId)}`);
    const url = `${base}/${encodeURIComponent(runId)}`;
    return action === undefined ? url : `${url}/${action}`;
  };
  const headersNow = () =>
    typeof headers === 'function' ? checkHeaders(headers(), "runsClient: the 'headers' function must return an object of string values") : headers;

  async function post(url: string, body: unknown, accepted: (status: number) => boolean): Promise<Response> {
    const response = await doFetch(url, { method: 'POST', headers: { ...headersNow(), 'content-type': 'application/json' }, body: JSON.stringify(body ?? {}) });
    if (!response.ok && !accepted(response.status)) throw await httpError(response);
    return response;
  }

  return {
    async start(body) {
      const response = await post(base, body, () => false);
      const { runId } = (await response.json()) as { runId?: unknown };
      if (typeof runId !== 'string') throw new RunsHttpError(response.status, `The server started a run but sent no run id: ${show(runId)}`);
      return runId;
    },

    events(runId, { after = 0 } = {}) {
      const url = runUrl(runId, 'events');
      if (!Number.isInteger(after) || after < 0) throw new TypeError(`runsClient: 'after' must be a seq (a whole number >= 0), got ${show(after)}`);
      return defer(() => {
        let last = after;
        let finished = false;
        const connect = defer(() => {
          let delivered = false;
          const abort = new AbortController();
          const init: RequestInit = {
            headers: { ...headersNow(), accept: 'text/event-stream', ...(last > 0 ? { 'last-event-id': String(last) } : {}) },
            cache: 'no-store',
            signal: abort.signal,
          };
          return from(doFetch(url, init)).pipe(
            switchMap((response) => {
              if (response.status === 204) {
                finished = true; // ended, and nothing is left to send
                return EMPTY;
              }
              if (!response.ok || !response.body) return from(httpError(response)).pipe(switchMap((error) => throwError(() => error)));
              const type = response.headers.get('content-type') ?? '';
              if (!/^text\/event-stream\b/i.test(type)) {
                void response.body.cancel().catch(() => undefined);
                return throwError(
                  () => new RunsHttpError(response.status, `Expected an event stream (text/event-stream) from ${url}, got ${type || 'no content-type'}`),
                );
              }
              // A stream that ends without an event counts as a failed connection (see maxRetries).
              const ended = defer(() =>
                delivered || finished ? EMPTY : throwError(() => new Error(`The event stream of run '${runId}' ended without an event`)),
              );
              return concat(decodeSSE(response.body), ended);
            }),
            // Should a server not honour Last-Event-ID, nothing is delivered twice.
            filter((event) => typeof event.seq !== 'number' || event.seq > last),
            tap((event) => {
              delivered = true;
              if (typeof event.seq === 'number') last = event.seq;
              if (event.type === 'run-end' && event.reason !== 'suspended') finished = true;
            }),
            finalize(() => abort.abort()),
          );
        });
        return connect.pipe(
          // The server ended the stream before the run's end (a proxy's timeout, a deploy): reconnect.
          repeat({ delay: () => (finished ? EMPTY : timer(retryMs, scheduler)) }),
          retry({
            count: maxRetries,
            // A 4xx, or a response that is no event stream, will not change by asking again; a 5xx may (a deploy).
            delay: (error: unknown) => (error instanceof RunsHttpError && error.status < 500 ? throwError(() => error) : timer(retryMs, scheduler)),
            resetOnSuccess: true,
          }),
        );
      });
    },

    async respond(runId, response) {
      return (await post(runUrl(runId, 'responses'), response, (status) => status === 409)).ok;
    },

    async cancel(runId) {
      return (await post(runUrl(runId, 'cancel'), {}, (status) => status === 409)).ok;
    },

    async get(runId) {
      const response = await doFetch(runUrl(runId), { headers: { ...headersNow(), accept: 'application/json' }, cache: 'no-store' });
      if (response.status === 404) {
        // The server says which run it has not (a 404 of no route, a wrong base URL, is an error).
        const body = (await response
          .clone()
          .json()
          .catch(() => undefined)) as { runId?: unknown } | undefined;
        if (body?.runId === runId) return undefined;
      }
      if (!response.ok) throw await httpError(response);
      return (await response.json()) as Omit<RunInfo, 'lease'>;
    },
  };
}

/** The keys of {@link RunsClientOptions}: any other is refused, as `agent.resume()` refuses an unknown option. */
const CLIENT_OPTIONS = optionNames<RunsClientOptions>({ fetch: true, headers: true, retryMs: true, maxRetries: true, scheduler: true });

/** `headers` (or what its function returned): a plain object of string values, else a TypeError saying `problem`. */
function checkHeaders(headers: unknown, problem: string): Record<string, string> {
  const object = headers !== null && typeof headers === 'object';
  const prototype: unknown = object ? Object.getPrototypeOf(headers) : undefined;
  const plain = prototype === Object.prototype || prototype === null;
  if (object && !plain) {
    // A `Headers` or a `Map`, say: its entries are no properties, and would be dropped.
    const name = (headers as { constructor?: { name?: unknown } }).constructor?.name;
    const what = typeof name === 'string' && name !== '' ? `${/^[AEIOU]/i.test(name) ? 'an' : 'a'} ${name}` : 'an object with a prototype';
    throw new TypeError(`${problem}, got ${what}`);
  }
  if (!object || !Object.values(headers).every((value) => typeof value === 'string')) throw new TypeError(`${problem}, got ${show(headers)}`);
  return headers as Record<string, string>;
}

async function httpError(response: Response): Promise<RunsHttpError> {
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = (await response.json()) as { error?: unknown };
    if (typeof body?.error === 'string') message = `${response.status}: ${body.error}`;
  } catch {
    // not JSON: the status says it
  }
  return new RunsHttpError(response.status, message);
}
