import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import Redis from 'ioredis';

const root = join(__dirname, '..', '..');
const prefix = `rx-agent-demo-spec-${process.pid}-${Date.now()}:`;

/** A demo process: its output so far (colours removed), and its exit. */
interface Demo {
  readonly child: ChildProcess;
  output(): string;
  waitFor(text: string | RegExp, timeoutMs?: number): Promise<string>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const running = new Set<ChildProcess>();

/** Runs the demo as `npm start -- --redis …` does, in one process (node with tsx's loader), so a signal reaches it. */
function demo(args: readonly string[]): Demo {
  const env: NodeJS.ProcessEnv = { ...process.env, REDIS_PREFIX: prefix };
  delete env.OPENAI_API_KEY;
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/demo.ts', '--redis', ...args], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  let text = '';
  const listeners = new Set<() => void>();
  const append = (chunk: Buffer) => {
    // eslint-disable-next-line no-control-regex
    text += chunk.toString('utf8').replace(/\x1b\[[0-9;]*m/g, '');
    for (const listener of listeners) listener();
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      running.delete(child);
      resolve({ code, signal });
    }),
  );
  const waitFor = (pattern: string | RegExp, timeoutMs = 20_000) =>
    new Promise<string>((resolve, reject) => {
      const found = () => (typeof pattern === 'string' ? text.includes(pattern) : pattern.test(text));
      const check = () => {
        if (!found()) return;
        listeners.delete(check);
        clearTimeout(timer);
        resolve(text);
      };
      const timer = setTimeout(() => {
        listeners.delete(check);
        reject(new Error(`the demo did not print ${String(pattern)} within ${timeoutMs} ms; it printed:\n${text}`));
      }, timeoutMs);
      listeners.add(check);
      check();
    });
  return { child, output: () => text, waitFor, exited };
}

/** Runs the demo to its exit; rejects if it fails. */
async function completed(args: readonly string[]): Promise<string> {
  const run = demo(args);
  const { code, signal } = await run.exited;
  if (code !== 0) throw new Error(`the demo ${args.join(' ')} exited with ${code ?? signal}:\n${run.output()}`);
  return run.output();
}

/** Starts a run in terminal A, which suspends for the approval; answers its run id. */
async function suspendedRun(): Promise<string> {
  const output = await completed([]);
  const runId = /Run: (paris-[0-9a-f]{8})/.exec(output)?.[1];
  if (!runId) throw new Error(`no run id in:\n${output}`);
  expect(output).toContain('? book_table({"place":"Café de Flore","time":"16:00","people":2}) needs your approval');
  expect(output).toMatch(/\[run ended: suspended; 500 input \+ 74 output tokens\]/);
  expect(output).toContain(`npm start -- --redis --approve ${runId}`);
  expect(output).toContain(`npm start -- --redis --deny ${runId}`);
  expect(output).toContain(`npm start -- --redis --events ${runId}`);
  expect(output).not.toContain('← book_table');
  return runId;
}

const count = (text: string, part: string) => text.split(part).length - 1;

