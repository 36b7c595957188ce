import type { MonoTypeOperatorFunction } from 'rxjs';
import type { AgentMiddleware, ContentPart, Message, ModelCallContext, ModelUpdate } from '../src/index';
import { checkNestedOptionNames, checkOptions, optionNames } from './internal/checkOptions';
import { lengthOf, totalChars } from './internal/approximateTokens';

/** Options of {@link contextEditing}. */
export interface ContextEditingOptions {
  /** Edit when the request counts more tokens than this (default `{ tokens: 100000 }`). */
  trigger?: { tokens: number };
  /** The most recent tool results kept as they are (default `{ toolResults: 3 }`). */
  keep?: { toolResults: number };
  /** Clear (oldest first) until at least this many tokens are freed; 0 (default): clear every candidate. */
  clearAtLeast?: number;
  /** Tools whose results are never cleared (and do not count in `keep`). Default `[]`. */
  excludeTools?: readonly string[];
  /** Also replace the arguments of the cleared results' calls by `{}` (default false). */
  clearToolInputs?: boolean;
  /** What a cleared result reads (default `'[cleared]'`). */
  placeholder?: string;
  /** Counts the tokens of messages (default: characters / 4). */
  tokenCounter?: (messages: readonly Message[]) => number;
}

/** The keys of {@link ContextEditingOptions}: any other is refused. */
const OPTIONS = optionNames<ContextEditingOptions>({
  trigger: true,
  keep: true,
  clearAtLeast: true,
  excludeTools: true,
  clearToolInputs: true,
  placeholder: true,
  tokenCounter: true,
});

/** The keys of `trigger` and of `keep`: any other is refused. */
const TRIGGER_OPTIONS = optionNames<NonNullable<ContextEditingOptions['trigger']>>({ tokens: true });
const KEEP_OPTIONS = optionNames<NonNullable<ContextEditingOptions['keep']>>({ toolResults: true });

function nonNegative(name: string, value: unknown): number {
  if (typeof value !== 'number' || !(value >= 0)) {
    throw new TypeError(`contextEditing: '${name}' must be a non-negative number, got ${String(value)}`);
  }
  return value;
}

/** Where a tool result sits in the message list. */
interface ResultAt {
  readonly message: number;
  readonly part: number;
}

/**
 * Clears old tool results from what the model is sent once the request grows past a token
 * trigger (LangChain's `ClearToolUsesEdit`). Before each model call, when the messages count more
 * than `trigger.tokens`, every tool result except the `keep.toolResults` most recent is a
 * candidate (results of `excludeTools` do not count and are never cleared); candidates are
 * replaced by `placeholder`, oldest first, until at least `clearAtLeast` tokens are freed (0: all
 * of them), with `clearToolInputs` their calls' arguments too. Calls and results stay in pairs.
 * Only the request is edited, never the run's or the session's history. When something was
 * cleared: event `context-edited { cleared, tokensBefore, tokensAfter }`.
 *
 * Options and defaults: `trigger = { tokens: 100000 }`, `keep = { toolResults: 3 }`,
 * `clearAtLeast = 0`, `excludeTools = []`, `clearToolInputs = false`, `placeholder = '[cleared]'`,
 * `tokenCounter = approximateTokens` (characters / 4).
 *
 * @example
 * const agent = createAgent({ model, tools, middleware: [contextEditing({ trigger: { tokens: 50000 }, keep: { toolResults: 5 }, excludeTools: ['read_plan'] })] });
 */
