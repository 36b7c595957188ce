import { execFile } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');

/** The demo's output, colours removed. */
async function demo(args: readonly string[]): Promise<string> {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  delete env.OPENAI_API_KEY;
  const output = await new Promise<string>((resolve, reject) => {
    const child = execFile(
      process.execPath,
      [join(root, 'node_modules/tsx/dist/cli.mjs'), 'examples/demo.ts', ...args],
      { cwd: root, env, timeout: 30000 },
      (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)),
    );
    child.stdin?.end();
  });
  // eslint-disable-next-line no-control-regex
  return output.replace(/\x1b\[[0-9;]*m/g, '');
}

describe('npm start (the demo)', () => {
  it('prints no trace unless asked', async () => {
    expect(await demo([])).not.toContain('invoke_agent');
  });

  it('with --json, the final answer is a JSON plan, streamed as output-delta and printed as zod parsed it', async () => {
    const plain = await demo(['--json']);
    const at = plain.indexOf('Structured output (checked by zod; ');
    expect(at).toBeGreaterThan(0);
    expect(plain.slice(at)).toMatch(/^Structured output \(checked by zod; \d+ partial objects streamed as output-delta\):\n/);
    const json = plain.slice(plain.indexOf('\n', at) + 1, plain.indexOf('\n}\n', at) + 2);
    expect(JSON.parse(json)).toEqual({
      weather: { city: 'Paris', condition: 'sunny', celsius: 21 },
      place: 'Café de Flore',
      booking: { status: 'not-approved', time: null, people: null },
      summary: 'Sunny and 21°C: Café de Flore looks good, but the booking was not approved.',
    });
    expect(plain).toMatch(/\[run ended: completed; \d+ input \+ \d+ output tokens\]/);
    expect(await demo([])).not.toContain('Structured output');
  });

  it('with --trace, prints the run as a tree of spans at the end', async () => {
    const plain = await demo(['--trace']);
    const tree = plain.slice(plain.indexOf('\nTrace ') + 1).split('\n');
    expect(tree[0]).toMatch(/^Trace [0-9a-f]{32}$/);
    expect(tree[1]).toMatch(/^invoke_agent concierge {2}\[\d+ ms; 920 in \+ 112 out tokens; completed\]$/);
    const spans = tree.filter((l) => /^[├└]─ /.test(l)).map((l) => l.slice(3).split('  [')[0]);
    expect(spans).toEqual([
      'chat embedded-scripted-model',
      'execute_tool get_weather',
      'execute_tool search_places',
      'chat embedded-scripted-model',
      'execute_tool book_table',
      'chat embedded-scripted-model',
    ]);
    expect(plain).toMatch(/│ {5}· permission-request \(callId=call_book, toolName=book_table, requestId=/);
    expect(plain).toContain('approved=false');
    // The question is not the flag.
    expect(plain).toContain('You: Plan my afternoon in Paris');
  });

  it('streams the embedded model’s answer, the tool calls and results, and denies approval without a terminal', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
    delete env.OPENAI_API_KEY;
    const output = await new Promise<string>((resolve, reject) => {
      const child = execFile(
        process.execPath,
        [join(root, 'node_modules/tsx/dist/cli.mjs'), 'examples/demo.ts'],
        { cwd: root, env, timeout: 30000 },
        (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)),
      );
      child.stdin?.end();
    });
    // eslint-disable-next-line no-control-regex
    const plain = output.replace(/\x1b\[[0-9;]*m/g, '');
    expect(plain).toContain('Model: the embedded scripted model, served over HTTP+SSE at http://127.0.0.1:');
    expect(plain).toContain('→ get_weather({"city":"Paris"})');
    expect(plain).toContain('← search_places: {"city":"Paris","kind":"cafe","results":["Café de Flore","Les Deux Magots"]}');
    expect(plain).toContain('? Allow book_table({"place":"Café de Flore","time":"16:00","people":2})? [y/N]');
    expect(plain).toContain('stdin is not interactive: denying (the safe default).');
    expect(plain).toContain("← book_table: Permission denied for 'book_table': no interactive terminal to ask");
    expect(plain).toContain('I did not book a table, as the booking was not approved.');
    expect(plain).toMatch(/\[run ended: completed; \d+ input \+ \d+ output tokens\]/);
  });
});
