import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

// Every ```ts block of the documentation compiles against the sources, with the options of
// tsconfig.json. Each block is a module of its own, served from memory at a path of its own
// (README blocks at the repository's root, AUTHORING's in operators/, where the operator it shows
// would live); all of them are checked by one ts.Program.

const root = join(__dirname, '..');

/** The documents, and the folder their blocks are compiled in (relative imports resolve from it). */
const DOCUMENTS = [
  { file: 'README.md', dir: '.' },
  { file: 'docs/AUTHORING.md', dir: 'operators' },
  { file: 'docs/guide/ui-protocols.md', dir: '.' },
];

/**
 * What the prose around a block assumes: names a block may use without declaring them. A block
 * gets the declaration of each of these names it uses and does not declare itself.
 */
const AMBIENT: Record<string, string> = {
  agent: "import('rx-agent').Agent",
  model: "import('rx-agent').ModelClient",
  client: "import('openai').default",
  tools: "readonly import('rx-agent').Tool[]",
  manyTools: "readonly import('rx-agent').Tool[]",
  search: "import('rx-agent').Tool",
  read: "import('rx-agent').Tool",
  fetchPage: "import('rx-agent').Tool",
  getWeather: "import('rx-agent').Tool",
  sendMail: "import('rx-agent').Tool",
  buyStock: "import('rx-agent').Tool",
  execute: '(args: { path: string }) => Promise<void>',
  session: "import('rx-agent').Session",
  input: "import('rx-agent').RunInput",
  options: "import('rx-agent').RunOptions",
  responses: "import('rxjs').Observable<import('rx-agent').AgentResponse>",
  signal: 'AbortSignal',
  runId: 'string',
  ctx: "import('rx-agent').IterationContext",
  ui: '{ confirm(question: string): Promise<boolean> }',
  output: 'HTMLElement',
  stopButton: 'HTMLButtonElement',
  url: 'string',
  res: 'Response',
  app: "{ post(path: string, handler: (req: import('node:http').IncomingMessage & { body: { message: string } }, res: import('node:http').ServerResponse) => void): void }",
  pino: "(options?: { level?: string }) => import('rx-agent/operators').IterationLogger",
  metrics: '{ observe(name: string, value: number, labels: Record<string, string | number | boolean>): void }',
  showHistory: "(messages: readonly import('rx-agent').Message[]) => void",
  render: "(todos: readonly import('rx-agent').TodoItem[]) => void",
};

/**
 * Library names a block may use without importing them, as the prose does in a fragment, unless
 * the block imports from that module itself: then it must import every name it uses from it.
 */
const LIBRARY: Record<string, readonly string[]> = {
  rxjs: ['MonoTypeOperatorFunction', 'defer', 'finalize', 'from', 'map', 'retry', 'switchMap', 'throwError', 'timeout'],
  zod: ['z'],
  'rx-agent': [
    'AgentMiddleware', 'ErrorContext', 'FunctionContext', 'FunctionResultContext', 'IterationContext', 'ModelCallContext',
    'ModelUpdate', 'Tool', 'ToolBatchContext', 'ToolOutcome', 'TurnContext',
    'createSession', 'defineState', 'ofType', 'toAsyncIterable', 'toReadableStream',
  ],
  'rx-agent/http': ['decodeSSE', 'sseHeaders', 'toSSEStream'],
};

/** Blocks that cannot compile by design, keyed by document and first line, with why. Keep it short. */
const SKIPPED: readonly { file: string; firstLine: string; reason: string }[] = [
  {
    file: 'docs/AUTHORING.md',
    firstLine: 'testScheduler.run(({ expectObservable, cold }) => {',
    reason: 'a template: its arguments are elided (`[...]`, `{ ... }`)',
  },
];

interface Block {
  readonly file: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  /** Spaces of indentation removed from each line (a block inside a list item). */
  readonly indent: number;
  readonly code: string;
  readonly skip: string | undefined;
}

function extractBlocks(file: string): Block[] {
  const lines = readFileSync(join(root, file), 'utf8').split(/\r?\n/);
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)(`{3,}|~{3,})\s*([^\s`]*)/.exec(lines[i]!);
    if (!open) continue;
    const [, spaces, fence, info] = open as unknown as [string, string, string, string];
    const body: string[] = [];
    let j = i + 1;
    while (j < lines.length && !isClosingFence(lines[j]!, fence)) body.push(lines[j++]!);
    if (j === lines.length) throw new Error(`${file}:${i + 1}: the code block is not closed`);
    if (info === 'ts' || info === 'typescript') {
      const indent = spaces.length;
      const code = body.map((l) => l.replace(new RegExp(`^ {0,${indent}}`), '')).join('\n') + '\n';
      const skip = SKIPPED.find((s) => s.file === file && s.firstLine === firstLineOf(code))?.reason;
      blocks.push({ file, line: i + 1, indent, code, skip });
    }
    i = j;
  }
  return blocks;
}

