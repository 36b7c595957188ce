import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

// Runs a tiny agent through the BUILT package, loaded by its own name (the exports map),
// once with `import` and once with `require`. `npm test` builds first (pretest).
const root = join(__dirname, '..', '..');

const program = (load: string) => `
${load}
const echo = defineTool({ name: 'echo', description: 'echo', parameters: z.object({ text: z.string() }), execute: ({ text }) => text.toUpperCase() });
const agent = createAgent({
  model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'hi' } }] }, 'Done: HI']),
  tools: [echo],
  middleware: [circuitBreaker()],
});
agent.invoke('go').then((result) => console.log(JSON.stringify({ text: result.text, reason: result.reason, roles: result.messages.map((m) => m.role), modelError: new ModelError('x', { status: 429 }).retryable })));
`;

const expected = { text: 'Done: HI', reason: 'completed', roles: ['user', 'assistant', 'tool', 'assistant'], modelError: true };

function run(args: string[]): unknown {
  const out = execFileSync(process.execPath, args, { cwd: root, encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1) as string);
}

describe('the built package', () => {
  beforeAll(() => {
    for (const file of ['dist/esm/index.js', 'dist/cjs/index.cjs', 'dist/types/index.d.ts', 'dist/types/operators.d.ts', 'dist/types/testing.d.ts']) {
      if (!existsSync(join(root, file))) throw new Error(`${file} is missing: run \`npm run build\` (npm test does it first)`);
    }
  });

  it('has types a consumer compiles against (entry points, operators, testing, event augmentation)', () => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    expect(() => execFileSync(process.execPath, [tsc, '-p', join(__dirname, 'consumer')], { cwd: root, encoding: 'utf8' })).not.toThrow();
  });

  it('loads with import (ESM)', () => {
    const source = program(`
import { createAgent, defineTool, ModelError } from 'rx-agent';
import { circuitBreaker } from 'rx-agent/operators';
import { scriptedModel } from 'rx-agent/testing';
import { z } from 'zod';`);
    expect(run(['--input-type=module', '-e', source])).toEqual(expected);
  });

  it('loads with require (CJS)', () => {
    const source = program(`
const { createAgent, defineTool, ModelError } = require('rx-agent');
const { circuitBreaker } = require('rx-agent/operators');
const { scriptedModel } = require('rx-agent/testing');
const { z } = require('zod');`);
    expect(run(['-e', source])).toEqual(expected);
  });
});
