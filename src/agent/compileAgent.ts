import { asyncScheduler, type SchedulerLike, type MonoTypeOperatorFunction } from 'rxjs';
import type { ModelClient, ModelSettings, ModelUpdate, ToolChoice, ToolSpec } from '../model/types';
import type { Tool } from '../tools/defineTool';
import type {
  ErrorContext,
  FunctionContext,
  FunctionResultContext,
  IterationContext,
  ModelCallContext,
  ToolBatchContext,
  TurnContext,
} from '../middleware/contexts';
import { hooksOf, type PhaseHook } from '../middleware/runPhase';
import { uniqueId } from '../internal/uniqueId';
import type { AgentMiddleware, ToolOutcome } from '../middleware/types';
import { isScheduler } from '../internal/isScheduler';
import { show } from '../internal/show';
import { checkDelayMs, checkTimeoutMs } from '../internal/timers';
import { isArray } from '../internal/isArray';
import { checkOptionsObject } from '../internal/optionNames';
import { AGENT_STORE_METHODS, JOURNAL_METHODS, type AgentStore, type LegacyAgentStore } from '../journal/store';
import { adaptSessionStore, isLegacySessionStore } from '../session/adaptSessionStore';
import { checkSessionWait } from '../session/claimSession';
import type { SessionStore } from '../session/sessionStore';
import type { StateDef } from '../state/defineState';
import type { z } from 'zod';
import { compileOutput, type CompiledOutput } from './compileOutput';
import { isTool } from '../tools/isTool';

/** What {@link createAgent} takes. */
export interface AgentOptions {
  /** A name for logs and events. */
  name?: string;
  /** The model every iteration calls (see `openAIChat`, or `scriptedModel` in tests). */
  model: ModelClient;
  instructions?: string;
  tools?: readonly Tool[];
  /** Middleware, in registration order: before-hooks run first to last, after-hooks last to first. */
  middleware?: readonly AgentMiddleware[];
  /** At most this many model calls in a turn (default 20). */
  maxIterations?: number;
  /** Runs every timer of the runtime and, by default, of the operators (default `asyncScheduler`). */
  scheduler?: SchedulerLike;
  /** `parallel` (default): a batch's calls run at once, results in the model's order. */
  toolExecution?: 'parallel' | 'sequential';
  settings?: ModelSettings;
  toolChoice?: ToolChoice;
  /** Makes run and request ids (default `crypto.randomUUID()`, prefixed). */
  idGenerator?: (prefix: string) => string;
  /**
   * Where runs are journaled (see `memoryStore()`): every run is then durable, and can be resumed,
   * answered, cancelled and followed by id from any process sharing the store. Without one,
   * nothing is journaled and nothing is paid for it.
   */
  store?: AgentStore | LegacyAgentStore;
  /**
   * How long a run's lease (and its session's) lasts without renewal, in ms from 1 to 2^31-1
   * (setTimeout's longest delay; default 30 000; renewed every third of it).
   */
  leaseMs?: number;
  /**
   * With a store: how long an event of a run may wait in the journal's buffer before it is written,
   * in ms (default 100; `Infinity`: not before the run writes for its own sake, at each tool call,
   * question and iteration end). What streams in between, an answer's text above all, reaches the
   * store in writes this far apart, so that `events()` in another process (a UI served by another
   * server) follows it as it streams; a write per event would cost a store round trip per token.
   */
  journalFlushMs?: number;
  /**
   * How long a run waits for another run to free its session, in ms (default 30 000; `Infinity`: no
   * limit), before it ends with an `error` event naming `SessionBusyError`. Per run:
   * `run(input, { sessionWaitMs })`.
   */
  sessionWaitMs?: number;
  /**
   * What a journaled run does when a middleware waits for an answer: `'wait'` (default) stays live
   * (an answer may come from any process, through the store); `'suspend'` journals the request and
   * ends with `run-end` reason `suspended`, to be resumed once answered. Per run: `run(input, { onRequest })`.
   */
  onRequest?: 'wait' | 'suspend';
  /**
   * Structured output: the final answer (the last assistant text, once the model calls no more
   * tools) must be JSON that fits this `z.object()` schema. The model is told the schema
   * (`ModelRequest.output`); `invoke()` resolves with the parsed `output` and `run-end` carries it.
   * Per run: `run(input, { output })`.
   */
  output?: z.ZodType;
  /**
   * How many more answers the model may give after one that does not fit `output` (default 1): it
   * reads what was wrong each time; then the run ends with an `OutputValidationError`.
   */
  outputRetries?: number;
}

