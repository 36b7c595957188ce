import { existsSync, readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename, join } from 'node:path';
import { Readable, pipeline } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { build } from 'esbuild';
import { chromium, type Browser, type Page } from 'playwright-core';
import { finalize, type Observable } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentResponse, type RunHandle } from '../../src/index';
import { permissions } from '../../operators/index';
import { sseHeaders, toSSEStream } from '../../src/http/sse';
import { scriptedModel, startFakeOpenAIServer, type FakeOpenAIServer } from '../../src/testing/index';
import { weatherAgent, weatherLabels } from '../support/weatherAgent';

const { entries } = JSON.parse(readFileSync(join(__dirname, '..', '..', 'scripts', 'entries.json'), 'utf8')) as { entries: Record<string, unknown> };

// The built package (`npm test` builds first) in a real Chromium: Debian's, driven by playwright-core.
// Without Chromium these specs are skipped, except under CI (whose script installs it): there they fail.
const root = join(__dirname, '..', '..');
const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const haveChromium = existsSync(chromiumPath);
const describeInBrowser = haveChromium || process.env.CI ? describe : describe.skip;

const chatBody =
  '<input id="message"><button id="send">Send</button><button id="stop">Stop</button>' + '<p id="status">idle</p><p id="output"></p><ul id="events"></ul>';

/** The pages the server serves: path → the script of spec/browser/pages it loads and its body. */
const PAGES: Record<string, { script: string; body: string }> = {
  '/': { script: 'chat', body: chatBody },
  '/approve': { script: 'approve', body: `${chatBody}<div id="question"></div><p id="answers"></p>` },
  '/agent': { script: 'agent', body: '' },
  '/marbles': { script: 'marbles', body: '' },
};

/** Every page's script bundled for the browser in one build, `rx-agent` being the built ESM package. */
async function bundlePages(): Promise<Map<string, string>> {
  for (const file of ['dist/esm/index.js', 'dist/esm/operators.js', 'dist/esm/testing.js']) {
    if (!existsSync(join(root, file))) throw new Error(`${file} is missing: run \`npm run build\` (npm test does it first)`);
  }
  const scripts = Object.values(PAGES).map((page) => page.script);
  const result = await build({
    entryPoints: Object.fromEntries(scripts.map((script) => [script, join(__dirname, 'pages', `${script}.ts`)])),
    outdir: '/pages',
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    write: false,
    logLevel: 'silent',
    // Every entry of scripts/entries.json (a subpath without its own alias would resolve under index.js).
    alias: Object.fromEntries(
      Object.keys(entries).map((name) => [name === '.' ? 'rx-agent' : `rx-agent/${name}`, join(root, 'dist', 'esm', `${name === '.' ? 'index' : name}.js`)]),
    ),
  });
  return new Map(result.outputFiles.map((file) => [`/${basename(file.path)}`, file.text]));
}

const html = ({ script, body }: { script: string; body: string }) =>
  `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><title>rx-agent</title>${body}<script type="module" src="/${script}.js"></script>`;

/** Reads a request's JSON body, then calls `then` with it. */
function readJson<T>(req: IncomingMessage, then: (body: T) => void): void {
  let text = '';
  req.setEncoding('utf8');
  req.on('data', (part: string) => (text += part));
  req.on('end', () => then(JSON.parse(text) as T));
}

/** A resolvable promise. */
function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** Rejects when `promise` takes longer than `ms`, naming what was awaited. */
function within<T>(promise: Promise<T>, what: string, ms = 5000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms))),
  ]);
}

