import { Observable, concatMap, defer, map, of, reduce } from 'rxjs';
import { ResponseAssembler, textMessage, textOf, type AgentMiddleware, type Message, type ModelClient, type Tool, type TurnContext } from '../src/index';
import { checkOptions, optionNames } from './internal/checkOptions';

/** Options of {@link toolSelector}. */
export interface ToolSelectorOptions {
  /** The model that picks the tools (called directly: its output never reaches the run's events). */
  model: ModelClient;
  /** At most this many picked tools are offered, besides `alwaysInclude` (default 10). */
  maxTools?: number;
  /** Tools offered in every turn, whatever the model picks (default `[]`). */
  alwaysInclude?: readonly string[];
  /** Select only when the turn has more tools than this (default 20). */
  minToolsToTrigger?: number;
}

/** The keys of {@link ToolSelectorOptions}: any other is refused. */
const OPTIONS = optionNames<ToolSelectorOptions>({ model: true, maxTools: true, alwaysInclude: true, minToolsToTrigger: true });

function instructionsFor(maxTools: number): string {
  return (
    "Your task is to select the tools most relevant to the user's request from the list of available tools. " +
    `Select at most ${maxTools}, the most relevant first. ` +
    'Answer with JSON only, in the form {"tools": ["tool_name", ...]}, using the tool names exactly as listed.'
  );
}

function promptFor(tools: readonly Tool[], query: string): string {
  const list = tools.map((tool) => `- ${tool.name}: ${tool.description}`).join('\n');
  return `Available tools:\n${list}\n\nUser request:\n${query}`;
}

/** This turn's user text (or, when the turn has none, the last user message's). */
function queryOf(ctx: TurnContext): string {
  const fromInput = ctx.input
    .filter((m) => m.role === 'user')
    .map(textOf)
    .filter((t) => t !== '');
  if (fromInput.length > 0) return fromInput.join('\n');
  const messages: readonly Message[] = ctx.messages;
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === 'user') return textOf(messages[i]);
  return '';
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The names of `{"tools": [...]}` (also inside a code fence or surrounding prose), or undefined. */
function parseSelection(text: string): string[] | undefined {
  let value = parseJson(text.trim());
  if (value === undefined) {
    const start = text.indexOf('{');
    const end = text.lastIndexOf('}');
    if (start >= 0 && end > start) value = parseJson(text.slice(start, end + 1));
  }
  const names = (value as { tools?: unknown } | null | undefined)?.tools;
  if (!Array.isArray(names) || !names.every((n) => typeof n === 'string')) return undefined;
  return names;
}

function checkCount(name: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    throw new TypeError(`toolSelector: '${name}' must be an integer >= ${min}, got ${String(value)}`);
  }
  return value;
}

/**
 * Lets a (small) model pick the tools a turn offers (LangChain's `LLMToolSelectorMiddleware`).
 * Once per turn, when the turn has more than `minToolsToTrigger` tools, `model` is asked, with
 * the tools' names and descriptions and the user's request, to answer `{"tools": ["name", …]}`;
 * the turn then offers the picked tools (the first `maxTools` known names of the answer, offered
 * in the agent's tool order) plus `alwaysInclude`. Unknown names are ignored; an unparsable
 * answer keeps every tool.
 * Event `tool-selection { selected, ignored }`: the names offered (`alwaysInclude` among them)
 * and the unknown names (empty for an unparsable answer). A name in `alwaysInclude` that is not a
 * tool of the turn fails the run; so does a failing selection call. The selection call's usage is
 * reported (`ctx.reportUsage`): it counts in the run's usage, `run-end.usage` and `costBudget`.
 *
 * Options: `model` (required), `maxTools = 10`, `alwaysInclude = []`, `minToolsToTrigger = 20`.
 *
 * @example
 * const agent = createAgent({
 *   model, tools: manyTools,
 *   middleware: [toolSelector({ model: openAIChat({ client, model: 'gpt-4o-mini' }), maxTools: 5, alwaysInclude: ['search'] })],
 * });
 */
export function toolSelector(options: ToolSelectorOptions): AgentMiddleware {
  checkOptions('toolSelector', options, OPTIONS, "with 'model'"); // required: not an object, an unknown option, or one set to null
  const { model } = options;
  if (typeof model !== 'function') throw new TypeError("toolSelector: 'model' must be a ModelClient (request) => Observable<ModelUpdate>");
  const maxTools = checkCount('maxTools', options.maxTools ?? 10, 1);
  const minToolsToTrigger = checkCount('minToolsToTrigger', options.minToolsToTrigger ?? 20, 0);
  const alwaysInclude = options.alwaysInclude ?? [];
  if (!Array.isArray(alwaysInclude) || alwaysInclude.some((n) => typeof n !== 'string')) {
    throw new TypeError("toolSelector: 'alwaysInclude' must be an array of tool names");
  }
  const always = new Set(alwaysInclude);
  const instructions = instructionsFor(maxTools);

  const ask = (candidates: readonly Tool[], query: string): Observable<ResponseAssembler> =>
    defer(() => model({ instructions, messages: [textMessage('user', promptFor(candidates, query))], tools: [], settings: {} })).pipe(
      reduce((answer, update) => (answer.add(update), answer), new ResponseAssembler()),
    );

  const select = (ctx: TurnContext): Observable<TurnContext> => {
    const tools = ctx.tools;
    if (tools.length <= minToolsToTrigger) return of(ctx);
    const missing = alwaysInclude.filter((name) => !tools.some((tool) => tool.name === name));
    if (missing.length > 0) {
      throw new Error(`toolSelector: 'alwaysInclude' names tools the turn does not have: ${missing.map((n) => `'${n}'`).join(', ')}`);
    }
    const candidates = tools.filter((tool) => !always.has(tool.name));
    return ask(candidates, queryOf(ctx)).pipe(
      map((answer) => {
        if (answer.usage) ctx.reportUsage(answer.usage, { model: model.model, provider: model.provider }); // the selection's tokens are the run's too
        const names = parseSelection(textOf(answer.message()));
        if (names === undefined) {
          ctx.emit({ type: 'tool-selection', selected: tools.map((t) => t.name), ignored: [] });
          return ctx;
        }
        const known = new Set(candidates.map((t) => t.name));
        const picked = new Set<string>();
        const ignored: string[] = [];
        for (const name of names) {
          if (known.has(name)) {
            if (picked.size < maxTools) picked.add(name);
          } else if (!always.has(name) && !ignored.includes(name)) {
            ignored.push(name);
          }
        }
        const offered = tools.filter((tool) => picked.has(tool.name) || always.has(tool.name));
        ctx.emit({ type: 'tool-selection', selected: offered.map((t) => t.name), ignored });
        return ctx.with({ tools: offered });
      }),
    );
  };

  return { name: 'toolSelector', beforeMessageTurn: concatMap(select) };
}
