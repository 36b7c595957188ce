/** A mistake in how the demo was called, or a run it cannot act on: printed without a stack. */
export class DemoError extends Error {
  override name = 'DemoError';
}

/** The demo's command line: flags, then the question (the rest). */
export interface DemoArgs {
  readonly trace: boolean;
  /** Structured output: the final answer is a JSON plan checked by a zod schema. */
  readonly json: boolean;
  /** Durable mode: the run is journaled in Redis. */
  readonly redis: boolean;
  /** With `redis`: answer the run's approval (`approve`/`deny`), resume it, or follow its events. */
  readonly action?: { readonly kind: 'approve' | 'deny' | 'resume' | 'events'; readonly runId: string };
  readonly question: string;
}

const defaultQuestion = 'Plan my afternoon in Paris: check the weather, find a café and book a table for 2 at 16:00.';
const actions = ['approve', 'deny', 'resume', 'events'] as const;

/**
 * Parses the demo's arguments. `--trace` prints the trace tree, `--json` asks for structured
 * output; `--approve`, `--deny`, `--resume` and `--events` take a run id and
 * need `--redis`; every other word is the question.
 *
 * @example
 * parseDemoArgs(['--redis', '--approve', 'paris-1a2b3c4d']).action; // { kind: 'approve', runId: 'paris-1a2b3c4d' }
 */
export function parseDemoArgs(argv: readonly string[]): DemoArgs {
  let trace = false;
  let json = false;
  let redis = false;
  let action: DemoArgs['action'];
  const words: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const kind = actions.find((a) => arg === `--${a}`);
    if (arg === '--trace') trace = true;
    else if (arg === '--json') json = true;
    else if (arg === '--redis') redis = true;
    else if (kind) {
      const runId = argv[++i];
      if (!runId || runId.startsWith('--')) throw new DemoError(`--${kind} needs a run id, e.g. npm start -- --redis --${kind} paris-1a2b3c4d`);
      if (action) throw new DemoError(`--${kind}: only one of --approve, --deny, --resume, --events at a time (already --${action.kind})`);
      action = { kind, runId };
    } else words.push(arg);
  }
  if (action && !redis) throw new DemoError(`--${action.kind} works on a run journaled in Redis: add --redis`);
  if (action && words.length > 0) throw new DemoError(`--${action.kind} takes no question, got ${JSON.stringify(words.join(' '))}`);
  return { trace, json, redis, action, question: words.join(' ') || defaultQuestion };
}
