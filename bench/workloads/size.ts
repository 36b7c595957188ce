/** Size of the built `rx-agent` entry (src/index.ts), minified and gzipped, dependencies excluded. */
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';
import { check } from '../lib/harness';

// The package root: npm runs `npm run bench` there.
const root = process.cwd();

export interface SizeResult {
  readonly gzipBytes: number;
  readonly minifiedBytes: number;
}

export async function runSize(): Promise<SizeResult> {
  const result = await build({
    entryPoints: [join(root, 'src', 'index.ts')],
    bundle: true,
    minify: true,
    format: 'esm',
    external: ['rxjs', 'zod', 'openai', 'fp-ts', '@noble/hashes', 'node:*'],
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
  check(result.errors.length === 0 && result.outputFiles.length === 1, 'size: esbuild did not produce one file');
  const code = result.outputFiles[0].contents;
  const text = Buffer.from(code).toString('utf8');
  check(/\bcreateAgent\b/.test(text), 'size: the bundle does not export createAgent');
  const bundled = Object.keys(result.metafile.inputs).filter((p) => p.includes('node_modules'));
  check(bundled.length === 0, `size: dependencies were bundled: ${bundled.slice(0, 3).join(', ')}`);
  return { gzipBytes: gzipSync(code).length, minifiedBytes: code.length };
}
