/**
 * Sizes, minified and gzipped, dependencies excluded: every entry point of scripts/entries.json,
 * and an app that imports `createAgent`, `defineTool` and `openAIChat`, tree-shaken as a bundler
 * does it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build, type BuildOptions } from 'esbuild';
import { check } from '../lib/harness';

// The package root: npm runs `npm run bench` there.
const root = process.cwd();

export interface EntrySize {
  /** `rx-agent`, `rx-agent/operators`, … */
  readonly entry: string;
  readonly gzipBytes: number;
  readonly minifiedBytes: number;
}

export interface SizeResult {
  /** The core entry, `rx-agent`. */
  readonly core: EntrySize;
  /** `createAgent`, `defineTool` and `openAIChat` imported by an app, tree-shaken. */
  readonly app: EntrySize;
  readonly entries: readonly EntrySize[];
}

// Every bare import stays an import, as it does in the published build.
const options: BuildOptions = {
  bundle: true,
  minify: true,
  format: 'esm',
  platform: 'neutral',
  packages: 'external',
  write: false,
  metafile: true,
  logLevel: 'silent',
};

async function measure(entry: string, build$: Promise<Awaited<ReturnType<typeof build>>>): Promise<EntrySize> {
  const result = await build$;
  check(result.errors.length === 0 && result.outputFiles?.length === 1, `size: esbuild did not produce one file for ${entry}`);
  const bundled = Object.keys(result.metafile!.inputs).filter((p) => p.includes('node_modules'));
  check(bundled.length === 0, `size: dependencies were bundled into ${entry}: ${bundled.slice(0, 3).join(', ')}`);
  const code = result.outputFiles[0].contents;
  return { entry, gzipBytes: gzipSync(code).length, minifiedBytes: code.length };
}

export async function runSize(): Promise<SizeResult> {
  const { entries } = JSON.parse(readFileSync(join(root, 'scripts', 'entries.json'), 'utf8')) as { entries: Record<string, { source: string }> };
  const sizes: EntrySize[] = [];
  for (const [name, { source }] of Object.entries(entries)) {
    const entry = name === '.' ? 'rx-agent' : `rx-agent/${name}`;
    sizes.push(await measure(entry, build({ ...options, entryPoints: [join(root, source)] })));
  }
  const app = await measure(
    'app: createAgent + defineTool + openAIChat',
    build({
      ...options,
      stdin: {
        contents: [
          "import { createAgent, defineTool } from './src/index';",
          "import { openAIChat } from './src/openai/index';",
          'export const app = { createAgent, defineTool, openAIChat };',
        ].join('\n'),
        resolveDir: root,
        loader: 'ts',
      },
    }),
  );
  const core = sizes.find((size) => size.entry === 'rx-agent');
  check(core !== undefined, 'size: scripts/entries.json has no core entry');
  return { core, app, entries: sizes };
}
