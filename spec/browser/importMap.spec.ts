import { existsSync, readFileSync } from 'node:fs';
import { join, normalize } from 'node:path';
import { build } from 'esbuild';
import { chromium, type Browser } from 'playwright-core';
import { memoryStore } from '../../src/index';
import { runsHandler } from '../../src/http/runsHandler';
import { toNodeHandler } from '../../src/http/toNodeHandler';
import { bookingAgent, listen } from '../support/runsServer';

// The built ESM files loaded as they are, with no bundler: an import map names rxjs and zod, each
// one ES module file as a CDN serves it (esm.sh, jsDelivr's /+esm), and rx-agent's entries.
const root = join(__dirname, '..', '..');
const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const haveChromium = existsSync(chromiumPath);
const describeInBrowser = haveChromium || process.env.CI ? describe : describe.skip;

/** rxjs and zod as one ES module file each, the way a CDN serves a package to a browser. */
async function cdnFiles(): Promise<Map<string, string>> {
  const result = await build({
    entryPoints: { rxjs: 'rxjs', zod: 'zod' },
    outdir: '/vendor',
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    write: false,
    logLevel: 'silent',
    nodePaths: [join(root, 'node_modules')],
  });
  return new Map(result.outputFiles.map((file) => [`/vendor/${file.path.split('/').pop()!}`, file.text]));
}

const importMap = {
  imports: {
    rxjs: '/vendor/rxjs.js',
    zod: '/vendor/zod.js',
    'rx-agent': '/dist/esm/index.js',
    'rx-agent/http': '/dist/esm/http.js',
    'rx-agent/testing': '/dist/esm/testing.js',
  },
};

const page = `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">${JSON.stringify(importMap)}</script>
<script type="module">
  import { createAgent, defineTool, memoryStore } from 'rx-agent';
  import { runsClient } from 'rx-agent/http';
  import { scriptedModel } from 'rx-agent/testing';
  import { lastValueFrom, toArray } from 'rxjs';
  import { z } from 'zod';

  window.inPage = async () => {
    const add = defineTool({ name: 'add', description: 'Adds', parameters: z.object({ a: z.number(), b: z.number() }), execute: ({ a, b }) => a + b });
    const model = scriptedModel([{ toolCalls: [{ name: 'add', args: { a: 2, b: 3 } }] }, (request) => 'It is ' + request.messages.at(-1).content[0].result + '.']);
    const agent = createAgent({ model, tools: [add], store: memoryStore() });
    const events = await lastValueFrom(agent.run('2 + 3?').pipe(toArray()));
    return { types: events.map((e) => e.type + (e.seq ? '#' + e.seq : '')), text: events.at(-1).text };
  };

  window.overHttp = async () => {
    const runs = runsClient('/runs');
    const runId = await runs.start({ input: 'from the page' });
    const events = await lastValueFrom(runs.events(runId).pipe(toArray()));
    return events.map((e) => (e.type === 'text-delta' ? e.text : e.type));
  };
  window.ready = true;
</script>`;

describeInBrowser('the built ESM entries in a browser through an import map, with no bundler (Chromium)', () => {
  let browser: Browser;
  let server: Awaited<ReturnType<typeof listen>>;

  beforeAll(async () => {
    if (!haveChromium) throw new Error(`The browser specs need Chromium at ${chromiumPath} (apt-get install chromium, or set CHROMIUM_PATH)`);
    for (const file of ['dist/esm/index.js', 'dist/esm/http.js']) {
      if (!existsSync(join(root, file))) throw new Error(`${file} is missing: run \`npm run build\` (npm test does it first)`);
    }
    const vendor = await cdnFiles();
    const runs = toNodeHandler(runsHandler(bookingAgent(memoryStore())));
    server = await listen((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (path.startsWith('/runs')) return runs(req, res);
      if (path === '/') return void res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page);
      if (vendor.has(path)) return void res.writeHead(200, { 'content-type': 'text/javascript' }).end(vendor.get(path));
      const file = normalize(join(root, path));
      if (path.startsWith('/dist/esm/') && file.startsWith(join(root, 'dist', 'esm')) && existsSync(file) && file.endsWith('.js')) {
        return void res.writeHead(200, { 'content-type': 'text/javascript' }).end(readFileSync(file));
      }
      res.writeHead(404).end();
    });
    browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  }, 60000);

  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  it('loads rx-agent and rx-agent/http as they are built, runs an agent, and follows a run over HTTP', async () => {
    const tab = await browser.newPage();
    const errors: string[] = [];
    const requested: string[] = [];
    tab.on('pageerror', (error) => errors.push(String(error)));
    tab.on('console', (message) => message.type() === 'error' && errors.push(message.text()));
    tab.on('request', (request) => requested.push(new URL(request.url()).pathname));
    await tab.goto(server.url);
    await tab.waitForFunction(() => (window as unknown as { ready?: boolean }).ready === true);
    const inPage = await tab.evaluate(() => (window as unknown as { inPage(): Promise<{ types: string[]; text: string }> }).inPage());
    expect(inPage.types).toEqual([
      'run-start#1',
      'iteration-start#2',
      'tool-input-start#3',
      'tool-input-delta#4',
      'tool-input-delta#5',
      'tool-call#6',
      'tool-result#7',
      'iteration-end#8',
      'iteration-start#9',
      'text-delta#10',
      'iteration-end#11',
      'run-end#12',
    ]);
    expect(inPage.text).toBe('It is 5.');
    const overHttp = await tab.evaluate(() => (window as unknown as { overHttp(): Promise<string[]> }).overHttp());
    expect(overHttp).toEqual(['run-start', 'iteration-start', 'You ', 'said: ', 'from the page', '.', 'iteration-end', 'run-end']);
    // Only files: the built entries and their chunks, and the two CDN-style packages.
    expect(requested.filter((path) => path.endsWith('.js') && !path.startsWith('/dist/esm/') && !path.startsWith('/vendor/'))).toEqual([]);
    expect(requested).toContain('/dist/esm/http.js');
    expect(errors).toEqual([]);
    await tab.close();
  });
});
