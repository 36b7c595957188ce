import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
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

const { entries } = JSON.parse(readFileSync(join(root, 'scripts', 'entries.json'), 'utf8')) as { entries: Record<string, { source: string; peer?: string }> };
const names = Object.keys(entries);
const peered = Object.entries(entries).filter((entry): entry is [string, { source: string; peer: string }] => entry[1].peer !== undefined);

/** The packages `file` (in `dir`) and the chunks it reaches import, by package name. */
function bareImports(dir: string, file: string, seen = new Set<string>(), found = new Set<string>()): Set<string> {
  if (seen.has(file)) return found;
  seen.add(file);
  const text = readFileSync(join(dir, file), 'utf8');
  for (const match of text.matchAll(/(?:from\s*|import\s*\(\s*|require\(\s*|import\s+)['"]([^'"]+)['"]/g)) {
    const specifier = match[1];
    if (specifier.startsWith('.')) bareImports(dir, join(dirname(file), specifier), seen, found);
    else found.add(specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]);
  }
  return found;
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

  // Each entry whose peer dependency is optional: a project without that peer still compiles
  // against, and loads with import and require, every other entry.
  for (const [entry, { peer }] of peered) {
    it(`has the other entries working where ${peer} (the peer of rx-agent/${entry}) is not installed`, () => {
      // A project of its own: the package copied in as npm installs it (package.json and dist),
      // its dependencies and the other peers linked, and no ${peer} anywhere on the way up.
      const dir = mkdtempSync(join(tmpdir(), `rx-agent-no-${entry}-`));
      try {
        const installed = join(dir, 'node_modules', 'rx-agent');
        mkdirSync(installed, { recursive: true });
        cpSync(join(root, 'package.json'), join(installed, 'package.json'));
        cpSync(join(root, 'dist'), join(installed, 'dist'), { recursive: true });
        const others = peered.map(([, other]) => other.peer).filter((other) => other !== peer);
        for (const dep of ['rxjs', 'zod', '@noble', ...others]) {
          // A scoped peer (@opentelemetry/api) is linked inside its scope's folder.
          mkdirSync(dirname(join(dir, 'node_modules', dep)), { recursive: true });
          symlinkSync(join(root, 'node_modules', dep), join(dir, 'node_modules', dep), 'dir');
        }
        const rest = names.filter((name) => name !== entry);
        const specifier = (name: string) => (name === '.' ? 'rx-agent' : `rx-agent/${name}`);
        writeFileSync(join(dir, 'consumer.ts'), rest.map((name, i) => `import * as e${i} from '${specifier(name)}';\nexport const n${i} = Object.keys(e${i}).length;\n`).join(''));
        writeFileSync(
          join(dir, 'tsconfig.json'),
          JSON.stringify({ compilerOptions: { strict: true, module: 'Node16', moduleResolution: 'Node16', target: 'ES2022', noEmit: true, types: [], skipLibCheck: false }, files: ['consumer.ts'] }),
        );
        expect(compile(dir)).toBe('');
        const loads = (load: (name: string) => string) => rest.map((name) => `${load(specifier(name))};`).join('\n');
        execFileSync(process.execPath, ['--input-type=module', '-e', loads((name) => `await import('${name}')`)], { cwd: dir, encoding: 'utf8' });
        execFileSync(process.execPath, ['-e', loads((name) => `require('${name}')`)], { cwd: dir, encoding: 'utf8' });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  it('has an exports map, typesVersions and tsconfig paths that match scripts/entries.json', () => {
    expect(() => execFileSync(process.execPath, ['scripts/entries.mjs', '--check'], { cwd: root, encoding: 'utf8', stdio: 'pipe' })).not.toThrow();
  });

  it('has a core entry that imports only rxjs and zod, fp-ts being bundled (ESM and CJS, shared chunks included)', () => {
    for (const [dir, file] of [['dist/esm', 'index.js'], ['dist/cjs', 'index.cjs']]) {
      expect([...bareImports(join(root, dir), file)].sort()).toEqual(['rxjs', 'zod']);
    }
  });

  it('has an otel entry that imports @opentelemetry/api and no SDK (ESM and CJS, shared chunks included)', () => {
    for (const [dir, file] of [['dist/esm', 'otel.js'], ['dist/cjs', 'otel.cjs']]) {
      const imports = [...bareImports(join(root, dir), file)];
      expect(imports).toContain('@opentelemetry/api');
      expect(imports.filter((name) => !['@opentelemetry/api', 'rxjs', 'zod'].includes(name))).toEqual([]);
    }
  });

  it('loads every entry with import and with require', () => {
    const specifiers = names.map((name) => (name === '.' ? 'rx-agent' : `rx-agent/${name}`));
    const esm = specifiers.map((name) => `Object.keys(await import('${name}')).length`).join(', ');
    const cjs = specifiers.map((name) => `Object.keys(require('${name}')).length`).join(', ');
    const counts = (args: string[]) => run([...args, '-e', args.length > 0 ? `console.log(JSON.stringify([${esm}]))` : `console.log(JSON.stringify([${cjs}]))`]) as number[];
    const viaImport = counts(['--input-type=module']);
    expect(viaImport.every((count) => count > 0)).toBe(true);
    expect(counts([])).toEqual(viaImport);
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
        "import { createAgent } from 'rx-agent';\nimport { decodeSSE } from 'rx-agent/http';\nimport { modelRetry, responseCache, piiRedaction } from 'rx-agent/operators';\nimport { scriptedModel } from 'rx-agent/testing';\n" +
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
