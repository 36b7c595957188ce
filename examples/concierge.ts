/**
 * What both modes of the demo share: the model, the agent, and how a run's events are printed.
 */
import OpenAI from 'openai';
import { createAgent, type AgentEvent, type AgentMiddleware, type AgentStore } from '../src/index';
import { openAIChat } from '../src/openai/index';
import { circuitBreaker, lifecycleEvents, modelRetry, modelTimeout, permissions } from '../operators/index';
import { startEmbeddedModel } from './embeddedModel';
import { AfternoonPlan, bookTable, getWeather, searchPlaces } from './tools';

export const style = {
  dim: (s: string) => `\x1b[2m${s}\x1b[22m`,
  bold: (s: string) => `\x1b[1m${s}\x1b[22m`,
  cyan: (s: string) => `\x1b[36m${s}\x1b[39m`,
  yellow: (s: string) => `\x1b[33m${s}\x1b[39m`,
  red: (s: string) => `\x1b[31m${s}\x1b[39m`,
};

/** The demo's model: the embedded scripted one, or the endpoint of OPENAI_API_KEY. */
export async function demoModel() {
  const embedded = process.env.OPENAI_API_KEY ? undefined : await startEmbeddedModel();
  const modelName = process.env.OPENAI_MODEL ?? (embedded ? 'embedded-scripted-model' : 'gpt-4o-mini');
  const client = embedded
    ? new OpenAI({ apiKey: 'not-needed', baseURL: embedded.url })
    : new OpenAI({ apiKey: process.env.OPENAI_API_KEY, baseURL: process.env.OPENAI_BASE_URL });
  console.log(
    style.dim(
      embedded
        ? `Model: the embedded scripted model, served over HTTP+SSE at ${embedded.url} (set OPENAI_API_KEY to use a real one).`
        : `Model: ${modelName} at ${process.env.OPENAI_BASE_URL ?? 'api.openai.com'}.`,
    ),
  );
  return { model: openAIChat({ client, model: modelName }), close: async () => embedded?.close() };
}

/** The demo's agent; the durable mode adds a store, suspends on requests and slows the booking down. */
export function demoAgent(
  model: ReturnType<typeof openAIChat>,
  options: {
    store?: AgentStore;
    bookTable?: typeof bookTable;
    permissionTimeoutMs?: number;
    leaseMs?: number;
    tracing?: { middleware: AgentMiddleware } | undefined;
    /** Structured output: the final answer is an {@link AfternoonPlan}. */
    json?: boolean;
  } = {},
) {
  return createAgent({
    name: 'concierge',
    model,
    instructions: 'You are a concise Paris concierge. Use the tools; ask before booking.',
    tools: [getWeather, searchPlaces, options.bookTable ?? bookTable],
    middleware: [
      lifecycleEvents(),
      modelRetry({ maxRetries: 2 }),
      modelTimeout({ firstTokenMs: 30_000, idleMs: 30_000 }),
      circuitBreaker({ maxConsecutiveCalls: 3 }),
      permissions({ timeout: options.permissionTimeoutMs ?? 120_000 }),
      ...(options.tracing ? [options.tracing.middleware] : []),
    ],
    ...(options.store ? { store: options.store, onRequest: 'suspend' as const, leaseMs: options.leaseMs } : {}),
    ...(options.json ? { output: AfternoonPlan } : {}),
  });
}

/** Starts the agent's line of the transcript. */
export function startAnswer(): void {
  process.stdout.write(`${style.bold('Agent:')} `);
  midLine = true;
}

/** Streamed text continues a line; everything else gets a line of its own. */
let midLine = false;
/** How many `output-delta` events the run sent (with --json). */
let outputDeltas = 0;
export function line(text: string): void {
  process.stdout.write(`${midLine ? '\n' : ''}${text}\n`);
  midLine = false;
}

/** Ends a streamed line, if one is open. */
export function endLine(): void {
  if (midLine) process.stdout.write('\n');
  midLine = false;
}

/** Prints an event; what a permission request does is up to the caller. */
export async function show(
  event: AgentEvent,
  onPermission: (event: Extract<AgentEvent, { type: 'permission-request' }>) => void | Promise<void>,
): Promise<void> {
  switch (event.type) {
    case 'text-delta':
      process.stdout.write(event.text);
      midLine = true;
      break;
    case 'tool-call':
      line(style.cyan(`→ ${event.name}(${JSON.stringify(event.args)})`));
      break;
    case 'tool-result':
      line((event.isError ? style.red : style.dim)(`← ${event.name}: ${typeof event.result === 'string' ? event.result : JSON.stringify(event.result)}`));
      break;
    case 'model-retry':
      line(style.yellow(`[retrying the model in ${event.delayMs} ms: ${event.error.message}]`));
      break;
    case 'permission-request':
      await onPermission(event);
      break;
    case 'cost-recorded':
      break;
    case 'error':
      line(style.red(`[error from ${event.source}: ${event.error.message}]`));
      break;
    case 'output-delta':
      outputDeltas++;
      break;
    case 'run-end':
      if (event.output !== undefined) {
        line(style.bold(`Structured output (checked by zod; ${outputDeltas} partial objects streamed as output-delta):`));
        line(JSON.stringify(event.output, null, 2));
      }
      line(
        style.dim(
          `\n[run ended: ${event.reason}${event.terminationReason ? ` (${event.terminationReason})` : ''}; ${event.usage.inputTokens} input + ${event.usage.outputTokens} output tokens]`,
        ),
      );
      break;
  }
}