describe('npm start -- --redis (the durable demo, across processes)', () => {
  jest.setTimeout(90_000);
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');

  afterEach(() => {
    for (const child of running) child.kill('SIGKILL');
  });

  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  it('suspends in one process; approved in another, the run completes there, once', async () => {
    const runId = await suspendedRun();
    expect(await redis.exists(`${prefix}run:{${runId}}:journal`)).toBe(1);

    const approved = await completed(['--approve', runId]);
    expect(approved).toContain(`Approved ${runId}.1.call_book.permission-request.`);
    expect(approved).toContain('← book_table: {"confirmation":"BK-131600","place":"Café de Flore","time":"16:00","people":2}');
    expect(approved).toContain('your table for 2 at Café de Flore is booked for 16:00.');
    expect(count(approved, '[run ended: completed; 920 input + 112 output tokens]')).toBe(1);
    // The first part of the run is not run again.
    expect(approved).not.toContain('→ get_weather');

    // Replayed from a third process: the whole run, the booking once, one end after the suspension.
    const replay = await completed(['--events', runId]);
    expect(count(replay, '→ get_weather({"city":"Paris"})')).toBe(1);
    expect(count(replay, '← book_table: {"confirmation"')).toBe(1);
    expect(count(replay, '[run ended: suspended')).toBe(1);
    expect(count(replay, '[run ended: completed')).toBe(1);

    // It is over: a second answer is refused with the reason.
    const again = demo(['--approve', runId]);
    expect((await again.exited).code).toBe(1);
    expect(again.output()).toContain(`Run '${runId}' waits for no approval: it is finished (completed).`);
  });

  it('denied from another terminal, the run ends without booking', async () => {
    const runId = await suspendedRun();
    const denied = await completed(['--deny', runId]);
    expect(denied).toContain("← book_table: Permission denied for 'book_table': declined from another terminal");
    expect(denied).toContain('I did not book a table, as the booking was not approved.');
    expect(denied).toMatch(/\[run ended: completed; \d+ input \+ \d+ output tokens\]/);
  });

  it('killed (SIGKILL) while the booking runs, the run is finished by --resume in another process', async () => {
    const runId = await suspendedRun();
    const b = demo(['--approve', runId]);
    await b.waitFor(`… booking (4 s). Stop this process now and continue the run with: npm start -- --redis --resume ${runId}`);
    b.child.kill('SIGKILL');
    expect((await b.exited).signal).toBe('SIGKILL');
    expect(b.output()).not.toContain('← book_table');

    // The dead process's lease is waited out; the booking, caught mid-flight, is not run again.
    const resumed = await completed(['--resume', runId]);
    expect(resumed).toContain(`Another process holds run ${runId}`);
    expect(resumed).not.toContain('… booking');
    expect(resumed).toContain("← book_table: Tool 'book_table' was interrupted; its outcome is unknown.");
    expect(resumed).toContain('the booking was interrupted and I cannot tell whether it went through');
    expect(count(resumed, '[run ended: completed')).toBe(1);

    const done = demo(['--resume', runId]);
    expect((await done.exited).code).toBe(1);
    expect(done.output()).toContain(`Run '${runId}' has already ended (completed).`);
  });

  it('stopped with Ctrl-C (SIGINT) while the booking runs, it says how to resume, and --resume finishes it at once', async () => {
    const runId = await suspendedRun();
    const b = demo(['--approve', runId]);
    await b.waitFor('… booking');
    b.child.kill('SIGINT');
    expect((await b.exited).code).toBe(0);
    expect(b.output()).toContain(`Stopped. The run is saved; continue it from any terminal with: npm start -- --redis --resume ${runId}`);

    const resumed = await completed(['--resume', runId]);
    expect(resumed).not.toContain('Another process holds');
    expect(resumed).toContain("← book_table: Tool 'book_table' was interrupted; its outcome is unknown.");
    expect(count(resumed, '[run ended: completed')).toBe(1);
  });

  it('--events follows a suspended run live until another process finishes it', async () => {
    const runId = await suspendedRun();
    const follower = demo(['--events', runId]);
    await follower.waitFor('[following: waiting for the run to be answered and resumed]');
    await completed(['--approve', runId]);
    const { code } = await follower.exited;
    expect(code).toBe(0);
    expect(follower.output()).toContain('your table for 2 at Café de Flore is booked for 16:00.');
    expect(count(follower.output(), '[run ended: completed')).toBe(1);
  });

  it('explains bad use: an unknown run, a flag without its run id', async () => {
    const unknown = demo(['--resume', 'paris-00000000']);
    expect((await unknown.exited).code).toBe(1);
    expect(unknown.output()).toContain(`No run 'paris-00000000' in Redis at ${process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'} under '${prefix}'.`);
    const missing = demo(['--approve']);
    expect((await missing.exited).code).toBe(1);
    expect(missing.output()).toContain('--approve needs a run id, e.g. npm start -- --redis --approve paris-1a2b3c4d');
  });
});
