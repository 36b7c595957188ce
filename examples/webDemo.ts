/**
 * The web demo: a chat page (plain HTML and an ES module, no framework) talking to the demo's
 * agent through `runsHandler`, served by node:http. Run with `npm run demo:web` and open the URL
 * it prints.
 *
 * The agent is durable (a memory store): the page starts a run with `POST /runs`, follows its
 * events with `runsClient` (text and tool calls as they stream), answers the booking's approval
 * with `POST /runs/:id/responses` and stops a run with `POST /runs/:id/cancel`. The run id is kept
 * in the tab's sessionStorage, so a reload mid-answer follows the same run and sees it finish.
 *
 * Without OPENAI_API_KEY the model is the embedded scripted one, paced (`--delay <ms>` per chunk,
 * default 90) so that there is time to reload while an answer streams.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { build } from 'esbuild';
import { memoryStore } from '../src/index';
import { runsHandler, toNodeHandler } from '../src/http/index';
import { openAIChat } from '../src/openai/index';
import { demoAgent } from './concierge';
import { startEmbeddedModel } from './embeddedModel';

const file = (path: string) => fileURLToPath(new URL(path, import.meta.url));

/** Starts the demo: the model (embedded unless OPENAI_API_KEY is set), the agent and the web server. */
async function startWebDemo(options: { port: number; delayMs: number | undefined }): Promise<{ url: string; close(): Promise<void> }> {
  const embedded = process.env.OPENAI_API_KEY ? undefined : await startEmbeddedModel({ delayMs: options.delayMs ?? 90 });
  const client = embedded
    ? new OpenAI({ apiKey: 'not-needed', baseURL: embedded.url })
    : new OpenAI({ apiKey: process.env.OPENAI_API_KEY, baseURL: process.env.OPENAI_BASE_URL });
  const model = openAIChat({ client, model: process.env.OPENAI_MODEL ?? (embedded ? 'embedded-scripted-model' : 'gpt-4o-mini') });
  // Finished runs are kept 10 minutes, so that a reload replays the whole conversation.
  const agent = demoAgent(model, { store: memoryStore({ retainMs: 10 * 60_000 }), permissionTimeoutMs: 10 * 60_000 });
  const runs = toNodeHandler(runsHandler(agent, { basePath: '/api/runs' }));

  const page = readFileSync(file('./web/index.html'), 'utf8');
  // The page's module, with rx-agent/http and rxjs in it (what a bundler, or a CDN and an import map, would give it).
  const script = (
    await build({
      entryPoints: [file('./web/chat.ts')],
      bundle: true,
      format: 'esm',
      platform: 'browser',
      target: 'es2022',
      write: false,
      logLevel: 'silent',
      alias: { 'rx-agent/http': file('../src/http/index.ts') },
    })
  ).outputFiles[0].text;

  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path.startsWith('/api/runs')) return runs(req, res);
    if (req.method === 'GET' && path === '/') return void res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page);
    if (req.method === 'GET' && path === '/chat.js') return void res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' }).end(script);
    res.writeHead(404, { 'content-type': 'text/plain' }).end('Not found');
  });
  await new Promise<void>((resolve) => server.listen(options.port, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await embedded?.close();
    },
  };
}

/** `--port <n>` (default 3000) and `--delay <ms>`. */
function parseArgs(argv: readonly string[]): { port: number; delayMs: number | undefined } {
  const value = (flag: string) => {
    const at = argv.indexOf(flag);
    if (at < 0) return undefined;
    const n = Number(argv[at + 1]);
    if (!Number.isInteger(n) || n < 0) throw new Error(`${flag} needs a whole number, got ${argv[at + 1] ?? 'nothing'}`);
    return n;
  };
  return { port: value('--port') ?? 3000, delayMs: value('--delay') };
}

startWebDemo(parseArgs(process.argv.slice(2))).then(
  (demo) => {
    console.log(
      `The web demo is at ${demo.url} (${process.env.OPENAI_API_KEY ? 'OPENAI_API_KEY set: a real model' : 'the embedded scripted model'}). Ctrl-C stops it.`,
    );
    const stop = () => void demo.close().then(() => process.exit(0));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  },
  (error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exitCode = 1;
  },
);
