import {
  EMPTY,
  Observable,
  ReplaySubject,
  Subject,
  asyncScheduler,
  catchError,
  concatMap,
  concatWith,
  defer,
  filter,
  first,
  lastValueFrom,
  switchMap,
  take,
  takeUntil,
  takeWhile,
  tap,
  timer,
  type SchedulerLike,
} from 'rxjs';
import {
  RunNotFoundError,
  StoreRequiredError,
  toErrorInfo,
  type Agent,
  type AgentEvent,
  type AgentResponse,
  type ErrorInfo,
  type RunInfo,
  type RunInput,
  type RunOptions,
} from '../index';
import { jsonError, readJsonBody } from '../bindings/jsonRequest';
import { errorMessage } from '../internal/errorMessage';
import { isScheduler } from '../internal/isScheduler';
import { show } from '../internal/show';
import { checkTimeoutMs } from '../internal/timers';
import { sseHeaders, toSSEStream } from './sse';
import { checkOptions, optionNames } from '../internal/optionNames';

/** The JSON body of `POST /runs`: the run's input, and the session it belongs to. */
export interface StartRunBody {
  /** What the user says: a string, a message, or messages. */
  readonly input: RunInput;
  /** With a store: the session in the store this turn reads and appends to. */
  readonly sessionId?: string;
  /** Anything else the app's `runOptions` reads. */
  readonly [key: string]: unknown;
}

/** Options of {@link runsHandler}. */
export interface RunsHandlerOptions {
  /**
   * Who may touch which run, asked for every request to a route before its body or the store is
   * read: with the run's id, or `undefined` for `POST /runs` (which starts one). `true` lets the request through; anything
   * else answers 403, except a `Response`, which is sent as it is (a 401 with a challenge, say).
   * Default: everyone may (put the handler behind your own authentication, or pass this).
   */
  authorize?: (request: Request, runId: string | undefined) => boolean | Response | Promise<boolean | Response>;
  /**
   * The options of the run `POST /runs` starts, from the request and its checked body (the session
   * of the signed-in user rather than the one the body names, say). Default: `{ sessionId }` of the
   * body. A `runId` given here is the run's id (default: `crypto.randomUUID()`).
   */
  runOptions?: (request: Request, body: StartRunBody) => RunOptions | Promise<RunOptions>;
  /**
   * Starts the run somewhere else instead of in this process: puts it on a job queue whose workers
   * call `agent.run(input, options)`, say. It resolves once the run is in the store (its first
   * event journaled), so that its events can be followed from any process, or rejects with why it
   * could not start (a `TypeError` answers 400, anything else 409). Answers and cancels still go
   * through the store. Default: the run runs here.
   *
   * With `start` and `resume`, this process runs no run at all, not even a resume: a run whose
   * process died is left to the queue that put it there (BullMQ hands a stalled job to another
   * worker, which resumes the run). With `start` alone, a run that got an answer while suspended
   * (`onRequest: 'suspend'`) or interrupted is resumed here, as without `start`: pass `resume` so
   * that no run depends on this process.
   */
  start?: (input: RunInput, options: RunOptions & { readonly runId: string }) => Promise<void> | void;
  /**
   * With `start` (and only with it): puts the resume of a suspended run (`onRequest: 'suspend'`)
   * that got an answer where `start` puts runs, for a worker there to call `agent.resume(runId)`:
   * a job on the same queue, say. `seq` is that of the run's suspension (the last event in its
   * journal): with the run's id it names this resume, so that the answers given to one suspension
   * (through any number of processes) make one job of it, e.g. as its BullMQ `jobId`. It resolves
   * once the resume is queued (the worker's events are read from the store), and the answer is then
   * 200; a rejection answers 500 naming why (the answer is kept, and the run stays suspended). Called
   * as well when the answer came as the run was suspending, once it has let go; a rejection is then
   * not reported.
   */
  resume?: (runId: string, at: { readonly seq: number }) => Promise<void> | void;
  /** Where the routes are mounted (default `'/runs'`): `POST <basePath>`, `GET <basePath>/:id/events`… */
  basePath?: string;
  /** The largest JSON body accepted, in bytes (default 1 MiB): a larger one is a 413. */
  maxBodyBytes?: number;
  /**
   * A `: ping` comment every so many ms on an open event stream (default 15 000; `Infinity`: off),
   * so that proxies keep a connection open while the run waits for a tool or a person.
   */
  heartbeatMs?: number;
  /** Runs the handler's timers: the heartbeat, and its waits on the store (default `asyncScheduler`). */
  scheduler?: SchedulerLike;
}

