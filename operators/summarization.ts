import { Observable, concatMap, defer, map, of, reduce } from 'rxjs';
import { z } from 'zod';
import { uniqueId } from '../src/internal/uniqueId';
import {
  ResponseAssembler,
  defineState,
  textMessage,
  textOf,
  type AgentMiddleware,
  type IterationContext,
  type Message,
  type ModelClient,
  type Usage,
} from '../src/index';
import { approximateTokens } from './internal/approximateTokens';
import { fillTemplate } from './internal/fillTemplate';
import { checkNestedOptionNames, checkOptions, optionNames } from './internal/checkOptions';

/** Options of {@link summarization}. */
export interface SummarizationOptions {
  /** The model that writes the summary (called directly: its output never reaches the run's events). */
  model: ModelClient;
  /** Summarise when the messages count more tokens, or are more messages, than this (either crossing triggers). */
  trigger: { tokens?: number; messages?: number };
  /** The most recent messages kept as they are (default `{ messages: 20 }`). */
  keep?: { messages: number };
  /** The prompt of the summarising call; `{messages}` is replaced by the transcript (appended when absent). */
  summaryPrompt?: string;
  /** Starts the summary message (default `'Here is a summary of the conversation to date:'`). */
  summaryPrefix?: string;
}

/** The keys of {@link SummarizationOptions}: any other is refused. */
const OPTIONS = optionNames<SummarizationOptions>({ model: true, trigger: true, keep: true, summaryPrompt: true, summaryPrefix: true });

/** The keys of `trigger` and of `keep`: any other is refused. */
const TRIGGER_OPTIONS = optionNames<SummarizationOptions['trigger']>({ tokens: true, messages: true });
const KEEP_OPTIONS = optionNames<NonNullable<SummarizationOptions['keep']>>({ messages: true });

/** The default `summaryPrompt`. */
export const DEFAULT_SUMMARY_PROMPT = `You are condensing the earlier part of a conversation between a user, an AI assistant and its tools, so that the assistant can go on with the task without the full history.

Write a concise summary that keeps what is needed to continue: the user's goals and requests, decisions made, important facts and results (names, numbers, identifiers, file paths), what has been done, and what remains open. Leave out pleasantries and repetition. Answer with the summary only.

The messages to summarise:
{messages}`;

const DEFAULT_PREFIX = 'Here is a summary of the conversation to date:';

function stringify(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** The messages as a plain transcript for the summarising model. */
function transcript(messages: readonly Message[]): string {
  const lines: string[] = [];
  for (const message of messages) {
    for (const part of message.content) {
      if (part.type === 'text') lines.push(`${message.role}: ${part.text}`);
      else if (part.type === 'tool-call') lines.push(`${message.role}: [call ${part.name}(${stringify(part.args)})]`);
      else if (part.type === 'tool-result') lines.push(`tool ${part.name}: ${stringify(part.result)}`);
    }
  }
  return lines.join('\n');
}

/**
 * Where the kept tail starts: `keep` messages from the end, moved back so the tail does not
 * start with a tool result whose call would be summarised away (moved forward past the
 * results instead when moving back would leave nothing to summarise). 0: nothing to summarise.
 */
function cutoffOf(messages: readonly Message[], keep: number): number {
  if (messages.length <= keep) return 0;
  const target = messages.length - keep;
  let cut = target;
  while (cut > 0 && messages[cut]?.role === 'tool') cut--;
  if (cut > 0) return cut;
  cut = target;
  while (cut < messages.length && messages[cut].role === 'tool') cut++;
  return cut;
}

function checkCount(name: string, value: unknown, optional: boolean): number | undefined {
  if (value === undefined && optional) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`summarization: '${name}' must be a non-negative integer, got ${String(value)}`);
  }
  return value;
}

/**
 * Summarises older messages when the conversation grows past a trigger (LangChain's
 * `SummarizationMiddleware`). Before each model call, when the messages count more than
 * `trigger.tokens` tokens (characters / 4, as `contextEditing` counts) or are more than
 * `trigger.messages` messages, every message but the `keep.messages` most recent is summarised by
 * `model` into one `user` message `summaryPrefix + '\n\n' + summary`, put at the start; the kept
 * tail never starts with a tool result whose call was summarised. The summary replaces the
 * summarised messages in the run's history and in the session. The summarising call is made
 * directly on `model`: its text never reaches the run's events; if it fails, the run fails. An
 * answer with no text, or one the model's filter stopped, summarises nothing: the messages stay as
 * they are, the model call goes ahead, and `summary-skipped { reason: 'no-text' |
 * 'content-filter' }` says so; the rest of that run does not ask the summary model again (the next
 * run does). The summary call's usage is reported (`ctx.reportUsage`): it counts in the run's usage,
 * `run-end.usage` and `costBudget`. Events `summarized { messagesBefore, messagesAfter }`, `summary-skipped`.
 *
 * Options: `model` (required), `trigger` (required: `{ tokens?, messages? }`, at least one),
 * `keep = { messages: 20 }`, `summaryPrompt = DEFAULT_SUMMARY_PROMPT` (`{messages}` is
 * replaced by the transcript), `summaryPrefix = 'Here is a summary of the conversation to date:'`.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   middleware: [summarization({ model: openAIChat({ client, model: 'gpt-4o-mini' }), trigger: { tokens: 4000 }, keep: { messages: 20 } })],
 * });
 */
