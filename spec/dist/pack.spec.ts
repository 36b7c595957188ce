import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Packs the package as `npm publish` would (prepack and postpack included) from a copy of the
// repository, and checks what a user installs: the tarball's files and its package.json.
const root = join(__dirname, '..', '..');

interface Packed {
  files: string[];
  manifest: Record<string, unknown>;
  /** The copy's package.json before and after `npm pack`. */
  before: string;
  after: string;
  leftovers: string[];
}

let work: string;
let packed: Packed;

beforeAll(() => {
  for (const file of ['dist/esm/index.js', 'dist/cjs/index.cjs', 'dist/types/index.d.ts']) {
    if (!existsSync(join(root, file))) throw new Error(`${file} is missing: run \`npm run build\` (npm test does it first)`);
  }
  work = mkdtempSync(join(tmpdir(), 'rx-agent-pack-'));
  const copy = join(work, 'rx-agent');
  cpSync(root, copy, { recursive: true, filter: (source) => !/[\\/](node_modules|\.git)$/.test(source) });
  symlinkSync(join(root, 'node_modules'), join(copy, 'node_modules'), 'dir');
  const before = readFileSync(join(copy, 'package.json'), 'utf8');
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: copy, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const [result] = JSON.parse(out.slice(out.indexOf('['))) as Array<{ filename: string; files: Array<{ path: string }> }>;
  execFileSync('tar', ['-xzf', join(work, result.filename), '-C', work]);
  packed = {
    files: result.files.map((f) => f.path).sort(),
    manifest: JSON.parse(readFileSync(join(work, 'package', 'package.json'), 'utf8')) as Record<string, unknown>,
    before,
    after: readFileSync(join(copy, 'package.json'), 'utf8'),
    leftovers: readdirSync(copy).filter((name) => name.startsWith('package.json') && name !== 'package.json'),
  };
}, 120_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the packed tarball (npm pack)', () => {
  it('holds README.md, LICENSE, package.json and every doc of docs/', () => {
    for (const file of ['README.md', 'LICENSE', 'package.json']) expect(packed.files).toContain(file);
    const docs = readdirSync(join(root, 'docs'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.md'));
    expect(docs.length).toBeGreaterThan(0);
    for (const doc of docs) expect(packed.files).toContain(`docs/${doc.split('\\').join('/')}`);
  });

  it('holds every file the README points at (relative links and docs/ paths)', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const targets = new Set<string>();
    for (const [, target] of readme.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (!/^[a-z]+:|^#/i.test(target)) targets.add(target.replace(/^\.\//, '').split('#')[0]);
    }
    for (const [path] of readme.matchAll(/\bdocs\/[\w./-]+\.md\b/g)) targets.add(path);
    expect(targets.size).toBeGreaterThan(0);
    const missing = [...targets].filter((target) => !packed.files.some((f) => f === target || f.startsWith(`${target.replace(/\/$/, '')}/`)));
    expect(missing).toEqual([]); // a file the README links to is not shipped: add it to package.json's `files`
  });

  it('holds every file of the exports map, and no sources, specs or tooling', () => {
    const exportsMap = packed.manifest.exports as Record<string, string | Record<string, Record<string, string>>>;
    const targets = Object.values(exportsMap).flatMap((e) => (typeof e === 'string' ? [e] : Object.values(e).flatMap((c) => Object.values(c))));
    expect(targets.length).toBeGreaterThan(4);
    for (const target of targets) expect(packed.files).toContain(target.replace(/^\.\//, ''));
    for (const field of ['main', 'module', 'types']) expect(packed.files).toContain(String(packed.manifest[field]).replace(/^\.\//, ''));
    // bench/README.md ships: the README links to it (the benchmarks' notes), not to the bench's code.
    const unshipped = packed.files.filter((f) => (/^(src|spec|operators|bench|examples|scripts|node_modules)\//.test(f) && f !== 'bench/README.md') || f.startsWith('package.json.'));
    expect(unshipped).toEqual([]);
  });

  it('has a package.json without scripts (they name files that are not shipped), otherwise the same', () => {
    const source = JSON.parse(packed.before) as Record<string, unknown>;
    expect(source.scripts).toBeDefined();
    expect(packed.manifest.scripts).toBeUndefined();
    expect(packed.manifest['clean-package']).toBeUndefined();
    const { scripts: _scripts, 'clean-package': _config, ...rest } = source;
    expect(packed.manifest).toEqual(rest);
  });

  it("leaves the working tree's package.json as it was, with no backup left behind", () => {
    expect(packed.after).toBe(packed.before);
    expect(packed.leftovers).toEqual([]);
  });
});
