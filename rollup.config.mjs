// Builds ESM + CJS + bundled type declarations for every entry point of scripts/entries.json.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import esbuild from 'rollup-plugin-esbuild';
import dts from 'rollup-plugin-dts';

const { entries } = JSON.parse(readFileSync('scripts/entries.json', 'utf8'));
const input = Object.fromEntries(Object.entries(entries).map(([name, { source }]) => [name === '.' ? 'index' : name, source]));

// Every bare import stays an import: one copy of rxjs, zod and each peer in the user's app. fp-ts
// is the exception (inlineFpTs below).
const external = (id) => !id.startsWith('.') && !isAbsolute(id) && !id.startsWith('\0') && !id.startsWith('fp-ts/');

// fp-ts ships CommonJS (lib/) and ES modules (es6/) but no exports map, and its es6/ files import
// each other without extensions in a package without "type": "module": neither Node's ESM loader
// nor a browser (an import map maps names, not extensions) can load them, and lib/ is CommonJS,
// which a browser cannot load at all. So the few functions the runtime uses (Either's left, right,
// isLeft) are bundled from es6/, tree-shaken to a few lines, and the output imports no fp-ts.
const fpTs = join(dirname(createRequire(import.meta.url).resolve('fp-ts/package.json')), 'es6');
const inlineFpTs = {
  name: 'inline-fp-ts',
  resolveId(source, importer) {
    const id = source.startsWith('fp-ts/')
      ? join(
          fpTs,
          `${source
            .slice('fp-ts/'.length)
            .replace(/^(?:lib|es6)\//, '')
            .replace(/\.js$/, '')}.js`,
        )
      : importer?.startsWith(fpTs) && source.startsWith('.')
        ? resolve(dirname(importer), source.endsWith('.js') ? source : `${source}.js`)
        : null;
    return id && { id, moduleSideEffects: false }; // fp-ts's package.json says "sideEffects": false
  },
};

export default [
  {
    input,
    external,
    // Neither the dependencies nor the sources have side effects to keep (package.json says
    // "sideEffects": false): an import whose names all went unused is dropped, not left as a bare
    // `import 'zod'` or `import './shared/x.js'` that bundlers then warn about (nor hoisted from a
    // shared chunk into an entry: hoistTransitiveImports below).
    treeshake: { moduleSideEffects: false },
    // fp-ts's TypeScript helpers read a top-level `this` (undefined in a module, as intended).
    onwarn(warning, warn) {
      if (warning.code === 'THIS_IS_UNDEFINED' && warning.id?.startsWith(fpTs)) return;
      warn(warning);
    },
    plugins: [inlineFpTs, esbuild({ target: 'es2022', tsconfig: 'tsconfig.json' })],
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