/** The keys of {@link RunsHandlerOptions}: any other is refused, as `agent.resume()` refuses an unknown option. */
const HANDLER_OPTIONS = optionNames<RunsHandlerOptions>({
  authorize: true,
  runOptions: true,
  start: true,
  resume: true,
  basePath: true,
  maxBodyBytes: true,
  heartbeatMs: true,
  scheduler: true,
});

/** How long an answer to a request this process has streamed waits for the journal to hold it, in ms. */
const JOURNAL_WAIT_MS = 5_000;

/** How long after another process's lease should have expired a run is looked at again, in ms. */
const LEASE_MARGIN_MS = 50;
/** How long to wait before looking again at a lease that has expired by this process's clock but not by the store's, in ms. */
const CLOCK_SKEW_WAIT_MS = 1_000;
/** How many times a run held by another process is looked at before it is left to its holder. */
const LEASE_CHECKS = 10;

const json = (status: number, body: unknown): Response =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', 'cache-control': 'no-store' } });

/**
 * A fetch-style handler (`(request: Request) => Promise<Response>`) that serves an agent's
 * journaled runs over HTTP, from any number of processes that share the agent's store:
 *
 * - `POST /runs` with `{ "input": …, "sessionId"?: … }` starts a run in this process (or where `start` puts it) and answers
 *   201 `{ "runId" }` (with `Location: /runs/<id>/events`) once the run is in the store; with
 *   `accept: text/event-stream`, it answers with the run's event stream instead (its id in the
 *   `x-run-id` header). The run goes on whatever the client does: a disconnect is not a cancel.
 * - `GET /runs/:id/events`: the run's events as SSE, each frame with `id: <seq>`, up to the run's
 *   end (across a suspension and its resume). `Last-Event-ID` (or `?after=<seq>`) gives the events
 *   after that seq: a client that lost its connection gets the rest (from a process killed
 *   while it ran the run, it may have had events that are no part of the run: read it from 0).
 *   204 when the run has ended and the client has every event. Text streams delta by delta from the process that runs
 *   the run; another process reads the journal, where deltas arrive a batch per write.
 * - `POST /runs/:id/responses` with an answer (`{ "type": "permission-response", "requestId", "approved" }`):
 *   200 `{ "accepted": true }`, or 409 when the run does not wait for that request. An answer to a
 *   request this process streamed from the run it runs, given before the journal holds that
 *   request, waits for the write (5 s at most); through another process it is a 409 then, worth a
 *   retry. A suspended run is resumed here (`agent.resume`), in the process that took the answer;
 *   with `start`, where `start` puts runs (the `resume` option).
 * - `POST /runs/:id/cancel`: 200 `{ "cancelled": true }`, or 409 for a run that has ended (404
 *   once the store dropped it).
 * - `GET /runs/:id`: the run as `agent.runs.get()` tells it (`status`, `sessionId`, `seq`,
 *   `pendingRequests`, and once it ended `reason` and `clientCalls`), without its `lease`: what a
 *   page that comes back after a reload needs to know before it follows, answers or starts anew.
 *
 * Errors are JSON `{ "error" }` naming what was wrong: 400 (bad JSON, input, answer or seq), 403
 * (`authorize` said no), 404 (no such route, or no such run in the store), 405 (method), 413
 * (body over `maxBodyBytes`), 415 (not `application/json`).
 *
 * @throws TypeError when the agent has no store (a run that is not journaled cannot be followed,
 *   answered or cancelled by id), or for a bad option.
 *
 * @example
 * const agent = createAgent({ model, tools, middleware: [permissions()], store: redisStore({ client: new Redis() }) });
 * const handle = runsHandler(agent, { authorize: async (req, runId) => runId === undefined || (await owns(req, runId)) });
 * // fetch-style servers (Next.js, Hono, Bun, Deno): export const GET = handle, POST = handle;
 * createServer(toNodeHandler(handle)).listen(3000); // node:http
 */