interface Wrapper<C, T> {
  readonly middleware: string;
  readonly wrap: (ctx: C) => MonoTypeOperatorFunction<T>;
}

/** The agent's configuration, checked and arranged once for every run. */
export interface CompiledAgent {
  readonly name: string;
  readonly model: ModelClient;
  readonly instructions: string | undefined;
  readonly tools: readonly Tool[];
  /** The specs of `tools`, made once for every run. */
  readonly toolSpecs: readonly ToolSpec[];
  readonly maxIterations: number;
  readonly scheduler: SchedulerLike;
  readonly toolConcurrency: number;
  readonly settings: ModelSettings;
  readonly toolChoice: ToolChoice | undefined;
  readonly newId: (prefix: string) => string;
  readonly store: AgentStore | undefined;
  readonly leaseMs: number;
  readonly journalFlushMs: number;
  readonly sessionWaitMs: number;
  readonly onRequest: 'wait' | 'suspend';
  /** The agent's structured output, if it has one. */
  readonly output: CompiledOutput | undefined;
  /** The agent's `outputRetries` (for a run's own `output` too). */
  readonly outputRetries: number;
  /** This agent's id, the prefix of its runs' lease holders. */
  readonly owner: string;
  readonly hooks: {
    readonly beforeMessageTurn: PhaseHook<TurnContext>[];
    readonly beforeIteration: PhaseHook<IterationContext>[];
    readonly beforeToolExecution: PhaseHook<ToolBatchContext>[];
    readonly beforeFunction: PhaseHook<FunctionContext>[];
    readonly afterFunction: PhaseHook<FunctionResultContext>[];
    readonly afterIteration: PhaseHook<IterationContext>[];
    readonly afterMessageTurn: PhaseHook<TurnContext>[];
    readonly onError: PhaseHook<ErrorContext>[];
  };
  /** Outermost first. */
  readonly modelWrappers: readonly Wrapper<ModelCallContext, ModelUpdate>[];
  /** Outermost first. */
  readonly functionWrappers: readonly Wrapper<FunctionContext, ToolOutcome>[];
  /** Middleware that follow each run from its start (telemetry), in registration order. */
  readonly runObservers: readonly NonNullable<AgentMiddleware['observeRun']>[];
  /** The state definitions the middleware list (`AgentMiddleware.state`), by key: a run's `state` option sets the shared ones. */
  readonly states: ReadonlyMap<string, StateDef<unknown>>;
}

/** The hooks a middleware may have. */
const HOOKS = [
  'beforeMessageTurn',
  'beforeIteration',
  'wrapModel',
  'beforeToolExecution',
  'beforeFunction',
  'wrapFunction',
  'afterFunction',
  'afterIteration',
  'afterMessageTurn',
  'onError',
] as const satisfies ReadonlyArray<keyof AgentMiddleware>;

