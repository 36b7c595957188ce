/**
 * The rx-agent demo: an agent with three tools (one needs approval) and several middleware,
 * streaming its answer to the terminal. Run with `npm start`.
 *
 * With OPENAI_API_KEY set it talks to that endpoint (OPENAI_BASE_URL, OPENAI_MODEL optional);
 * without it, to an embedded scripted model served over real HTTP + SSE on 127.0.0.1.
 * `npm start -- --trace` also records the run with `telemetry()` and prints its trace tree.
 * `npm start -- --json` asks for structured output: the final answer is a JSON plan that a zod
 * schema checks, streamed as it is written (`output-delta`) and printed parsed at the end.
 * `npm start -- --redis` makes the run durable in Redis (see ./durableDemo.ts): it suspends for
 * the approval, to be answered, resumed or followed by id from any other terminal.
 */
import { createInterface } from 'node:readline/promises';
import { demoAgent, demoModel, endLine, line, show, startAnswer, style } from './concierge';
import { DemoError, parseDemoArgs, type DemoArgs } from './demoArgs';

async function main(): Promise<void> {
  const args = parseDemoArgs(process.argv.slice(2));
  if (args.redis) return (await import('./durableDemo')).durableDemo(args);
  await interactiveDemo(args);
}

async function interactiveDemo(args: DemoArgs): Promise<void> {
  const tracing = args.trace ? (await import('./traceTree')).traceInMemory() : undefined;
  const question = args.question;
  const { model, close } = await demoModel();
  const agent = demoAgent(model, { tracing, json: args.json });

  console.log(`${style.bold('You:')} ${question}`);
  startAnswer();
  const handle = agent.start(question);
  process.once('SIGINT', () => handle.cancel());
  await new Promise<void>((resolve) => {
    handle.events$.subscribe({
      next: (event) => void show(event, async (e) => void handle.respond(await askPermission(e.toolName, e.args, e.requestId))),
      complete: resolve,
    });
  });
  await close();
  tracing?.print((text) => line(style.dim(text)));
}

async function askPermission(toolName: string, args: unknown, requestId: string) {
  const prompt = style.yellow(`? Allow ${toolName}(${JSON.stringify(args)})? [y/N] `);
  if (!process.stdin.isTTY) {
    line(prompt);
    line(style.yellow('stdin is not interactive: denying (the safe default).'));
    return { type: 'permission-response' as const, requestId, approved: false, reason: 'no interactive terminal to ask' };
  }
  endLine();
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  const answer = (await rl.question(prompt)).trim().toLowerCase();
  rl.close();
  const approved = answer === 'y' || answer === 'yes';
  return { type: 'permission-response' as const, requestId, approved, reason: approved ? undefined : 'declined at the terminal' };
}

main().catch((error: unknown) => {
  console.error(error instanceof DemoError ? style.red(error.message) : error);
  process.exitCode = 1;
});
