// Builds ESM + CJS + bundled type declarations for every entry point of scripts/entries.json.
import { readFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import esbuild from 'rollup-plugin-esbuild';
import dts from 'rollup-plugin-dts';

const { entries } = JSON.parse(readFileSync('scripts/entries.json', 'utf8'));
const input = Object.fromEntries(Object.entries(entries).map(([name, { source }]) => [name === '.' ? 'index' : name, source]));

// Every bare import stays an import: one copy of rxjs, zod, fp-ts and each peer in the user's app.
const external = (id) => !id.startsWith('.') && !isAbsolute(id) && !id.startsWith('\0');

export default [
  {
    input,
    external,
    // The dependencies have no side effects to keep: an import whose names all went unused is
    // dropped, not left as a bare `import 'zod'` that bundlers then warn about (nor hoisted from a
    // shared chunk into an entry: hoistTransitiveImports below).
    treeshake: { moduleSideEffects: 'no-external' },
    plugins: [esbuild({ target: 'es2022', tsconfig: 'tsconfig.json' })],
    output: [
      {
        dir: 'dist/esm',
        format: 'esm',
        entryFileNames: '[name].js',
        chunkFileNames: 'shared/[name]-[hash].js',
        sourcemap: true,
        hoistTransitiveImports: false,
      },
      {
        dir: 'dist/cjs',
        format: 'cjs',
        entryFileNames: '[name].cjs',
        chunkFileNames: 'shared/[name]-[hash].cjs',
        sourcemap: true,
        exports: 'named',
        hoistTransitiveImports: false,
      },
    ],
  },
  {
    input,
    external,
    // stripInternal: members marked @internal are the runtime's, not the API.
    plugins: [dts({ tsconfig: 'tsconfig.json', compilerOptions: { stripInternal: true } })],
    output: [
      { dir: 'dist/types', format: 'esm', entryFileNames: '[name].d.ts', chunkFileNames: 'shared/[name]-[hash].d.ts' },
      // For `require` under moduleResolution node16/nodenext: the package is "type": "module", so
      // TypeScript reads .d.ts files as ESM and refuses them to a CommonJS consumer.
      { dir: 'dist/types', format: 'esm', entryFileNames: '[name].d.cts', chunkFileNames: 'shared/[name]-[hash].d.cts' },
    ],
  },
];