export function runsHandler(agent: Agent, options: RunsHandlerOptions = {}): (request: Request) => Promise<Response> {
  if (!agent || typeof agent.run !== 'function' || typeof agent.events !== 'function' || typeof agent.respond !== 'function') {
    throw new TypeError(`runsHandler: expected an agent (createAgent()), got ${show(agent)}`);
  }
  if (!hasStore(agent)) {
    throw new TypeError(
      'runsHandler: the agent has no store; runs served over HTTP are followed, answered and cancelled by id, which needs one: createAgent({ …, store: memoryStore() }) (or redisStore for several processes)',
    );
  }
  checkOptions('runsHandler', options, HANDLER_OPTIONS);
  const {
    authorize,
    runOptions,
    start: startElsewhere,
    resume: resumeElsewhere,
    basePath = '/runs',
    maxBodyBytes = 1 << 20,
    heartbeatMs = 15_000,
    scheduler = asyncScheduler,
  } = options;
  if (authorize !== undefined && typeof authorize !== 'function') throw new TypeError(`runsHandler: 'authorize' must be a function, got ${show(authorize)}`);
  if (runOptions !== undefined && typeof runOptions !== 'function')
    throw new TypeError(`runsHandler: 'runOptions' must be a function, got ${show(runOptions)}`);
  if (startElsewhere !== undefined && typeof startElsewhere !== 'function')
    throw new TypeError(`runsHandler: 'start' must be a function, got ${show(startElsewhere)}`);
  if (resumeElsewhere !== undefined && typeof resumeElsewhere !== 'function')
    throw new TypeError(`runsHandler: 'resume' must be a function, got ${show(resumeElsewhere)}`);
  if (resumeElsewhere && !startElsewhere) throw new TypeError("runsHandler: 'resume' goes with 'start' (without it, runs and their resumes run here)");
  if (typeof basePath !== 'string' || !/^\/(?:[^/?#]+\/?)*$/.test(basePath)) {
    throw new TypeError(`runsHandler: 'basePath' must be a path such as '/runs', got ${show(basePath)}`);
  }
  if (typeof maxBodyBytes !== 'number' || !(maxBodyBytes > 0))
    throw new TypeError(`runsHandler: 'maxBodyBytes' must be a positive number, got ${show(maxBodyBytes)}`);
  checkTimeoutMs('runsHandler', 'heartbeatMs', heartbeatMs);
  if (!isScheduler(scheduler)) throw new TypeError("runsHandler: 'scheduler' must be an rxjs SchedulerLike");
  const base = basePath.replace(/\/$/, '');
  const runs = new LocalRuns();

  /** The run's events after `after`, to its end: from this process while it runs the run, else from the store. */
  const follow = (runId: string, after: number): Observable<AgentEvent> =>
    defer(() => {
      let last = after;
      let ended = false;
      // From the store until this process starts running the run (a resume after an answer).
      const events$ = runs.events(runId, after) ?? agent.events(runId, { after }).pipe(takeUntil(runs.started(runId)));
      return events$.pipe(
        filter((event) => typeof event.seq === 'number' && event.seq > last),
        tap((event) => {
          last = event.seq as number;
          if (event.type === 'run-end' && event.reason !== 'suspended') ended = true;
        }),
        takeWhile((event) => event.type !== 'run-end', true),
        // A suspended run goes on after its resume (here or elsewhere); a local run refused at its
        // start ends without a run-end: both go on, from here or from the store.
        concatWith(defer(() => (ended ? EMPTY : follow(runId, last)))),
      );
    });

  const stream = (runId: string, after: number, headers: Record<string, string> = {}): Response =>
    new Response(toSSEStream(follow(runId, after), { heartbeatMs, scheduler }), { headers: { ...sseHeaders, ...headers } });

  async function start(request: Request): Promise<Response> {
    const body = await readJsonBody(request, maxBodyBytes, 'a run to start: { "input": … }');
    if (body instanceof Response) return body;
    const problem = startBodyProblem(body);
    if (problem) return jsonError(400, problem);
    const given = runOptions ? await runOptions(request, body as StartRunBody) : { sessionId: (body as StartRunBody).sessionId };
    if (given === null || typeof given !== 'object') throw new TypeError(`runsHandler: 'runOptions' must return run options, got ${show(given)}`);
    const runId = given.runId ?? crypto.randomUUID();
    const input = (body as StartRunBody).input;
    const refused = startElsewhere
      ? await Promise.resolve()
          .then(() => startElsewhere(input, { ...given, runId }))
          .then(() => undefined, toErrorInfo)
      : await runs.run(runId, agent.run(input, { ...given, runId }), 1);
    if (refused) return jsonError(refused.name === 'TypeError' ? 400 : 409, `The run could not start: ${refused.message}`);
    const location = `${base}/${encodeURIComponent(runId)}/events`;
    if (/\btext\/event-stream\b/.test(request.headers.get('accept') ?? '')) return stream(runId, 0, { 'x-run-id': runId });
    return new Response(JSON.stringify({ runId }), { status: 201, headers: { 'content-type': 'application/json', location } });
  }

  async function events(request: Request, url: URL, runId: string): Promise<Response> {
    const after = readAfter(request, url);
    if (after instanceof Response) return after;
    if (!runs.has(runId)) {
      const info = await agent.runs.get(runId);
      if (!info) return jsonError(404, new RunNotFoundError(runId).message);
      if (info.status === 'finished' && after >= info.seq) return new Response(null, { status: 204 });
    }
    return stream(runId, after);
  }

  async function respond(request: Request, runId: string): Promise<Response> {
    const body = await readJsonBody(request, maxBodyBytes, 'an answer: { "type": …, "requestId": … }');
    if (body instanceof Response) return body;
    const answer = body as Partial<AgentResponse> | null;
    if (answer === null || typeof answer !== 'object' || Array.isArray(answer) || typeof answer.type !== 'string' || typeof answer.requestId !== 'string') {
      return jsonError(
        400,
        `An answer is a JSON object with a string "type" and "requestId" (e.g. { "type": "permission-response", "requestId": "…", "approved": true }), got ${show(body)}`,
      );
    }
    const response = answer as AgentResponse;
    if (!((await agent.respond(runId, response)) || (await respondOnceJournaled(runId, response)))) {
      // A retry after a failed `resume` (a 500): the answer is kept, the run still suspended; queue
      // its resume again (its seq makes it the same job), so that no run waits for a resume forever.
      if (resumeElsewhere) await resumeIfWaiting(runId, await agent.runs.get(runId)).catch(() => undefined);
      return json(409, {
        accepted: false,
        error: `Run '${runId}' does not wait for request '${answer.requestId}' (unknown, answered already, past its deadline, or the run has ended)`,
      });
    }
    const info = await agent.runs.get(runId);
    if (info?.status === 'running' && info.seq > 0) {
      resumeOnceLetGo(runId, info.seq);
      resumeIfHolderDied(runId, info);
    } else {
      try {
        await resumeIfWaiting(runId, info);
      } catch (error) {
        return json(500, { accepted: true, error: `The answer was kept, but run '${runId}' could not be resumed: ${errorMessage(error)}` });
      }
    }
    return json(200, { accepted: true });
  }

  /**
   * The events of a run this process runs are streamed before the journal holds them (records are
   * written in batches), so a client that answers a request at once may be ahead of its write.
   * When this process has streamed that request, the answer is given again once the journal holds
   * it (waited for `JOURNAL_WAIT_MS` at most): that second answer decides. Any other answer is refused at once.
   */
  async function respondOnceJournaled(runId: string, answer: AgentResponse): Promise<boolean> {
    const seq = runs.requestSeq(runId, answer.requestId);
    if (seq === undefined) return false;
    await lastValueFrom(
      agent.events(runId, { after: seq - 1 }).pipe(
        take(1),
        takeUntil(timer(JOURNAL_WAIT_MS, scheduler)),
        catchError(() => EMPTY), // the answer below meets the same store and says what is wrong
      ),
      { defaultValue: undefined },
    );
    return agent.respond(runId, answer);
  }

  /**
   * A suspended run goes on here, and so does one whose process died while it waited (it holds
   * no lease). Should it wait for other answers too, it asks again, finds the one given, and
   * suspends again until the next answer comes. With `start`, a suspended run goes where `start`
   * puts runs (`resume`), and an interrupted one is left to that queue (its job is handed over).
   */
  async function resumeIfWaiting(runId: string, info: RunInfo | undefined): Promise<void> {
    if (resumeElsewhere) {
      if (info?.status === 'suspended') await resumeElsewhere(runId, { seq: info.seq });
      return;
    }
    if ((info?.status === 'suspended' || info?.status === 'interrupted') && !runs.has(runId)) void runs.run(runId, agent.resume(runId), info.seq + 1);
  }

  /**
   * A run that holds its lease but whose last journaled event is its suspension is letting the
   * lease go: the answer came too late for it (a client that answered from another process as the
   * suspension was written). It is resumed here once the lease is gone, looked for every 20 ms on
   * the scheduler for a second. A run that is simply running hears the answer itself.
   */
  function resumeOnceLetGo(runId: string, seq: number): void {
    agent
      .events(runId, { after: seq - 1 })
      .pipe(
        take(1),
        filter((event) => event.type === 'run-end' && event.reason === 'suspended'),
        switchMap(() =>
          timer(0, 20, scheduler).pipe(
            take(50),
            concatMap(() => agent.runs.get(runId)),
            first((now) => now?.status !== 'running', undefined),
          ),
        ),
      )
      .subscribe({
        next: (now) => void resumeIfWaiting(runId, now).catch(() => undefined), // `resume` failed: the answer is kept, the run stays suspended
        error: () => undefined, // nothing to resume: the run is gone or the store failed; the answer is kept
      });
  }

  /**
   * A run that another process runs hears an answer or a cancel itself, unless that process died
   * while it waited: a lease no one renews still says `running` until it expires. So the run is
   * looked at again once that lease should have expired: gone by then (interrupted), it is resumed
   * here (where `start` puts runs, with `resume`, a queue hands its job over instead). Events from
   * the run before then say that its process lives, and end the watch. Still held then (its
   * holder renewed the lease, or the store's clock is behind this process's), it is looked at again
   * at the new expiry, {@link LEASE_CHECKS} times at most.
   */
  function resumeIfHolderDied(runId: string, info: RunInfo, checks = 1): void {
    const lease = info.lease;
    if (lease === undefined || runs.has(runId) || checks > LEASE_CHECKS) return;
    const left = lease.expiresAt - scheduler.now();
    timer(left > 0 ? left + LEASE_MARGIN_MS : CLOCK_SKEW_WAIT_MS, scheduler)
      .pipe(
        takeUntil(agent.events(runId, { after: info.seq }).pipe(catchError(() => EMPTY))),
        concatMap(() => agent.runs.get(runId)),
      )
      .subscribe({
        next: (now) => {
          if (now?.status === 'running') return resumeIfHolderDied(runId, now, checks + 1);
          void resumeIfWaiting(runId, now).catch(() => undefined); // `resume` failed: the run stays interrupted, as it was
        },
        error: () => undefined, // the store failed: nothing is lost, the run stays as it was
      });
  }

  /** The run as `agent.runs.get()` tells it, without its lease (which process holds it is the servers' business). */
  async function info(runId: string): Promise<Response> {
    const found = await agent.runs.get(runId);
    // With the run's id: a client tells "no such run" from a 404 of no route (a wrong base URL).
    if (!found) return json(404, { error: new RunNotFoundError(runId).message, runId });
    const { lease: _lease, ...shown } = found;
    return json(200, shown);
  }

  async function cancel(runId: string): Promise<Response> {
    if (await agent.cancel(runId)) {
      const info = await agent.runs.get(runId);
      if (info?.status === 'running') resumeIfHolderDied(runId, info); // resumed, it finds the cancel and ends
      return json(200, { cancelled: true });
    }
    return json(409, { cancelled: false, error: `Run '${runId}' has ended already` });
  }

  return async (request: Request): Promise<Response> => {
    try {
      const url = new URL(request.url);
      const route = matchRoute(base, url.pathname);
      if (!route) return jsonError(404, `No route for ${request.method} ${url.pathname}: the runs are under ${base}`);
      const method = route.action === 'events' || route.action === 'info' ? 'GET' : 'POST';
      if (request.method !== method) {
        return jsonError(405, `Method ${request.method} not allowed on ${url.pathname}: ${method}`, { allow: method });
      }
      if (route.runId === null) return jsonError(400, `The run id in ${url.pathname} is not valid percent-encoding`);
      if (authorize) {
        const verdict = await authorize(request, route.runId);
        if (verdict instanceof Response) return verdict;
        if (verdict !== true) return jsonError(403, route.runId === undefined ? 'Not allowed to start a run' : `Not allowed to access run '${route.runId}'`);
      }
      switch (route.action) {
        case 'start':
          return await start(request);
        case 'events':
          return await events(request, url, route.runId);
        case 'responses':
          return await respond(request, route.runId);
        case 'info':
          return await info(route.runId);
        case 'cancel':
          return await cancel(route.runId);
      }
    } catch (error) {
      if (error instanceof RunNotFoundError) return jsonError(404, error.message);
      return jsonError(500, `The runs handler failed: ${errorMessage(error)}`);
    }
  };
}

/** Whether the agent has a store: `events()` by id says so at once, without touching one. */
function hasStore(agent: Agent): boolean {
  let missing = false;
  agent
    .events('')
    .subscribe({ error: (error) => (missing = error instanceof StoreRequiredError) })
    .unsubscribe();
  return !missing;
}

type Route =
  { readonly action: 'start'; readonly runId: undefined } | { readonly action: 'info' | 'events' | 'responses' | 'cancel'; readonly runId: string | null };

function matchRoute(base: string, path: string): Route | undefined {
  if (path === base || path === `${base}/`) return { action: 'start', runId: undefined };
  if (!path.startsWith(`${base}/`)) return undefined;
  const match = /^([^/]+)(?:\/(events|responses|cancel))?\/?$/.exec(path.slice(base.length + 1));
  if (!match) return undefined;
  let runId: string | null;
  try {
    runId = decodeURIComponent(match[1]);
  } catch {
    runId = null;
  }
  return { action: (match[2] ?? 'info') as 'events' | 'responses' | 'cancel' | 'info', runId };
}

function startBodyProblem(body: unknown): string | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return `The body is a JSON object { "input": … }, got ${show(body)}`;
  const { input, sessionId } = body as { input?: unknown; sessionId?: unknown };
  if (!(typeof input === 'string' && input !== '') && !(typeof input === 'object' && input !== null)) {
    return `"input" must be a non-empty string, a message or an array of messages, got ${show(input)}`;
  }
  if (sessionId !== undefined && (typeof sessionId !== 'string' || sessionId === '')) return `"sessionId" must be a non-empty string, got ${show(sessionId)}`;
  return undefined;
}

/** The seq a client has: `Last-Event-ID` (an SSE client's reconnect), else `?after=`, else 0. */
function readAfter(request: Request, url: URL): number | Response {
  const header = request.headers.get('last-event-id');
  const [name, raw] = header !== null ? ['Last-Event-ID', header.trim()] : ['after', url.searchParams.get('after')];
  if (raw === null || raw === '') return 0;
  const after = /^\d{1,15}$/.test(raw) ? Number(raw) : NaN;
  if (Number.isNaN(after)) return jsonError(400, `${name} must be the seq of an event (a whole number >= 0), got ${JSON.stringify(raw)}`);
  return after;
}

/**
 * The runs this process runs (started or resumed here), each with its events so far, so that a
 * stream served here gets every delta as it happens. A run leaves at its `run-end`: its events are
 * then read from the store, which holds that end.
 */
class LocalRuns {
  private readonly live = new Map<string, LocalRun>();
  private readonly starts = new Subject<string>();

  has(runId: string): boolean {
    return this.live.has(runId);
  }

  /** The run's events here, when this process has every one after `after` (a resume has only its own). */
  events(runId: string, after: number): Observable<AgentEvent> | undefined {
    const run = this.live.get(runId);
    if (!run || run.firstSeq > after + 1) return undefined;
    return run.log.asObservable();
  }

  /** The seq of the request event with that id the run streamed here, if it did. */
  requestSeq(runId: string, requestId: string): number | undefined {
    return this.live.get(runId)?.requests.get(requestId);
  }

  /** Emits once this process starts running the run. */
  started(runId: string): Observable<unknown> {
    return this.starts.pipe(first((id) => id === runId));
  }

  /**
   * Runs `events$` here, a new run (its first seq 1) or a resume (the seq after the journal's);
   * resolves once it is in the store, or with why it was refused.
   */
  run(runId: string, events$: Observable<AgentEvent>, firstSeq: number): Promise<ErrorInfo | undefined> {
    const log = new ReplaySubject<AgentEvent>();
    const run: LocalRun = { log, firstSeq, requests: new Map() };
    // A run of that id is live here already: this one will be refused (its lease is held), and
    // must not take the live one's place, whose streams would then go to the store.
    if (!this.live.has(runId)) {
      this.live.set(runId, run);
      this.starts.next(runId);
    }
    const leave = () => {
      if (this.live.get(runId) === run) this.live.delete(runId);
    };
    return new Promise((resolve) => {
      let started = false;
      let refusal: ErrorInfo | undefined;
      events$.subscribe({
        next: (event) => {
          if (!started && typeof event.seq === 'number') {
            started = true;
            resolve(undefined);
          } else if (!started && event.type === 'error') refusal = event.error;
          if (event.type === 'run-end') leave();
          else if (isRequest(event)) run.requests.set(event.requestId, event.seq);
          log.next(event);
        },
        error: (error) => {
          leave();
          log.error(error);
          if (!started) resolve(toErrorInfo(error));
        },
        complete: () => {
          leave();
          log.complete();
          if (!started) resolve(refusal ?? { name: 'Error', message: 'the run ended before it started' });
        },
      });
    });
  }
}

interface LocalRun {
  readonly log: ReplaySubject<AgentEvent>;
  /** The seq of its first event: what happened before (a resume's run before its suspension) is in the store. */
  readonly firstSeq: number;
  /** The seq of each request event it streamed, by `requestId`. */
  readonly requests: Map<string, number>;
}

/** A journaled request to a person or another responder (`permission-request`, `continuation-request`…). */
function isRequest(event: AgentEvent): event is AgentEvent & { readonly requestId: string; readonly seq: number } {
  return event.type.endsWith('-request') && typeof (event as { requestId?: unknown }).requestId === 'string' && typeof event.seq === 'number';
}