/** Checks the options of `createAgent` and arranges the hooks; throws a TypeError naming what is wrong. */
export function compileAgent(options: AgentOptions): CompiledAgent {
  checkOptionsObject('createAgent', options);
  const { model, middleware = [], tools = [], maxIterations = 20, toolExecution = 'parallel' } = options;
  if (typeof model !== 'function') {
    throw new TypeError("createAgent: 'model' must be a ModelClient: (request) => Observable<ModelUpdate>");
  }
  if (!isArray(middleware)) throw new TypeError("createAgent: 'middleware' must be an array");
  if (!isArray(tools)) throw new TypeError("createAgent: 'tools' must be an array of tools made with defineTool");
  if (!(maxIterations === Infinity || (Number.isInteger(maxIterations) && maxIterations >= 1))) {
    throw new TypeError(`createAgent: 'maxIterations' must be a positive integer or Infinity, got ${String(maxIterations)}`);
  }
  if (toolExecution !== 'parallel' && toolExecution !== 'sequential') {
    throw new TypeError(`createAgent: 'toolExecution' must be 'parallel' or 'sequential', got ${String(toolExecution)}`);
  }
  middleware.forEach((m, i) => {
    if (!m || typeof m !== 'object' || typeof m.name !== 'string' || m.name === '') {
      throw new TypeError(`createAgent: middleware at position ${i} needs a non-empty 'name'`);
    }
    // Checked here, not when a run first reaches the hook.
    for (const hook of HOOKS) {
      const value = m[hook];
      if (value != null && typeof value !== 'function') {
        const want = hook === 'wrapModel' || hook === 'wrapFunction' ? 'a function (ctx) => operator' : 'an operator (a function, e.g. map(...))';
        throw new TypeError(`createAgent: middleware '${m.name}': '${hook}' must be ${want}, got ${show(value)}`);
      }
    }
    if (m.tools != null && !isArray(m.tools)) {
      throw new TypeError(`createAgent: middleware '${m.name}': 'tools' must be an array of tools made with defineTool (tools: [myTool])`);
    }
  });
  const seen = new Set<string>();
  // A bad tool is named by its position in the list that holds it: the agent's `tools` or a middleware's.
  const checkTools = (list: readonly Tool[], where: string) =>
    list.forEach((tool, i) => {
      if (!isTool(tool)) {
        throw new TypeError(`createAgent: ${where}tool at position ${i} is not a tool; make tools with defineTool()`);
      }
      if (seen.has(tool.name)) throw new TypeError(`createAgent: two tools are named '${tool.name}'`);
      seen.add(tool.name);
    });
  checkTools(tools, '');
  for (const m of middleware) checkTools(m.tools ?? [], `middleware '${m.name}': `);
  const allTools = [...tools, ...middleware.flatMap((m) => m.tools ?? [])];
  const states = middlewareStates(middleware);
  const { idGenerator, instructions, toolChoice, settings, scheduler, name } = options;
  const bad = (option: string, want: string) => new TypeError(`createAgent: '${option}' must be ${want}`);
  if (idGenerator !== undefined && typeof idGenerator !== 'function') throw bad('idGenerator', 'a function (prefix) => string');
  if (instructions !== undefined && typeof instructions !== 'string') throw bad('instructions', 'a string');
  if (name !== undefined && typeof name !== 'string') throw bad('name', 'a string');
  if (settings !== undefined && (settings === null || typeof settings !== 'object')) throw bad('settings', 'an object');
  if (scheduler !== undefined && !isScheduler(scheduler)) throw bad('scheduler', 'an rxjs SchedulerLike');
  if (
    toolChoice !== undefined &&
    toolChoice !== 'auto' &&
    toolChoice !== 'none' &&
    toolChoice !== 'required' &&
    !(typeof toolChoice?.name === 'string' && seen.has(toolChoice.name))
  ) {
    throw bad('toolChoice', `'auto', 'none', 'required' or { name } of a tool, got ${show(toolChoice)}`);
  }
  const { leaseMs = 30_000, journalFlushMs = 100, onRequest = 'wait', sessionWaitMs = 30_000 } = options;
  let store = options.store;
  if (store !== undefined) {
    // A store of the earlier contract (sessions saved whole) keeps its journal; its sessions are adapted.
    if (isLegacySessionStore(store)) store = withSessions(store, adaptSessionStore(store));
    const missing =
      store === null || typeof store !== 'object'
        ? ['append']
        : AGENT_STORE_METHODS.filter((m) => typeof (store as unknown as Record<string, unknown>)[m] !== 'function');
    if (missing.length > 0) throw bad('store', `an AgentStore (e.g. memoryStore()); missing: ${missing.join(', ')}`);
  }
  // Renewed every third of it, and waited for at a suspension's end: a timer must hold it.
  checkDelayMs('createAgent', "'leaseMs'", leaseMs, 1);
  checkTimeoutMs('createAgent', "'journalFlushMs'", journalFlushMs);
  checkSessionWait('createAgent', sessionWaitMs);
  if (onRequest !== 'wait' && onRequest !== 'suspend') throw bad('onRequest', `'wait' or 'suspend', got ${show(onRequest)}`);
  const { outputRetries = 1 } = options;
  const output = options.output === undefined ? undefined : compileOutput(options.output, outputRetries, 'createAgent');
  if (output === undefined) compileOutputRetries(outputRetries);
  const newId = idGenerator ?? uniqueId;
  return {
    name: options.name ?? 'agent',
    model,
    instructions: options.instructions,
    tools: allTools,
    toolSpecs: allTools.map((tool) => tool.spec),
    maxIterations,
    scheduler: options.scheduler ?? asyncScheduler,
    toolConcurrency: toolExecution === 'parallel' ? Infinity : 1,
    settings: options.settings ?? {},
    toolChoice: options.toolChoice,
    newId,
    store,
    leaseMs,
    journalFlushMs,
    sessionWaitMs,
    onRequest,
    output,
    outputRetries,
    owner: uniqueId('agent'),
    hooks: {
      beforeMessageTurn: hooksOf(middleware, 'beforeMessageTurn'),
      beforeIteration: hooksOf(middleware, 'beforeIteration'),
      beforeToolExecution: hooksOf(middleware, 'beforeToolExecution'),
      beforeFunction: hooksOf(middleware, 'beforeFunction'),
      afterFunction: hooksOf(middleware, 'afterFunction'),
      afterIteration: hooksOf(middleware, 'afterIteration'),
      afterMessageTurn: hooksOf(middleware, 'afterMessageTurn'),
      onError: hooksOf(middleware, 'onError'),
    },
    modelWrappers: middleware.flatMap((m) => (m.wrapModel ? [{ middleware: m.name, wrap: m.wrapModel }] : [])),
    functionWrappers: middleware.flatMap((m) => (m.wrapFunction ? [{ middleware: m.name, wrap: m.wrapFunction }] : [])),
    runObservers: middleware.flatMap((m) => (m.observeRun ? [m.observeRun] : [])),
    states,
  };
}

