import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';

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

/** tsc's output for the project in `dir` ('' when it compiles). */
function compile(dir: string): string {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', dir], { cwd: root, encoding: 'utf8' });
    return '';
  } catch (error) {
    return String((error as { stdout?: string }).stdout ?? error);
  }
}

/**
 * Runs `use` in a project of its own that has the package installed as a user links it
 * (node_modules/rx-agent → the repository) and `files` written; removes it afterwards.
 */
async function inLinkedProject(prefix: string, files: Record<string, string>, use: (dir: string) => void | Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  try {
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(root, join(dir, 'node_modules', 'rx-agent'), 'dir');
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    await use(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function run(args: string[]): unknown {
  const out = execFileSync(process.execPath, args, { cwd: root, encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1) as string);
}

describe('the built package', () => {
  beforeAll(() => {
    for (const file of ['dist/esm/index.js', 'dist/cjs/index.cjs', 'dist/types/index.d.ts', 'dist/types/index.d.cts', 'dist/types/operators.d.ts', 'dist/types/testing.d.ts']) {
      if (!existsSync(join(root, file))) throw new Error(`${file} is missing: run \`npm run build\` (npm test does it first)`);
    }
  });

  it('has types a consumer compiles against (entry points, operators, testing, event and response augmentation)', () => {
    expect(compile(join(__dirname, 'consumer'))).toBe('');
  });

  it("has types a CommonJS consumer compiles against (node16: the require condition's .d.cts)", () => {
    expect(compile(join(__dirname, 'consumer-cjs'))).toBe('');
  });

  it('has types that compile where openai (an optional peer dependency) is not installed', () => {
    // A project of its own: the package copied in as npm installs it (package.json and dist), its
    // dependency fp-ts and the peers rxjs and zod linked, and no openai anywhere on the way up.
    const dir = mkdtempSync(join(tmpdir(), 'rx-agent-no-openai-'));
    try {
      const installed = join(dir, 'node_modules', 'rx-agent');
      mkdirSync(installed, { recursive: true });
      cpSync(join(root, 'package.json'), join(installed, 'package.json'));
      cpSync(join(root, 'dist'), join(installed, 'dist'), { recursive: true });
      for (const dep of ['rxjs', 'zod', 'fp-ts']) symlinkSync(join(root, 'node_modules', dep), join(dir, 'node_modules', dep), 'dir');
      writeFileSync(
        join(dir, 'consumer.ts'),
        "import { createAgent, openAIChat } from 'rx-agent';\nimport { scriptedModel } from 'rx-agent/testing';\nexport const agent = createAgent({ model: scriptedModel(['hi']) });\nexport type Adapter = typeof openAIChat;\n",
      );
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({ compilerOptions: { strict: true, module: 'Node16', moduleResolution: 'Node16', target: 'ES2022', noEmit: true, types: [], skipLibCheck: false }, files: ['consumer.ts'] }),
      );
      expect(compile(dir)).toBe('');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('has types a consumer on moduleResolution node10 finds, the subpaths through typesVersions', async () => {
    // node10 reads no exports map and does not resolve a package by its own name: install it as a user would (a link).
    const files = {
      'consumer.ts':
        "import { createAgent } from 'rx-agent';\nimport { modelRetry } from 'rx-agent/operators';\nimport { scriptedModel } from 'rx-agent/testing';\nexport const agent = createAgent({ model: scriptedModel(['hi']), middleware: [modelRetry()] });\n",
      'tsconfig.json': JSON.stringify({ compilerOptions: { strict: true, module: 'CommonJS', moduleResolution: 'Node10', target: 'ES2022', noEmit: true, types: [], esModuleInterop: true, skipLibCheck: true }, files: ['consumer.ts'] }),
    };
    await inLinkedProject('rx-agent-node10-', files, (dir) => {
      expect(compile(dir)).toBe('');
    });
  });

  it('bundles for a browser through its exports map with no warning (no Node built-in, no bare import left behind)', async () => {
    const files = {
      'consumer.js':
        "import { createAgent, decodeSSE } from 'rx-agent';\nimport { modelRetry, responseCache, piiRedaction } from 'rx-agent/operators';\nimport { scriptedModel } from 'rx-agent/testing';\n" +
        "createAgent({ model: scriptedModel(['hi']), middleware: [modelRetry(), responseCache(), piiRedaction()] }).invoke('x').then((r) => console.log(r.text, typeof decodeSSE));\n",
    };
    await inLinkedProject('rx-agent-browser-', files, async (dir) => {
      const result = await build({ entryPoints: [join(dir, 'consumer.js')], bundle: true, platform: 'browser', format: 'esm', write: false, logLevel: 'silent' });
      expect(result.errors).toEqual([]);
      expect(result.warnings.map((warning) => warning.text)).toEqual([]);
    });
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
