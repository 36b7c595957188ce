import type { Observable } from 'rxjs';
import { z } from 'zod';
import { toReadableStream, type Agent, type AgentEvent, type RunOptions } from '../index';
import { SuspendedRuns, UnknownInterruptError, questionId, type UiAnswer } from '../bindings/suspendedRuns';
import { jsonError, readJsonBody } from '../bindings/jsonRequest';
import { fromUIMessages, type UIMessageLike } from './fromUIMessages';
import { toUIMessageFrames, type ToUIMessageStreamOptions } from './toUIMessageStream';
import { checkOptions, optionNames } from '../internal/optionNames';

/**
 * What `DefaultChatTransport` posts: the chat's id and its messages (and the app's own fields);
 * `answers`, the client's answers to requests other than approvals (see {@link aiSdkHandler}).
 */
export interface ChatRequestBody {
  readonly id?: string;
  readonly messages: readonly UIMessageLike[];
  readonly answers?: readonly RequestAnswer[];
  readonly [key: string]: unknown;
}

/**
 * An answer to a run's request sent in the chat request's body (`answers`): `id` the one its
 * transient `data-<type>` chunk had, and the response's fields (`extension`, `reason`…).
 *
 * @example
 * chat.sendMessage(undefined, { body: { answers: [{ id: chunk.id, approved: true, extension: 5 }] } });
 */
export interface RequestAnswer {
  readonly id: string;
  readonly approved: boolean;
  readonly [field: string]: unknown;
}

/** Options of {@link aiSdkHandler}; `onError` masks what clients are told of errors (see {@link ToUIMessageStreamOptions}). */
export interface AiSdkHandlerOptions extends Pick<ToUIMessageStreamOptions, 'onError'> {
  /**
   * Options of each new run (a run id, a signal…), from the chat request. The request's messages
   * are the conversation, so a `sessionId` would add its history a second time.
   */
  runOptions?: (body: ChatRequestBody, request: Request) => RunOptions | Promise<RunOptions>;
  /** The largest request body accepted, in bytes (default 1 MiB). */
  maxBodyBytes?: number;
}

/** The keys of {@link AiSdkHandlerOptions}: any other is refused. */
const OPTIONS = optionNames<AiSdkHandlerOptions>({ runOptions: true, maxBodyBytes: true, onError: true });

/** The headers of a UI message stream response (protocol v1). */
export const UI_MESSAGE_STREAM_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-vercel-ai-ui-message-stream': 'v1',
  'x-accel-buffering': 'no',
});

const BodySchema = z.looseObject({
  messages: z
    .array(z.looseObject({ id: z.string(), role: z.enum(['system', 'user', 'assistant']), parts: z.array(z.looseObject({ type: z.string() })) }))
    .min(1),
  answers: z.array(z.looseObject({ id: z.string(), approved: z.boolean() })).optional(),
});

/**
 * A fetch-style handler, `(request: Request) => Promise<Response>`, for the AI SDK's chat
 * clients (`useChat`, `DefaultChatTransport`): it takes the chat request (POST, JSON,
 * `{ messages: UIMessage[] }`) and answers with the run as a UI message stream v1 (SSE, header
 * `x-vercel-ai-ui-message-stream: v1`). The messages are the conversation the run continues.
 *
 * Approvals: a run that asks for a tool's approval is suspended: it is journaled in the agent's
 * store, and the response sends `tool-approval-request` (its `approvalId` names the run and the
 * request, `<runId>:<requestId>`) and ends (finish reason `tool-calls`). The client's
 * `addToolApprovalResponse()` and a resend (`sendAutomaticallyWhen:` {@link approvalsAnswered})
 * post the messages again, to this server or to any other whose agent shares the store: the
 * approval responses in the last assistant message are journaled and the response streams the
 * rest of the run into the same message. A run asks a step's approvals one after another, each
 * after the answer to the one before (`permissions()` does, so that a remembered choice applies
 * to the next call): each resend brings the next question, until the calls run. Responses the
 * run took already are left out; when the run waits for none of them, it is a 409. An agent
 * without a store gets a `memoryStore()` of its own: approvals must then come back to this
 * process. A client that goes away cancels the run.
 *
 * Other requests (a `continuation-request`, a middleware's own) go out as a transient
 * `data-<type>` chunk whose `id` names the run and the request (`onData` sees it), and the
 * response ends (finish reason `tool-calls`). The client answers with a resend whose body has
 * `answers: [{ id, approved, ...fields }]`: `chat.sendMessage(undefined, { body: { answers } })`.
 *
 * A GET (`useChat({ resume: true })` reconnecting) is a 204: no stream to resume, a response ends
 * with its connection.
 *
 * Errors: 405, 415, 413, 400, with a JSON body `{ error }` that says what was wrong. A run that
 * fails ends with an `error` chunk whose text is `An error occurred.`, as the AI SDK's own default,
 * unless `onError` says what to tell (`onError: (error) => error.message` sends the error's text).
 *
 * @example
 * const chat = aiSdkHandler(createAgent({ model, tools, store: redisStore({ client: new Redis() }) }));
 * export const POST = chat; // a Next.js route; or Bun.serve({ fetch: chat }), Hono, node:http through an adapter
 */
