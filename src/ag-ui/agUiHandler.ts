import type { Observable } from 'rxjs';
import { z } from 'zod';
import type { ResumeEntry, RunAgentInput } from '@ag-ui/client';
import { toReadableStream, type Agent, type AgentEvent, type RunOptions } from '../index';
import { fromAgUiMessages } from './fromAgUiMessages';
import { clientToolsOf, RunAgentInputError } from './clientTools';
import { SuspendedRuns, UnknownInterruptError, questionId, type UiAnswer } from '../bindings/suspendedRuns';
import { jsonError, readJsonBody } from '../bindings/jsonRequest';
import { checkOnError, toAgUiFrames, type ToAgUiOptions } from './toAgUi';
import { checkOptions, optionNames } from '../internal/optionNames';

/** Options of {@link agUiHandler}; `onError` masks what clients are told of errors (see {@link ToAgUiOptions}). */
export interface AgUiHandlerOptions extends Pick<ToAgUiOptions, 'onError'> {
  /**
   * Options of each new run (a signal…), from the request; `runId` is the input's. The input's
   * `messages` are the conversation, so a `sessionId` would add its history a second time. A
   * `state` given here is the run's instead of the one taken from the input's `state`, and `tools`
   * given here are the run's instead of the client tools made of the input's `tools`.
   */
  runOptions?: (input: RunAgentInput, request: Request) => RunOptions | Promise<RunOptions>;
  /** The largest request body accepted, in bytes (default 1 MiB). */
  maxBodyBytes?: number;
}

/** The keys of {@link AgUiHandlerOptions}: any other is refused. */
const AG_UI_HANDLER_OPTIONS = optionNames<AgUiHandlerOptions>({ runOptions: true, maxBodyBytes: true, onError: true });

const ResumeEntrySchema = z.looseObject({ interruptId: z.string(), status: z.enum(['resolved', 'cancelled']), payload: z.unknown().optional() });
const RunAgentInputSchema = z.looseObject({
  threadId: z.string(),
  runId: z.string(),
  messages: z.array(z.looseObject({ id: z.string(), role: z.string() })),
  resume: z.array(ResumeEntrySchema).optional(),
});

/** The AG-UI SSE headers. */
const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' };

/**
 * A fetch-style handler, `(request: Request) => Promise<Response>`, that speaks AG-UI over HTTP:
 * it takes a `RunAgentInput` (POST, JSON) and answers with the run as an AG-UI SSE stream
 * (`data: <event JSON>` frames, as `@ag-ui/encoder` writes them), for `HttpAgent`, CopilotKit or
 * any AG-UI client. The input's `messages` are the conversation the run continues; the run's id
 * is the input's `runId`. Its `state` holds the shared state the run starts from: the keys the
 * agent's middleware share (`run(input, { state })`), the client's other keys left alone; a value
 * a key's schema refuses fails the run (`RUN_ERROR`).
 *
 * Questions: a run that asks one (a `permission-request`…) is suspended: it is journaled in the
 * agent's store and the response ends with `RUN_FINISHED` and an `interrupt` outcome naming what
 * it waits for (`id` = `<runId>:<requestId>`). A later input whose `resume` entries answer it
 * (`payload: { approved, reason?, remember? }` or `status: 'cancelled'`), sent to this server or
 * to any other whose agent shares the store, journals the answers and streams the rest of the
 * run. An agent without a store gets a `memoryStore()` of its own: answers must then come back to
 * this process. An answer no run waits for is a 409. A client that goes away cancels the run.
 *
 * Errors: 405 (not POST), 415 (not JSON), 413 (body over `maxBodyBytes`), 400 (not JSON, not a
 * `RunAgentInput`, or malformed `tools` the run would use: no resume, no `tools` from `runOptions`),
 * each with a JSON body `{ error }` that says what was wrong. A run that fails ends with
 * `RUN_ERROR`, whose message is `An error occurred.` unless `onError` says what to tell (by default
 * no error's text reaches the client, which could hold server details;
 * `onError: (error) => error.message` sends them; an `onError` that throws tells `An error occurred.`).
 *
 * @example
 * const handle = agUiHandler(createAgent({ model, tools, store: redisStore({ client: new Redis() }) }));
 * Bun.serve({ fetch: handle }); // or Deno.serve(handle), a Next.js route, Hono, node:http through an adapter
 */
