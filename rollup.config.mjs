// Builds ESM + CJS + bundled type declarations for the three entry points.
import esbuild from 'rollup-plugin-esbuild';
import dts from 'rollup-plugin-dts';

const input = {
  index: 'src/index.ts',
  operators: 'operators/index.ts',
  testing: 'src/testing/index.ts',
};

// Dependencies stay imports: one copy of rxjs (and zod, openai, fp-ts, @noble/hashes) in the user's app.
const external = (id) => /^(rxjs|zod|openai|fp-ts|@noble\/hashes)(\/|$)/.test(id) || id.startsWith('node:');

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
      { dir: 'dist/esm', format: 'esm', entryFileNames: '[name].js', chunkFileNames: 'shared/[name]-[hash].js', sourcemap: true, hoistTransitiveImports: false },
      { dir: 'dist/cjs', format: 'cjs', entryFileNames: '[name].cjs', chunkFileNames: 'shared/[name]-[hash].cjs', sourcemap: true, exports: 'named', hoistTransitiveImports: false },
    ],
  },
  {
    input,
    external,
    plugins: [dts({ tsconfig: 'tsconfig.json' })],
    output: [
      { dir: 'dist/types', format: 'esm', entryFileNames: '[name].d.ts', chunkFileNames: 'shared/[name]-[hash].d.ts' },
      // For `require` under moduleResolution node16/nodenext: the package is "type": "module", so
      // TypeScript reads .d.ts files as ESM and refuses them to a CommonJS consumer.
      { dir: 'dist/types', format: 'esm', entryFileNames: '[name].d.cts', chunkFileNames: 'shared/[name]-[hash].d.cts' },
    ],
  },
];