function firstLineOf(code: string): string {
  return code.split('\n')[0]!.trim();
}

function isClosingFence(line: string, fence: string): boolean {
  const m = /^ *(`{3,}|~{3,})\s*$/.exec(line);
  return m !== null && m[1]![0] === fence[0] && m[1]!.length >= fence.length;
}

/** The names a block uses without declaring them, and the modules it imports from. */
function scan(code: string): { free: Set<string>; imports: Set<string> } {
  const source = ts.createSourceFile('block.ts', code, ts.ScriptTarget.Latest, true);
  const declared = new Set<string>();
  const used = new Set<string>();
  const imports = new Set<string>();
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) imports.add(node.moduleSpecifier.text);
    if (ts.isIdentifier(node)) {
      const p = node.parent;
      const named = (p as { name?: ts.Node }).name === node;
      if (
        named &&
        (ts.isVariableDeclaration(p) || ts.isParameter(p) || ts.isBindingElement(p) || ts.isFunctionDeclaration(p) ||
          ts.isFunctionExpression(p) || ts.isClassLike(p) || ts.isInterfaceDeclaration(p) || ts.isTypeAliasDeclaration(p) ||
          ts.isEnumDeclaration(p) || ts.isModuleDeclaration(p) || ts.isTypeParameterDeclaration(p) || ts.isImportClause(p) ||
          ts.isNamespaceImport(p) || ts.isImportSpecifier(p) || ts.isImportEqualsDeclaration(p))
      ) {
        declared.add(node.text);
      } else if (
        !(named && (ts.isPropertyAccessExpression(p) || ts.isPropertyAssignment(p) || ts.isTypeElement(p) || ts.isClassElement(p))) &&
        !(ts.isQualifiedName(p) && p.right === node) &&
        !((ts.isBindingElement(p) || ts.isImportSpecifier(p) || ts.isExportSpecifier(p)) && p.propertyName === node)
      ) {
        used.add(node.text);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return { free: new Set([...used].filter((n) => !declared.has(n))), imports };
}

/**
 * The declarations a block needs, one a line, to put before it. `resolve` names the file a module
 * specifier stands for (so that '../src/index' is 'rx-agent').
 */
function prelude(code: string, resolve: (specifier: string) => string | undefined): string {
  const { free, imports } = scan(code);
  const imported = new Set([...imports].map(resolve));
  const lines: string[] = [];
  for (const [module, names] of Object.entries(LIBRARY)) {
    const wanted = imported.has(resolve(module)) ? [] : names.filter((n) => free.has(n));
    if (wanted.length > 0) lines.push(`import { ${wanted.join(', ')} } from '${module}';`);
  }
  for (const [name, type] of Object.entries(AMBIENT)) if (free.has(name)) lines.push(`declare const ${name}: ${type};`);
  return lines.map((l) => `${l}\n`).join('');
}

function loadOptions(): ts.CompilerOptions {
  const configPath = join(root, 'tsconfig.json');
  const read = ts.readConfigFile(configPath, ts.sys.readFile);
  if (read.error) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, '\n'));
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, root, undefined, configPath);
  if (parsed.errors.length > 0) throw new Error(parsed.errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n'));
  // Every block is a module, imports or not (so that blocks do not share a global scope).
  return { ...parsed.options, moduleDetection: ts.ModuleDetectionKind.Force, noEmit: true };
}

interface Compiled {
  readonly program: ts.Program;
  readonly files: Map<Block, { path: string; preludeLines: number }>;
}

function compile(blocks: readonly Block[]): Compiled {
  const options = loadOptions();
  const files = new Map<Block, { path: string; preludeLines: number }>();
  const texts = new Map<string, string>();
  for (const block of blocks) {
    const dir = DOCUMENTS.find((d) => d.file === block.file)!.dir;
    const path = join(root, dir, `${block.file.replace(/\W/g, '_')}_${block.line}.doc.ts`).replace(/\\/g, '/'); // as TypeScript spells paths
    const head = prelude(block.code, (specifier) => ts.resolveModuleName(specifier, path, options, ts.sys).resolvedModule?.resolvedFileName);
    texts.set(path, head + block.code);
    files.set(block, { path, preludeLines: head.split('\n').length - 1 });
  }
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (fileName, language, ...rest) => {
    const text = texts.get(fileName);
    return text !== undefined ? ts.createSourceFile(fileName, text, language, true) : getSourceFile.call(host, fileName, language, ...rest);
  };
  host.fileExists = (fileName) => texts.has(fileName) || fileExists.call(host, fileName);
  host.readFile = (fileName) => texts.get(fileName) ?? readFile.call(host, fileName);
  const program = ts.createProgram({ rootNames: [...texts.keys()], options, host });
  const problems = program.getOptionsDiagnostics();
  if (problems.length > 0) throw new Error(ts.formatDiagnostics(problems, host));
  return { program, files };
}

/**
 * A block that declares an interface named like an export of 'rx-agent' shows that export: the
 * same members, equally optional, of types assignable both ways.
 */
function shownInterfaceErrors({ program, files }: Compiled, block: Block, source: ts.SourceFile): string[] {
  const checker = program.getTypeChecker();
  const resolved = ts.resolveModuleName('rx-agent', files.get(block)!.path, program.getCompilerOptions(), ts.sys).resolvedModule;
  const pkg = resolved && program.getSourceFile(resolved.resolvedFileName);
  const pkgSymbol = pkg && checker.getSymbolAtLocation(pkg);
  if (!pkgSymbol) return [`${block.file}:${block.line} 'rx-agent' does not resolve`];
  const exported = new Map(checker.getExportsOfModule(pkgSymbol).map((s) => [s.name, s]));
  const members = (symbol: ts.Symbol) => {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    return new Map(checker.getPropertiesOfType(checker.getDeclaredTypeOfSymbol(target)).map((p) => [p.name, p]));
  };
  const optional = (p: ts.Symbol) => (p.flags & ts.SymbolFlags.Optional) !== 0;
  const errors: string[] = [];
  for (const statement of source.statements) {
    if (!ts.isInterfaceDeclaration(statement)) continue;
    const name = statement.name.text;
    const original = exported.get(name);
    if (!original) continue;
    const shown = members(checker.getSymbolAtLocation(statement.name)!);
    const real = members(original);
    for (const key of new Set([...shown.keys(), ...real.keys()])) {
      const [a, b] = [shown.get(key), real.get(key)];
      if (!a || !b) {
        errors.push(`${name}.${key}: ${a ? `not a member of the package's ${name}` : `a member of the package's ${name}, missing here`}`);
      } else if (optional(a) !== optional(b)) {
        errors.push(`${name}.${key}: ${optional(a) ? 'optional' : 'required'} here, ${optional(b) ? 'optional' : 'required'} in the package`);
      } else {
        const [ta, tb] = [checker.getTypeOfSymbol(a), checker.getTypeOfSymbol(b)];
        if (!checker.isTypeAssignableTo(ta, tb) || !checker.isTypeAssignableTo(tb, ta)) {
          errors.push(`${name}.${key}: ${checker.typeToString(ta)} here, ${checker.typeToString(tb)} in the package`);
        }
      }
    }
  }
  return errors.map((e) => `${block.file}:${block.line} ${e}`);
}

/** The block's diagnostics, located in its document; '' when it compiles. */
function diagnosticsOf(compiled: Compiled, block: Block): string {
  const { program, files } = compiled;
  const { path, preludeLines } = files.get(block)!;
  const source = program.getSourceFile(path)!;
  const diagnostics = [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)];
  const codeLines = block.code.split('\n');
  return diagnostics
    .map((d) => {
      const message = `error TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n  ')}`;
      if (d.file !== source || d.start === undefined) return `${block.file}:${block.line} ${message}`;
      const { line, character } = source.getLineAndCharacterOfPosition(d.start);
      if (line < preludeLines) return `${block.file}:${block.line} (in its prelude: ${source.text.split('\n')[line]}) ${message}`;
      const at = line - preludeLines;
      return `${block.file}:${block.line + 1 + at}:${character + 1 + block.indent} ${message}\n    ${codeLines[at]}`;
    })
    .concat(diagnostics.length > 0 ? [] : shownInterfaceErrors(compiled, block, source))
    .join('\n');
}

const blocks = DOCUMENTS.flatMap(({ file }) => extractBlocks(file));

describe('the TypeScript examples of the documentation compile', () => {
  let compiled: Compiled;
  beforeAll(() => {
    compiled = compile(blocks.filter((b) => b.skip === undefined));
  });

  it.each(DOCUMENTS.map((d) => d.file))('%s has examples', (file) => {
    expect(blocks.filter((b) => b.file === file).length).toBeGreaterThan(0);
  });

  it('skips only blocks that exist', () => {
    const stale = SKIPPED.filter((s) => !blocks.some((b) => b.file === s.file && firstLineOf(b.code) === s.firstLine));
    expect(stale).toEqual([]);
  });

  for (const block of blocks) {
    if (block.skip !== undefined) {
      it.skip(`${block.file}:${block.line} (skipped: ${block.skip})`, () => {});
      continue;
    }
    it(`${block.file}:${block.line}`, () => {
      const errors = diagnosticsOf(compiled, block);
      if (errors !== '') throw new Error(`The example does not compile:\n${errors}`);
    });
  }
});