export function summarization(options: SummarizationOptions): AgentMiddleware {
  checkOptions('summarization', options, OPTIONS, "with 'model' and 'trigger'"); // required: not an object, an unknown option, or one set to null
  const { model, trigger } = options;
  if (typeof model !== 'function') throw new TypeError("summarization: 'model' must be a ModelClient (request) => Observable<ModelUpdate>");
  if (!trigger || typeof trigger !== 'object') throw new TypeError("summarization: 'trigger' is required: { tokens?, messages? }");
  checkNestedOptionNames('summarization', 'trigger', trigger, TRIGGER_OPTIONS);
  const triggerTokens = checkCount('trigger.tokens', trigger.tokens, true);
  const triggerMessages = checkCount('trigger.messages', trigger.messages, true);
  if (triggerTokens === undefined && triggerMessages === undefined) {
    throw new TypeError("summarization: 'trigger' needs 'tokens' or 'messages'");
  }
  const keep = options.keep ?? { messages: 20 };
  if (!keep || typeof keep !== 'object') throw new TypeError("summarization: 'keep' must be an object { messages }");
  checkNestedOptionNames('summarization', 'keep', keep, KEEP_OPTIONS);
  const keepMessages = checkCount('keep.messages', keep.messages, false) as number;
  const summaryPrompt = options.summaryPrompt ?? DEFAULT_SUMMARY_PROMPT;
  if (typeof summaryPrompt !== 'string') throw new TypeError("summarization: 'summaryPrompt' must be a string");
  const summaryPrefix = options.summaryPrefix ?? DEFAULT_PREFIX;
  if (typeof summaryPrefix !== 'string') throw new TypeError("summarization: 'summaryPrefix' must be a string");

  // Set when this instance's summary model answered nothing usable: the run does not ask it again.
  // A key of its own, so a second summarization (another model) still asks its own.
  const Skipped = defineState({ key: uniqueId('rx-agent.summarization.skipped'), schema: z.boolean(), initial: () => false, scope: 'run' });

  const shouldSummarize = (messages: readonly Message[]): boolean =>
    (triggerMessages !== undefined && messages.length > triggerMessages) || (triggerTokens !== undefined && approximateTokens(messages) > triggerTokens);

  /** The summary's text, finish reason and usage, from one call to `model` (each subscription its own). */
  const summarize = (older: readonly Message[]): Observable<{ text: string; finish: string | undefined; usage: Usage | undefined }> =>
    defer(() => {
      const text = transcript(older);
      const prompt = summaryPrompt.includes('{messages}') ? fillTemplate(summaryPrompt, { messages: text }) : `${summaryPrompt}\n\n${text}`;
      return model({ messages: [textMessage('user', prompt)], tools: [], settings: {} }).pipe(
        reduce((answer, update) => (answer.add(update), answer), new ResponseAssembler()),
        map((answer) => ({ text: textOf(answer.message()), finish: answer.finishReason, usage: answer.usage })),
      );
    });

  const step = (ctx: IterationContext): Observable<IterationContext> => {
    if (ctx.termination || ctx.response || ctx.state(Skipped)) return of(ctx);
    const messages = ctx.messages;
    if (!shouldSummarize(messages)) return of(ctx);
    const cut = cutoffOf(messages, keepMessages);
    if (cut <= 0) return of(ctx);
    return summarize(messages.slice(0, cut)).pipe(
      map(({ text: summary, finish, usage }) => {
        if (usage) ctx.reportUsage(usage, { model: model.model, provider: model.provider }); // the summary's tokens are the run's too
        if (summary.trim() === '' || finish === 'content-filter') {
          // Replacing the history by nothing would lose it for good; failing the run would fail every
          // later run of the session the same way. The call goes ahead unsummarised.
          ctx.emit({ type: 'summary-skipped', reason: finish === 'content-filter' ? 'content-filter' : 'no-text' });
          return ctx.updateState(Skipped, () => true); // asking again in this run would cost a call per iteration for the same answer
        }
        const next = [textMessage('user', `${summaryPrefix}\n\n${summary}`), ...messages.slice(cut)];
        ctx.emit({ type: 'summarized', messagesBefore: messages.length, messagesAfter: next.length });
        return ctx.with({ messages: next });
      }),
    );
  };

  return { name: 'summarization', beforeIteration: concatMap(step) };
}
