/**
 * The rx-agent demo: an agent with three tools (one needs approval) and several middleware,
 * streaming its answer to the terminal. Run with `npm start`.
 *
 * With OPENAI_API_KEY set it talks to that endpoint (OPENAI_BASE_URL, OPENAI_MODEL optional);
 * without it, to an embedded scripted model served over real HTTP + SSE on 127.0.0.1.
 * `npm start -- --trace` also records the run with `telemetry()` and prints its trace tree.
 */
import OpenAI from 'openai';
import { createInterface } from 'node:readline/promises';
import { createAgent, type AgentEvent, type RunHandle } from '../src/index';
import { openAIChat } from '../src/openai/index';
import { circuitBreaker, lifecycleEvents, modelRetry, modelTimeout, permissions } from '../operators/index';
import { startEmbeddedModel } from './embeddedModel';
import { bookTable, getWeather, searchPlaces } from './tools';

const style = {
  dim: (s: string) => `\x1b[2m${s}\x1b[22m`,
  bold: (s: string) => `\x1b[1m${s}\x1b[22m`,
  cyan: (s: string) => `\x1b[36m${s}\x1b[39m`,
  yellow: (s: string) => `\x1b[33m${s}\x1b[39m`,
  red: (s: string) => `\x1b[31m${s}\x1b[39m`,
};

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const tracing = args.includes('--trace') ? (await import('./traceTree')).traceInMemory() : undefined;
  const question =
    args.filter((a) => a !== '--trace').join(' ') || 'Plan my afternoon in Paris: check the weather, find a café and book a table for 2 at 16:00.';
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

  const agent = createAgent({
    name: 'concierge',
    model: openAIChat({ client, model: modelName }),
    instructions: 'You are a concise Paris concierge. Use the tools; ask before booking.',
    tools: [getWeather, searchPlaces, bookTable],
    middleware: [
      lifecycleEvents(),
      modelRetry({ maxRetries: 2 }),
      modelTimeout({ firstTokenMs: 30_000, idleMs: 30_000 }),
      circuitBreaker({ maxConsecutiveCalls: 3 }),
      permissions({ timeout: 120_000 }),
      ...(tracing ? [tracing.middleware] : []),
    ],
  });

  console.log(`${style.bold('You:')} ${question}`);
  process.stdout.write(`${style.bold('Agent:')} `);
  midLine = true;
  const handle = agent.start(question);
  process.once('SIGINT', () => handle.cancel());
  await new Promise<void>((resolve) => {
    handle.events$.subscribe({ next: (event) => void show(event, handle), complete: resolve });
  });
  await embedded?.close();
  tracing?.print((text) => line(style.dim(text)));
}

/** Streamed text continues a line; everything else gets a line of its own. */
let midLine = false;
function line(text: string): void {
  process.stdout.write(`${midLine ? '\n' : ''}${text}\n`);
  midLine = false;
}

async function show(event: AgentEvent, handle: RunHandle): Promise<void> {
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
      handle.respond(await askPermission(event.toolName, event.args, event.requestId));
      break;
    case 'cost-recorded':
      break;
    case 'error':
      line(style.red(`[error from ${event.source}: ${event.error.message}]`));
      break;
    case 'run-end':
      line(
        style.dim(
          `\n[run ended: ${event.reason}${event.terminationReason ? ` (${event.terminationReason})` : ''}; ${event.usage.inputTokens} input + ${event.usage.outputTokens} output tokens]`,
        ),
      );
      break;
  }
}

async function askPermission(toolName: string, args: unknown, requestId: string) {
  const prompt = style.yellow(`? Allow ${toolName}(${JSON.stringify(args)})? [y/N] `);
  if (!process.stdin.isTTY) {
    line(prompt);
    line(style.yellow('stdin is not interactive: denying (the safe default).'));
    return { type: 'permission-response' as const, requestId, approved: false, reason: 'no interactive terminal to ask' };
  }
  if (midLine) process.stdout.write('\n');
  midLine = false;
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  const answer = (await rl.question(prompt)).trim().toLowerCase();
  rl.close();
  const approved = answer === 'y' || answer === 'yes';
  return { type: 'permission-response' as const, requestId, approved, reason: approved ? undefined : 'declined at the terminal' };
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