export function agUiHandler(agent: Agent, options: AgUiHandlerOptions = {}): (request: Request) => Promise<Response> {
  if (!agent || typeof agent.start !== 'function') throw new TypeError('agUiHandler: expected an agent (createAgent(...))');
  checkOptions('agUiHandler', options, AG_UI_HANDLER_OPTIONS);
  const { runOptions, maxBodyBytes = 1 << 20, onError } = options;
  checkOnError('agUiHandler', onError);
  if (runOptions !== undefined && typeof runOptions !== 'function')
    throw new TypeError('agUiHandler: runOptions must be a function (input, request) => RunOptions');
  if (!(maxBodyBytes > 0)) throw new TypeError(`agUiHandler: maxBodyBytes must be a positive number, got ${String(maxBodyBytes)}`);
  const runs = new SuspendedRuns(agent);

  return async (request) => {
    const read = await readInput(request, maxBodyBytes);
    if (read instanceof Response) return read;
    const input = read;
    let events$: Observable<AgentEvent>;
    try {
      events$ = await eventsFor(runs, input, runOptions && (() => runOptions(input, request)));
    } catch (error) {
      if (error instanceof UnknownInterruptError) return jsonError(409, error.message);
      if (error instanceof RunAgentInputError) return jsonError(400, error.message);
      throw error;
    }
    const frames$ = events$.pipe(toAgUiFrames({ threadId: input.threadId, runId: input.runId, interruptId: questionId, onError }));
    return new Response(toReadableStream(frames$).pipeThrough(new TextEncoderStream()), { headers: SSE_HEADERS });
  };
}

/**
 * @internal The events of a new run for `input`, or of the run its `resume` entries answer. A new
 * run starts from the client's `state`, the keys the agent shares (the client's own keys stay
 * the client's), unless the run options give a `state` of their own; its `tools` are the client's,
 * unless the run options give `tools` of their own. Rejects with a {@link RunAgentInputError} when
 * the client's tools, to be used, are malformed (a resume, which keeps its run's tools, does not
 * read them).
 */
export async function eventsFor(
  runs: SuspendedRuns,
  input: RunAgentInput,
  optionsFor: (() => RunOptions | Promise<RunOptions>) | undefined,
): Promise<Observable<AgentEvent>> {
  if (input.resume && input.resume.length > 0) return runs.resume(input.resume.map(toAnswer));
  const options = optionsFor ? await optionsFor() : {};
  const state = options?.state ?? sharedState(runs.agent.sharedStateKeys ?? [], input.state);
  // The client's own tools (frontend actions): offered to the model, their calls left to the client.
  const tools = options?.tools ?? clientToolsOf(input.tools, runs.agent.toolNames);
  return runs.start(fromAgUiMessages(input.messages), {
    ...options,
    ...(state === undefined ? {} : { state }),
    ...(tools === undefined ? {} : { tools }),
    runId: input.runId,
  });
}

/** The entries of a client's `state` whose keys the agent shares (undefined when there are none). */
function sharedState(keys: readonly string[], state: unknown): Record<string, unknown> | undefined {
  if (keys.length === 0 || state === null || typeof state !== 'object' || Array.isArray(state)) return undefined;
  let shared: Record<string, unknown> | undefined;
  for (const key of keys) {
    if (!Object.prototype.hasOwnProperty.call(state, key)) continue;
    shared ??= {};
    // defineProperty: a key named `__proto__` is kept, not made the prototype.
    Object.defineProperty(shared, key, { value: (state as Record<string, unknown>)[key], enumerable: true, writable: true, configurable: true });
  }
  return shared;
}

/**
 * A resume entry as an answer: `payload` `{ approved, reason?, remember? }` (or `true`/`false`)
 * for a permission, `{ approved, extension? }` for a continuation, a response's fields otherwise;
 * `status: 'cancelled'` refuses (reason `cancelled`).
 */
function toAnswer(entry: ResumeEntry): UiAnswer {
  const payload: unknown = entry.payload;
  const fields = typeof payload === 'boolean' ? {} : payload !== null && typeof payload === 'object' ? (payload as Record<string, unknown>) : {};
  const approved = entry.status === 'resolved' && (payload === true || fields.approved === true);
  if (entry.status === 'cancelled' && fields.reason === undefined) return { id: entry.interruptId, approved, fields: { ...fields, reason: 'cancelled' } };
  return { id: entry.interruptId, approved, fields };
}

async function readInput(request: Request, maxBodyBytes: number): Promise<RunAgentInput | Response> {
  const body = await readJsonBody(request, maxBodyBytes, 'a RunAgentInput');
  if (body instanceof Response) return body;
  const parsed = RunAgentInputSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return jsonError(400, `Not a RunAgentInput: ${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  const input = parsed.data as unknown as RunAgentInput;
  if (!(input.resume && input.resume.length > 0) && input.messages.length === 0)
    return jsonError(400, 'Not a RunAgentInput to run: no messages and no resume entries');
  return input;
}
