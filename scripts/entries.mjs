// Writes package.json's `exports` and `typesVersions`, tsconfig.json's `paths` and typedoc.json's
// `entryPoints` from scripts/entries.json, so that an entry point is declared once. `npm run entries` runs it;
// spec/dist/entries.spec.ts fails when the files and the list disagree.
import { readFileSync, writeFileSync } from 'node:fs';

const { entries } = JSON.parse(readFileSync('scripts/entries.json', 'utf8'));

/** The built file name of an entry ('.' is `index`). */
export const fileOf = (name) => (name === '.' ? 'index' : name);

export function exportsMap() {
  const map = {};
  for (const name of Object.keys(entries)) {
    const file = fileOf(name);
    map[name === '.' ? '.' : `./${name}`] = {
      import: { types: `./dist/types/${file}.d.ts`, default: `./dist/esm/${file}.js` },
      require: { types: `./dist/types/${file}.d.cts`, default: `./dist/cjs/${file}.cjs` },
    };
  }
  map['./package.json'] = './package.json';
  return map;
}

export function typesVersions() {
  const paths = {};
  for (const name of Object.keys(entries)) if (name !== '.') paths[name] = [`./dist/types/${name}.d.ts`];
  return { '*': paths };
}

export function tsconfigPaths() {
  const paths = {};
  for (const [name, { source }] of Object.entries(entries)) paths[name === '.' ? 'rx-agent' : `rx-agent/${name}`] = [source];
  return paths;
}

/** The sources typedoc documents: every entry, in the list's order. */
export function typedocEntryPoints() {
  return Object.values(entries).map(({ source }) => source);
}

/** The tsconfig.json text with its `paths` block written from the list. */
function withPaths(tsconfig) {
  const lines = Object.entries(tsconfigPaths()).map(([name, [source]]) => `      "${name}": ["${source}"]`);
  return tsconfig.replace(/"paths": \{[^}]*\}/, `"paths": {\n${lines.join(',\n')}\n    }`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
  const tsconfig = readFileSync('tsconfig.json', 'utf8');
  const typedoc = JSON.parse(readFileSync('typedoc.json', 'utf8'));
  if (process.argv.includes('--check')) {
    // Exits 1 naming each file that disagrees with scripts/entries.json.
    const stale = [];
    if (JSON.stringify(pkg.exports) !== JSON.stringify(exportsMap())) stale.push('package.json exports');
    if (JSON.stringify(pkg.typesVersions) !== JSON.stringify(typesVersions())) stale.push('package.json typesVersions');
    if (withPaths(tsconfig) !== tsconfig) stale.push('tsconfig.json paths');
    if (JSON.stringify(typedoc.entryPoints) !== JSON.stringify(typedocEntryPoints())) stale.push('typedoc.json entryPoints');
    if (stale.length > 0) {
      console.error(`Out of date with scripts/entries.json: ${stale.join(', ')}. Run \`npm run entries\`.`);
      process.exit(1);
    }
    process.exit(0);
  }
  pkg.exports = exportsMap();
  pkg.typesVersions = typesVersions();
  writeFileSync('package.json', `${JSON.stringify(pkg, null, 2)}\n`);
  // tsconfig.json keeps its own layout: only its `paths` block is rewritten.
  writeFileSync('tsconfig.json', withPaths(tsconfig));
  typedoc.entryPoints = typedocEntryPoints();
  writeFileSync('typedoc.json', `${JSON.stringify(typedoc, null, 2)}\n`);
}
