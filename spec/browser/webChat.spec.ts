import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';

// `npm run demo:web` (examples/webDemo.ts) in its own process, driven in a real Chromium: the chat
// page, runsHandler, runsClient and the embedded scripted model, paced so a reload lands mid-answer.
const root = join(__dirname, '..', '..');
const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const haveChromium = existsSync(chromiumPath);
const describeInBrowser = haveChromium || process.env.CI ? describe : describe.skip;

const booked = 'Done! It is sunny and 21°C in Paris, and your table for 2 at Café de Flore is booked for 16:00.';
const notBooked =
  'It is sunny and 21°C in Paris. Café de Flore looks good for this afternoon, but I did not book a table, as the booking was not approved. Tell me if you change your mind!';

/** Starts the demo as `npm run demo:web -- --port 0 --delay <ms>` does; resolves with its URL. */
function startDemo(delayMs: number): Promise<{ child: ChildProcess; url: string }> {
  const env = { ...process.env };
  delete env.OPENAI_API_KEY; // the embedded model, whatever the environment says
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/webDemo.ts', '--port', '0', '--delay', String(delayMs)], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the web demo did not start in 60 s:\n${out}`)), 60_000);
    const read = (chunk: Buffer) => {
      out += chunk.toString();
      const url = /The web demo is at (http:\/\/\S+\/)/.exec(out)?.[1];
      if (url) {
        clearTimeout(timer);
        resolve({ child, url });
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.once('exit', (code) => (clearTimeout(timer), reject(new Error(`the web demo exited (${code}):\n${out}`))));
  });
}

describeInBrowser('npm run demo:web in a real browser (Chromium)', () => {
  let browser: Browser;
  let demo: { child: ChildProcess; url: string };

  beforeAll(async () => {
    if (!haveChromium) throw new Error(`The browser specs need Chromium at ${chromiumPath} (apt-get install chromium, or set CHROMIUM_PATH)`);
    demo = await startDemo(100);
    browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    if (demo) {
      const exited = new Promise((resolve) => demo.child.once('exit', resolve));
      demo.child.kill('SIGTERM');
      await exited;
    }
  });

  /** A fresh tab in a fresh context (its own sessionStorage), whose page errors fail the spec. */
  async function open(): Promise<{ page: Page; errors: string[] }> {
    const context = await browser.newContext({ viewport: { width: 820, height: 560 } });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    page.on('console', (message) => message.type() === 'error' && errors.push(message.text()));
    await page.goto(demo.url);
    return { page, errors };
  }

  async function say(page: Page, text: string): Promise<void> {
    await page.fill('#message', text);
    await page.click('#send');
  }

  const idle = (page: Page) => page.waitForSelector('body[data-state="idle"]', { timeout: 30_000 });
  const answers = (page: Page) => page.$$eval('.turn:last-child .agent', (nodes) => nodes.map((node) => node.textContent));
  const tools = (page: Page) => page.$$eval('.turn:last-child .tool', (nodes) => nodes.map((node) => node.textContent));

  it('streams text and tool calls as they come; Approve books the table; Deny on the next message does not', async () => {
    const { page, errors } = await open();
    await say(page, 'Find me a café in Paris and book a table for two');
    // A call's arguments on screen while they stream: JSON not finished yet.
    await page.waitForFunction(() => Array.from(document.querySelectorAll('.tool .args')).some((node) => /^\{.*[^}]$/.test(node.textContent ?? '')));
    await page.waitForSelector('.approve');
    mkdirSync(join(root, 'docs', 'images'), { recursive: true });
    await page.screenshot({ path: join(root, 'docs', 'images', 'web-chat.png'), fullPage: true });
    await page.click('.approve');
    await idle(page);
    expect(await answers(page)).toEqual(['Let me check the weather and look for a café.', 'Café de Flore it is. I will book a table.', booked]);
    expect(await tools(page)).toEqual([
      'get_weather({"city":"Paris"})→ {"city":"Paris","condition":"sunny","celsius":21}',
      'search_places({"city":"Paris","kind":"cafe"})→ {"city":"Paris","kind":"cafe","results":["Café de Flore","Les Deux Magots"]}',
      expect.stringMatching(/^book_table\(\{"place":"Café de Flore","time":"16:00","people":2\}\)→ \{"confirmation":"BK-\d+","place":"Café de Flore"/),
    ]);

    await say(page, 'And tomorrow?');
    await page.click('.turn:last-child .deny');
    await idle(page);
    expect((await answers(page)).at(-1)).toBe(notBooked);
    expect((await tools(page)).at(-1)).toBe('book_table({"place":"Café de Flore","time":"16:00","people":2})→ denied: declined on the web page');
    expect(errors).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('a reload mid-answer follows the same run and sees the answer finish, every word once', async () => {
    const { page, errors } = await open();
    await say(page, 'Book me a table');
    await page.click('.approve');
    // The last answer has begun streaming: reload now.
    await page.waitForFunction(() => document.querySelectorAll('.agent')[2]?.textContent?.startsWith('Done! It is'));
    const before = (await answers(page)).at(-1)!;
    expect(before.length).toBeLessThan(booked.length);
    await page.reload();
    // Back on the page while the answer still streams, then to its end.
    await page.waitForFunction(() => document.querySelectorAll('.agent')[2]?.textContent?.startsWith('Done!'));
    expect(await page.getAttribute('body', 'data-state')).toBe('streaming');
    await idle(page);
    expect(await answers(page)).toEqual(['Let me check the weather and look for a café.', 'Café de Flore it is. I will book a table.', booked]);
    expect(await tools(page)).toHaveLength(3);
    expect(await page.$$eval('.user', (nodes) => nodes.map((node) => node.textContent))).toEqual(['Book me a table']);
    expect(errors).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('Stop cancels the run waiting for an approval', async () => {
    const { page, errors } = await open();
    await say(page, 'Book it');
    await page.waitForSelector('.approve');
    await page.click('#stop');
    await idle(page);
    expect(await page.$$eval('.turn:last-child .status', (nodes) => nodes.map((node) => node.textContent))).toEqual(['stopped']);
    expect(await page.$$('.approve')).toHaveLength(0);
    expect(errors).toEqual([]);
    await page.context().close();
  }, 60_000);
});