/**
 * The state definitions the middleware list, by key. Two definitions of one key share its value,
 * so they must agree on its scope and on whether it is shared.
 */
function middlewareStates(middleware: readonly AgentMiddleware[]): ReadonlyMap<string, StateDef<unknown>> {
  const states = new Map<string, StateDef<unknown>>();
  for (const m of middleware) {
    const list = m.state;
    if (list == null) continue;
    if (!isArray(list)) throw new TypeError(`createAgent: middleware '${m.name}': 'state' must be an array of definitions made with defineState`);
    list.forEach((def, i) => {
      if (!def || typeof def.key !== 'string' || typeof def.initial !== 'function' || typeof def.schema?.safeParse !== 'function') {
        throw new TypeError(`createAgent: middleware '${m.name}': state at position ${i} is not a state definition; make them with defineState()`);
      }
      const known = states.get(def.key);
      if (known === undefined) return void states.set(def.key, def);
      if (known.scope !== def.scope || Boolean(known.shared) !== Boolean(def.shared)) {
        throw new TypeError(
          `createAgent: middleware '${m.name}': state '${def.key}' is defined twice, differently: ${describeState(known)}, then ${describeState(def)}`,
        );
      }
    });
  }
  return states;
}

function describeState(def: StateDef<unknown>): string {
  return `${def.shared ? 'shared' : 'not shared'} with scope '${def.scope}'`;
}

function compileOutputRetries(retries: unknown): void {
  if (!(typeof retries === 'number' && Number.isInteger(retries) && retries >= 0)) {
    throw new TypeError(`createAgent: 'outputRetries' must be an integer >= 0, got ${show(retries)}`);
  }
}

/** The journal methods of `store` (bound to it) with the session methods of `sessions`. */
function withSessions(store: object, sessions: SessionStore): AgentStore {
  const out: Record<string, unknown> = { ...sessions };
  for (const method of JOURNAL_METHODS) {
    const f = (store as Record<string, unknown>)[method];
    if (typeof f === 'function') out[method] = (f as (...args: unknown[]) => unknown).bind(store);
  }
  return out as unknown as AgentStore;
}
