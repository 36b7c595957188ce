// Bundles a profiling driver (bench/profile/<name>.ts) with esbuild into $TMPDIR/rx-agent-prof/<name>.mjs,
// so that `node --cpu-prof` sees real line numbers and no tsx loader.
//   node bench/profile/build.mjs s2 && node --cpu-prof --cpu-prof-dir=/tmp/prof/s2 /tmp/rx-agent-prof/s2.mjs 500 30
//   node bench/profile/top.mjs /tmp/prof/s2/<file>.cpuprofile 40
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const out = join(tmpdir(), 'rx-agent-prof');
mkdirSync(out, { recursive: true });
for (const driver of process.argv.slice(2)) {
  await build({
    entryPoints: [join(here, `${driver}.ts`)],
    bundle: true,
    platform: 'node',
    format: 'esm',
    keepNames: false,
    ignoreAnnotations: true, // the root package.json says sideEffects: false; our drivers are all side effects
    sourcemap: false,
    outfile: join(out, `${driver}.mjs`),
    // rxjs's ESM build (what Node's CJS build does, without esbuild's CJS-interop getters in the profile)
    alias: {
      rxjs: join(root, 'node_modules', 'rxjs', 'dist', 'esm', 'index.js'),
      // (what @ag-ui/client imports; the alias above would otherwise prefix it)
      'rxjs/operators': join(root, 'node_modules', 'rxjs', 'dist', 'esm', 'operators', 'index.js'),
    },
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    logLevel: 'warning',
  });
  console.log(`built ${join(out, `${driver}.mjs`)}`);
}