export function aiSdkHandler(agent: Agent, options: AiSdkHandlerOptions = {}): (request: Request) => Promise<Response> {
  if (!agent || typeof agent.start !== 'function') throw new TypeError('aiSdkHandler: expected an agent (createAgent(...))');
  checkOptions('aiSdkHandler', options, OPTIONS);
  const { runOptions, maxBodyBytes = 1 << 20, onError } = options;
  if (runOptions !== undefined && typeof runOptions !== 'function')
    throw new TypeError('aiSdkHandler: runOptions must be a function (body, request) => RunOptions');
  if (!(maxBodyBytes > 0)) throw new TypeError(`aiSdkHandler: maxBodyBytes must be a positive number, got ${String(maxBodyBytes)}`);
  const runs = new SuspendedRuns(agent);

  return async (request) => {
    // What the AI SDK's transport expects when there is no active stream to reconnect to.
    if (request.method === 'GET') return new Response(null, { status: 204 });
    const read = await readBody(request, maxBodyBytes);
    if (read instanceof Response) return read;
    const body = read;
    const answers = approvalAnswers(body.messages);
    for (const { id, approved, ...fields } of body.answers ?? []) answers.push({ id, approved, fields });
    let events$: Observable<AgentEvent>;
    if (answers.length > 0) {
      try {
        events$ = await runs.resume(answers, { onlyWaiting: true });
      } catch (error) {
        if (error instanceof UnknownInterruptError) return jsonError(409, error.message);
        throw error;
      }
    } else {
      const given = runOptions ? await runOptions(body, request) : {};
      events$ = runs.start(fromUIMessages(body.messages), given);
    }
    const frames$ = events$.pipe(toUIMessageFrames({ onError, approvalId: questionId }));
    return new Response(withDone(toReadableStream(frames$)).pipeThrough(new TextEncoderStream()), { headers: UI_MESSAGE_STREAM_HEADERS });
  };
}

/**
 * A `sendAutomaticallyWhen` for {@link aiSdkHandler}: resend once the last assistant message's
 * last step has an approval response and no approval still asked. Unlike the AI SDK's
 * `lastAssistantMessageIsCompleteWithApprovalResponses`, calls still `input-available` do not hold
 * the resend back: they wait on the server, whose run asks their approvals one after another.
 *
 * @example
 * useChat({ transport: new DefaultChatTransport({ api: '/api/chat' }), sendAutomaticallyWhen: approvalsAnswered });
 */
export function approvalsAnswered({ messages }: { readonly messages: readonly UIMessageLike[] }): boolean {
  const last = messages[messages.length - 1];
  if (!last || last.role !== 'assistant') return false;
  let answered = false;
  for (let i = last.parts.length - 1; i >= 0; i--) {
    const part = last.parts[i];
    if (part.type === 'step-start') break;
    if (part.state === 'approval-requested') return false;
    if (part.state === 'approval-responded') answered = true;
  }
  return answered;
}

/** The approval responses of the last message, when it is the assistant's (a resend after approvals). */
function approvalAnswers(messages: readonly UIMessageLike[]): UiAnswer[] {
  const last = messages[messages.length - 1];
  if (!last || last.role !== 'assistant') return [];
  const answers: UiAnswer[] = [];
  for (const part of last.parts) {
    if (part.state !== 'approval-responded') continue;
    const approval = part.approval as { id?: unknown; approved?: unknown; reason?: unknown } | undefined;
    if (!approval || typeof approval.id !== 'string') continue;
    const fields = typeof approval.reason === 'string' && approval.reason !== '' ? { reason: approval.reason } : undefined;
    answers.push({ id: approval.id, approved: approval.approved === true, fields });
  }
  return answers;
}

/** The frames, then the stream's end marker. */
function withDone(frames: ReadableStream<string>): ReadableStream<string> {
  return frames.pipeThrough(
    new TransformStream<string, string>({
      flush: (controller) => controller.enqueue('data: [DONE]\n\n'),
    }),
  );
}

async function readBody(request: Request, maxBodyBytes: number): Promise<ChatRequestBody | Response> {
  const body = await readJsonBody(request, maxBodyBytes, 'a chat request');
  if (body instanceof Response) return body;
  const parsed = BodySchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return jsonError(400, `Not a chat request: ${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  return parsed.data;
}