export function contextEditing(options: ContextEditingOptions = {}): AgentMiddleware {
  checkOptions('contextEditing', options, OPTIONS); // no unknown option, none set to null
  const trigger = options.trigger ?? { tokens: 100000 };
  if (!trigger || typeof trigger !== 'object') throw new TypeError("contextEditing: 'trigger' must be an object { tokens }");
  checkNestedOptionNames('contextEditing', 'trigger', trigger, TRIGGER_OPTIONS);
  const triggerTokens = nonNegative('trigger.tokens', trigger.tokens);
  const keep = options.keep ?? { toolResults: 3 };
  if (!keep || typeof keep !== 'object') throw new TypeError("contextEditing: 'keep' must be an object { toolResults }");
  checkNestedOptionNames('contextEditing', 'keep', keep, KEEP_OPTIONS);
  if (!Number.isInteger(keep.toolResults) || keep.toolResults < 0) {
    throw new TypeError(`contextEditing: 'keep.toolResults' must be a non-negative integer, got ${String(keep.toolResults)}`);
  }
  const keepResults = keep.toolResults;
  const clearAtLeast = nonNegative('clearAtLeast', options.clearAtLeast ?? 0);
  const excludeTools = options.excludeTools ?? [];
  if (!Array.isArray(excludeTools) || excludeTools.some((n) => typeof n !== 'string')) {
    throw new TypeError("contextEditing: 'excludeTools' must be an array of tool names");
  }
  const excluded = new Set(excludeTools);
  const clearToolInputs = options.clearToolInputs ?? false;
  if (typeof clearToolInputs !== 'boolean') throw new TypeError("contextEditing: 'clearToolInputs' must be a boolean");
  const placeholder = options.placeholder ?? '[cleared]';
  if (typeof placeholder !== 'string') throw new TypeError("contextEditing: 'placeholder' must be a string");
  const tokenCounter = options.tokenCounter;
  if (tokenCounter !== undefined && typeof tokenCounter !== 'function') {
    throw new TypeError("contextEditing: 'tokenCounter' must be a function (messages) => number");
  }
  // Message sizes are remembered by this instance (derived data keyed by immutable messages, shared
  // by its runs by design, like a cache store), so each iteration measures only the new messages.
  const sizes = new WeakMap<Message, number>();
  const count = tokenCounter ?? ((messages: readonly Message[]) => Math.ceil(totalChars(messages, sizes) / 4));
  const placeholderChars = placeholder.length;

  /** The edited messages, or undefined when nothing is cleared. Runs once per model call. */
  const edit = (ctx: ModelCallContext): MonoTypeOperatorFunction<ModelUpdate> => {
    // The request's messages are the log's cached snapshot, which the model adapter reads anyway.
    const messages = ctx.request.messages;
    const tokensBefore = count(messages);
    if (!(tokensBefore > triggerTokens)) return (source) => source;

    const results: ResultAt[] = [];
    messages.forEach((message, m) => {
      if (message.role !== 'tool') return;
      message.content.forEach((part, p) => {
        if (part.type === 'tool-result' && !excluded.has(part.name)) results.push({ message: m, part: p });
      });
    });
    const candidates = results.slice(0, Math.max(0, results.length - keepResults));
    if (candidates.length === 0) return (source) => source;

    // Copies of the contents touched so far, by message index.
    const contents = new Map<number, ContentPart[]>();
    const contentOf = (m: number): ContentPart[] => {
      let content = contents.get(m);
      if (!content) contents.set(m, (content = messages[m].content.slice()));
      return content;
    };
    const build = (): Message[] => messages.map((message, m) => (contents.has(m) ? { ...message, content: contents.get(m) as ContentPart[] } : message));

    let chars = tokenCounter ? 0 : totalChars(messages, sizes);
    let tokensAfter = tokensBefore;
    let cleared = 0;
    for (const at of candidates) {
      const part = messages[at.message].content[at.part];
      if (part.type !== 'tool-result' || part.result === placeholder) continue;
      contentOf(at.message)[at.part] = { ...part, result: placeholder };
      chars += placeholderChars - lengthOf(part.result);
      if (clearToolInputs) chars -= clearInput(messages, contentOf, at.message, part.callId);
      cleared++;
      if (clearAtLeast > 0) {
        tokensAfter = tokenCounter ? count(build()) : Math.ceil(chars / 4);
        if (tokensBefore - tokensAfter >= clearAtLeast) break;
      }
    }
    if (cleared === 0) return (source) => source;
    const edited = build();
    if (clearAtLeast === 0) tokensAfter = tokenCounter ? count(edited) : Math.ceil(chars / 4);
    ctx.emit({ type: 'context-edited', cleared, tokensBefore, tokensAfter });
    const request = { ...ctx.request, messages: edited };
    return () => ctx.call(request);
  };

  return { name: 'contextEditing', wrapModel: edit };
}

/**
 * Replaces by `{}` the arguments of the call `callId` in the closest assistant message before
 * `before`; returns the characters freed.
 */
function clearInput(messages: readonly Message[], contentOf: (m: number) => ContentPart[], before: number, callId: string): number {
  for (let m = before - 1; m >= 0; m--) {
    if (messages[m].role !== 'assistant') continue;
    const p = messages[m].content.findIndex((part) => part.type === 'tool-call' && part.callId === callId);
    if (p < 0) continue;
    const copy = contentOf(m);
    const call = copy[p];
    if (call.type !== 'tool-call') return 0;
    copy[p] = { ...call, args: {} };
    return lengthOf(call.args) - 2;
  }
  return 0;
}
