// The layering of the shipped code (src/ and operators/), checked by `npm run lint`.
//
// src/'s core folders are ordered, lowest first; a core folder imports only itself and the folders
// before it. Every other folder of src/ is an entry (src/openai, src/http, ...): it sits above the
// core, imports src/index.ts and the core folders, and never another entry. src/testing is on top
// and may import anything in src/. The operators import only the public core entry
// (src/index.ts), the runtime's helpers (src/internal) and their own internals.
//
// Packages: the shipped code imports only the package's dependencies and required peers; an
// optional peer only from the entry that names it in scripts/entries.json (and src/testing).
// A new entry folder, or a new entry's peer, is covered without editing this file.
const { entries } = require('./scripts/entries.json');
const pkg = require('./package.json');

const core = ['internal', 'messages', 'model', 'tools', 'events', 'state', 'middleware', 'session', 'journal', 'agent', 'bindings'];
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const anyOf = (names) => `(?:${names.map(escape).join('|')})`;

const optionalPeers = Object.keys(pkg.peerDependenciesMeta ?? {}).filter((name) => pkg.peerDependenciesMeta[name].optional);
// fp-ts is a development dependency whose few functions the build bundles into the output.
const bundledPackages = ['fp-ts'];
const runtimePackages = [
  ...Object.keys(pkg.dependencies ?? {}),
  ...Object.keys(pkg.peerDependencies ?? {}).filter((name) => !optionalPeers.includes(name)),
  ...bundledPackages,
];
// Entry folder -> the optional peer it is built on, from scripts/entries.json.
const peerOf = new Map(
  Object.values(entries)
    .filter((entry) => entry.peer !== undefined && /^src\/[^/]+\/index\.ts$/.test(entry.source))
    .map((entry) => [entry.source.split('/')[1], entry.peer]),
);
const allPeers = [...new Set(peerOf.values())];

/** A rule forbidding, from `from`, every package outside `allowed` (in node_modules/). */
const onlyPackages = (name, from, allowed, comment) => ({
  name,
  comment,
  severity: 'error',
  from,
  to: { path: '(^|/)node_modules/', pathNot: `(^|/)node_modules/${anyOf(allowed)}/` },
});

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'No module depends on itself through others.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'no-folder-cycle',
      comment: 'No folder depends on itself through other folders.',
      severity: 'error',
      scope: 'folder',
      from: {},
      to: { circular: true },
    },
    ...core.map((folder, rank) => ({
      name: `no-upward-import-from-${folder}`,
      comment: `src/${folder} imports only ${core
        .slice(0, rank + 1)
        .map((f) => `src/${f}`)
        .join(', ')}: the core folders are ordered ${core.join(' < ')}.`,
      severity: 'error',
      from: { path: `^src/${folder}/` },
      to: { path: '^src/', pathNot: `^src/${anyOf(core.slice(0, rank + 1))}/` },
    })),
    {
      name: 'core-index-imports-core',
      comment: 'The core entry (src/index.ts) re-exports the core folders only.',
      severity: 'error',
      from: { path: '^src/[^/]+$' },
      to: { path: '^src/', pathNot: `^src/${anyOf(core)}/` },
    },
    {
      name: 'entry-imports-core',
      comment: 'An entry (a src folder outside the core, other than src/testing) imports src/index.ts, the core folders and itself, never another entry.',
      severity: 'error',
      from: { path: `^src/(?!${anyOf([...core, 'testing'])}/)([^/]+)/` },
      to: { path: '^src/', pathNot: `^src/(?:index\\.ts$|${anyOf(core)}/|$1/)` },
    },
    {
      name: 'src-stays-in-src',
      comment: 'src/ never imports operators/, spec/, bench/, examples/ or any other folder of the repository.',
      severity: 'error',
      from: { path: '^src/' },
      to: { path: '^(?!src/|node_modules/)[^/]+/', dependencyTypesNot: ['core'] },
    },
    {
      name: 'operators-import-public-core',
      comment: "An operator and the operators' internals import only src/index.ts, src/internal and operators/internal.",
      severity: 'error',
      from: { path: '^operators/', pathNot: '^operators/index\\.ts$' },
      to: {
        pathNot: '^(?:src/index\\.ts$|src/internal/|operators/internal/|node_modules/)',
        dependencyTypesNot: ['core'],
      },
    },
    {
      name: 'operators-index-imports-operators',
      comment: 'operators/index.ts re-exports the operators beside it.',
      severity: 'error',
      from: { path: '^operators/index\\.ts$' },
      to: { pathNot: '^(?:operators/[^/]+\\.ts$|node_modules/)', dependencyTypesNot: ['core'] },
    },
    onlyPackages(
      'only-runtime-packages',
      { path: '^(?:src|operators)/', pathNot: `^src/${anyOf([...peerOf.keys(), 'testing'])}/` },
      runtimePackages,
      `The shipped code imports only ${runtimePackages.join(', ')}; an optional peer only from its own entry.`,
    ),
    ...[...peerOf].map(([folder, peer]) =>
      onlyPackages(
        `only-runtime-packages-and-${peer}`,
        { path: `^src/${escape(folder)}/` },
        [...runtimePackages, peer],
        `src/${folder} imports only ${[...runtimePackages, peer].join(', ')}.`,
      ),
    ),
    onlyPackages(
      'only-runtime-packages-and-peers',
      { path: '^src/testing/' },
      [...runtimePackages, ...allPeers],
      `src/testing imports only ${[...runtimePackages, ...allPeers].join(', ')}.`,
    ),
    {
      name: 'not-to-unresolvable',
      comment: 'Every import resolves (a package is installed, a file exists).',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: '(^|/)node_modules/' },
    tsConfig: { fileName: 'tsconfig.json' },
    // Type-only imports count: they couple folders and reach the published declarations.
    tsPreCompilationDeps: true,
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types', 'typings'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