describeInBrowser('in a real browser (Chromium)', () => {
  let browser: Browser;
  let server: Server;
  let origin: string;
  let scripts: Map<string, string>;
  let api: (message: string, req: IncomingMessage, res: ServerResponse) => void;
  let respondApi: (body: { runId: string; response: AgentResponse }, res: ServerResponse) => void = (_body, res) => res.writeHead(404).end();

  beforeAll(async () => {
    if (!haveChromium) throw new Error(`The browser specs need Chromium at ${chromiumPath} (apt-get install chromium, or set CHROMIUM_PATH)`);
    scripts = await bundlePages();
    server = createServer((req, res) => {
      const path = req.url ?? '/';
      if (req.method === 'GET' && scripts.has(path)) {
        res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' }).end(scripts.get(path));
      } else if (req.method === 'GET' && PAGES[path]) {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html(PAGES[path]));
      } else if (req.method === 'POST' && path === '/api/chat') {
        readJson<{ message: string }>(req, ({ message }) => api(message, req, res));
      } else if (req.method === 'POST' && path === '/api/respond') {
        readJson<{ runId: string; response: AgentResponse }>(req, (body) => respondApi(body, res));
      } else {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  }, 60000);

  afterAll(async () => {
    await browser?.close();
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  /** A new page whose uncaught errors fail the spec. */
  async function open(path: string): Promise<{ page: Page; errors: string[] }> {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    page.on('console', (message) => {
      if (message.type() === 'error') errors.push(message.text());
    });
    await page.goto(`${origin}${path}`);
    return { page, errors };
  }

  /** Serves a run's events the way docs/guide/streaming-to-a-ui.md's Node server does. */
  function serve(res: ServerResponse, events$: Observable<AgentEvent>): void {
    res.writeHead(200, sseHeaders);
    pipeline(Readable.fromWeb(toSSEStream(events$) as unknown as NodeReadableStream<Uint8Array>), res, () => {});
  }

  describe('a streaming page reading a run over SSE (decodeSSE, ofType)', () => {
    it('shows the text as it streams and every event of the run, in order', async () => {
      api = (message, _req, res) => serve(res, weatherAgent(`in Zürich 🌞 (you asked: ${message})`).run(message));
      const { page, errors } = await open('/');
      await page.fill('#message', 'Weather?');
      await page.click('#send');
      await page.waitForFunction(() => document.getElementById('status')!.textContent !== 'streaming');
      expect(await page.textContent('#status')).toBe('done');
      expect(await page.textContent('#output')).toBe('It is 21°C in Zürich 🌞 (you asked: Weather?)');
      expect(await page.$$eval('#events li', (items) => items.map((item) => item.textContent))).toEqual(weatherLabels('in Zürich 🌞 (you asked: Weather?)'));
      expect(errors).toEqual([]);
      await page.close();
    });

    it('Stop while a tool works aborts the request, which unsubscribes the run on the server and aborts the tool', async () => {
      const aborted = deferred();
      const released = deferred();
      const waiting = defineTool({
        name: 'wait_forever',
        description: 'Never answers',
        parameters: z.object({}),
        execute: (_args, ctx) => new Promise((resolve) => ctx.signal.addEventListener('abort', () => (aborted.resolve(), resolve('aborted')))),
      });
      api = (message, _req, res) =>
        serve(
          res,
          createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'wait_forever', args: {} }] }, 'never']), tools: [waiting] })
            .run(message)
            .pipe(finalize(() => released.resolve())),
        );
      const { page, errors } = await open('/');
      await page.fill('#message', 'Wait');
      await page.click('#send');
      await page.waitForSelector('#events li:text-is("tool-call:wait_forever")');
      await page.click('#stop');
      await within(released.promise, 'the run to be unsubscribed on the server');
      await within(aborted.promise, "the tool's signal to abort");
      expect(await page.textContent('#status')).toBe('stopped');
      expect(await page.$$eval('#events li', (items) => items.map((item) => item.textContent))).toEqual([
        'run-start',
        'iteration-start',
        'tool-input-start',
        'tool-input-delta',
        'tool-input-delta',
        'tool-call:wait_forever',
      ]);
      expect(errors).toEqual([]);
      await page.close();
    });

    it('Stop before the response came aborts the request too (the documented pattern: defer, AbortController, finalize)', async () => {
      const received = deferred();
      const closed = deferred();
      api = (_message, req, res) => {
        res.on('close', () => closed.resolve()); // never answered: only the client can end it
        received.resolve();
        void req;
      };
      const { page, errors } = await open('/');
      await page.fill('#message', 'Slow');
      await page.click('#send');
      await within(received.promise, 'the request to reach the server');
      await page.click('#stop');
      await within(closed.promise, 'the server to see the request closed');
      expect(await page.textContent('#status')).toBe('stopped');
      expect(errors).toEqual([]);
      await page.close();
    });
  });

  describe('an agent running in the page (openAIChat with the real openai client, operators)', () => {
    let model: FakeOpenAIServer | undefined;

    afterEach(async () => {
      await model?.close();
      model = undefined;
    });

    it('retries, calls a tool, redacts and caches, with the model on another origin', async () => {
      model = await startFakeOpenAIServer([
        { status: 503 },
        { toolCalls: [{ id: 'call_1', name: 'lookup_host', args: { host: 'db.internal' } }] },
        { text: ['db.internal is at ', '10.1.2.3.'] },
      ]);
      const { page, errors } = await open('/agent');
      await page.waitForFunction(() => typeof window.runAgent === 'function');
      const [first, second] = await page.evaluate(([url]) => window.runAgent(url, ['Where is db.internal?', 'Where is db.internal?']), [model.url] as const);

      expect(first.labels).toEqual([
        'run-start',
        'iteration-start',
        'model-retry',
        'tool-input-start',
        'tool-input-delta',
        'tool-input-delta',
        'tool-input-delta',
        'tool-call:lookup_host',
        'pii-detected',
        'tool-result:lookup_host',
        'iteration-end',
        'iteration-start',
        'text-delta:db.internal is at ',
        expect.stringMatching(/^text-delta:<ip_hash:[0-9a-f]{8}>\.$/),
        'pii-detected',
        'iteration-end',
        'run-end:completed',
      ]);
      expect(first.piiTypes).toEqual(['ip', 'ip']);
      expect(first.text).toMatch(/^db\.internal is at <ip_hash:[0-9a-f]{8}>\.$/);
      expect(first.toolSawSignal).toBe(true);
      // The model read the tool's result with the address hashed, as in the answer.
      const toolMessage = model.requests[2].messages!.find((m) => m.role === 'tool')!;
      expect(String(toolMessage.content)).toContain(first.text.slice(-'<ip_hash:00000000>.'.length, -1));
      expect(String(toolMessage.content)).not.toContain('10.1.2.3');
      // The same question again: both calls come from the cache, the server sees no new request.
      expect(second.text).toBe(first.text);
      expect(second.labels).not.toContain('model-retry');
      expect(model.requests).toHaveLength(3);
      // Chromium logs the failed request modelRetry retried; nothing else went wrong.
      expect(errors).toEqual(['Failed to load resource: the server responded with a status of 503 (Service Unavailable)']);
      await page.close();
    });

    it('cancelling the run aborts the model request the browser made', async () => {
      model = await startFakeOpenAIServer([{ text: ['one ', 'two ', 'three ', 'four ', 'five'], delayMs: 100 }]);
      const closed = model.waitForClose();
      const { page, errors } = await open('/agent');
      await page.waitForFunction(() => typeof window.startAndCancel === 'function');
      const labels = await page.evaluate(([url]) => window.startAndCancel(url, 'Count'), [model.url] as const);
      expect(labels).toEqual(['run-start', 'iteration-start', 'text-delta:one ', 'run-end:cancelled']);
      await within(closed, 'the fake server to see the connection closed');
      expect(model.closedConnections()).toBe(1);
      expect(errors).toEqual([]);
      await page.close();
    });
  });

  describe('marble tests in the page (rx-agent/testing in a browser test runner)', () => {
    it("runs the README's first-token timeout in virtual time, and fails when the timing differs", async () => {
      const { page, errors } = await open('/marbles');
      await page.waitForFunction(() => typeof window.firstTokenTimeout === 'function');
      const passing = await page.evaluate(() => window.firstTokenTimeout(5));
      expect(passing.equal).toBe(true);
      expect(passing.actual).toEqual(passing.expected);
      // A first token allowed 20 ms: the text arrives at 10 ms, so the marble no longer matches.
      const failing = await page.evaluate(() => window.firstTokenTimeout(20));
      expect(failing.equal).toBe(false);
      expect(JSON.stringify(failing.actual)).toContain('text-delta:Hel');
      expect(errors).toEqual([]);
      await page.close();
    });

    it('startFakeOpenAIServer says it needs Node.js', async () => {
      const { page, errors } = await open('/marbles');
      await page.waitForFunction(() => typeof window.startServerHere === 'function');
      expect(await page.evaluate(() => window.startServerHere())).toBe(
        'Error: startFakeOpenAIServer starts an HTTP server: it runs on Node.js, not in a browser',
      );
      expect(errors).toEqual([]);
      await page.close();
    });
  });

  describe('approvals over HTTP (events over SSE, answers with a POST: the documented pattern)', () => {
    let booked: number;
    const bookTable = defineTool({
      name: 'book_table',
      description: 'Books a table',
      parameters: z.object({ people: z.number() }),
      needsApproval: true,
      execute: ({ people }) => (booked++, `Booked for ${people}.`),
    });

    beforeEach(() => {
      booked = 0;
      // The server of docs/guide/streaming-to-a-ui.md: each run started with its id kept, answers passed to its handle.
      const runs = new Map<string, RunHandle>();
      api = (message, _req, res) => {
        const runId = `run-${runs.size + 1}`;
        const agent = createAgent({
          model: scriptedModel([
            { toolCalls: [{ name: 'book_table', args: { people: 2 } }] },
            (request) => {
              const last = request.messages.at(-1)!.content[0];
              return last.type === 'tool-result' ? String(last.result) : 'no result';
            },
          ]),
          tools: [bookTable],
          middleware: [permissions()],
        });
        const handle = agent.start(message, { runId });
        runs.set(runId, handle);
        serve(res, handle.events$.pipe(finalize(() => (runs.delete(runId), handle.cancel()))));
      };
      respondApi = ({ runId, response }, res) => {
        const accepted = runs.get(runId)?.respond(response) ?? false;
        res.writeHead(accepted ? 200 : 409, { 'content-type': 'application/json' }).end(JSON.stringify({ accepted }));
      };
    });

    async function ask(answer: '#allow' | '#deny'): Promise<{ page: Page; errors: string[] }> {
      const opened = await open('/approve');
      await opened.page.fill('#message', 'A table for two');
      await opened.page.click('#send');
      await opened.page.click(answer); // waits for the question's buttons
      await opened.page.waitForFunction(() => document.getElementById('status')!.textContent !== 'streaming');
      await opened.page.waitForFunction(() => document.getElementById('answers')!.textContent !== '');
      return opened;
    }

    const events = (page: Page) => page.$$eval('#events li', (items) => items.map((item) => item.textContent));

    it('Allow answers the request: the tool runs and the run completes', async () => {
      const { page, errors } = await ask('#allow');
      expect(await page.textContent('#status')).toBe('done');
      expect(await events(page)).toEqual([
        'run-start',
        'iteration-start',
        'tool-input-start',
        'tool-input-delta',
        'tool-input-delta',
        'tool-call:book_table',
        'permission-request',
        'tool-result:book_table',
        'iteration-end',
        'iteration-start',
        'text-delta:Booked for 2.',
        'iteration-end',
        'run-end:completed',
      ]);
      expect(await page.textContent('#answers')).toBe('200 ');
      expect(booked).toBe(1);
      // The run is over: a late answer is refused.
      const late = await page.evaluate(() =>
        fetch('/api/respond', {
          method: 'POST',
          body: JSON.stringify({ runId: 'run-1', response: { type: 'permission-response', requestId: 'req-x', approved: true } }),
        }).then((r) => r.status),
      );
      expect(late).toBe(409);
      expect(errors).toEqual(['Failed to load resource: the server responded with a status of 409 (Conflict)']);
      await page.close();
    });

    it('Deny answers it too: the tool does not run and the model reads why', async () => {
      const { page, errors } = await ask('#deny');
      expect(await page.textContent('#output')).toBe("Permission denied for 'book_table': denied by user");
      expect(await page.textContent('#answers')).toBe('200 ');
      expect(booked).toBe(0);
      expect(errors).toEqual([]);
      await page.close();
    });
  });
});
