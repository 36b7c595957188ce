import { execFile } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');

describe('npm start (the demo)', () => {
  it('streams the embedded model’s answer, the tool calls and results, and denies approval without a terminal', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
    delete env.OPENAI_API_KEY;
    const output = await new Promise<string>((resolve, reject) => {
      const child = execFile(process.execPath, [join(root, 'node_modules/tsx/dist/cli.mjs'), 'examples/demo.ts'], { cwd: root, env, timeout: 30000 }, (error, stdout, stderr) =>
        error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout),
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
