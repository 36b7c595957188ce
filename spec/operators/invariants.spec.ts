import { Observable, Subject, takeUntil, tap, type Subscription } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineTool,
  InMemorySessionStore,
  mapContext,
  ModelError,
  type Agent,
  type AgentEvent,
  type AgentMiddleware,
  type AgentResponse,
  type Message,
  type ModelRequest,
  type RunHandle,
  type RunResult,
  type Session,
} from '../../src/index';
import {
  circuitBreaker,
  contextEditing,
  continuationPermission,
  costBudget,
  errorTracking,
  iterationGuidance,
  iterationLogging,
  lifecycleEvents,
  modelCallLimit,
  modelFallback,
  modelRetry,
  modelTimeout,
  permissions,
  piiRedaction,
  responseCache,
  skills,
  summarization,
  todoList,
  toolCallLimit,
  toolRetry,
  toolSelector,
  toolTimeout,
} from '../../operators/index';
import { eventLabel, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { Rng, fuzzSeeds } from '../support/random';
import { eventSequence } from '../support/eventSequence';

/*
 * Seeded random runs in virtual time for the operators that spec/agent/invariants.spec.ts leaves
 * out (modelFallback, errorTracking, responseCache, summarization, contextEditing, toolSelector,
 * skills, todoList, iterationGuidance, piiRedaction, lifecycleEvents, iterationLogging), mixed with
 * the others; several turns on one session (one object, or objects over an InMemorySessionStore);
 * and two or three runs of one agent at once. Each run is checked against the run contract, each
 * operator against what docs/guide/operators.md and its JSDoc say it does, and the runs against each other.
 *
 * A failing case names its seed; replay one with `FUZZ_SEED=<seed> npx jest spec/operators/invariants.spec.ts`
 * (`FUZZ_CASES=<n>` changes the number of cases per block).
 */

// ---------------------------------------------------------------------------------------------
// What a case is made of
// ---------------------------------------------------------------------------------------------

const EMAILS = ['ann@example.com', 'bob.k@mail.org'];
const CARDS = ['4111 1111 1111 1111', '5555-5555-5555-4444'];
const RAW_PII = [...EMAILS, ...CARDS];
const SUMMARY_PREFIX = 'Here is a summary of the conversation to date:';
const PLACEHOLDER = '[gone]';

type ToolKind = 'instant' | 'delayed' | 'throw' | 'never' | 'pii' | 'fail';
const TOOL_NAMES = ['t0', 't1', 't2'] as const;

type Op =
  | 'modelFallback'
  | 'errorTracking'
  | 'responseCache'
  | 'summarization'
  | 'contextEditing'
  | 'toolSelector'
  | 'skills'
  | 'todoList'
  | 'iterationGuidance'
  | 'piiRedaction'
  | 'lifecycleEvents'
  | 'iterationLogging'
  | 'modelRetry'
  | 'modelTimeout'
  | 'toolRetry'
  | 'toolTimeout'
  | 'permissions'
  | 'toolCallLimit'
  | 'modelCallLimit'
  | 'circuitBreaker'
  | 'continuationPermission'
  | 'costBudget';

const NEW_OPS: readonly Op[] = [
  'modelFallback',
  'errorTracking',
  'responseCache',
  'summarization',
  'contextEditing',
  'toolSelector',
  'skills',
  'todoList',
  'iterationGuidance',
  'piiRedaction',
  'lifecycleEvents',
  'iterationLogging',
];
const OLD_OPS: readonly Op[] = [
  'modelRetry',
  'modelTimeout',
  'toolRetry',
  'toolTimeout',
  'permissions',
  'toolCallLimit',
  'modelCallLimit',
  'circuitBreaker',
  'continuationPermission',
  'costBudget',
];

interface Mw {
  name: Op;
  options: Record<string, unknown>;
}

interface ToolCallPlan {
  name: string;
  args: unknown;
  callId: string;
}
interface TurnPlan {
  text?: string[];
  toolCalls?: ToolCallPlan[];
  usage?: { inputTokens: number; outputTokens: number };
  error?: { retryAfterMs?: number };
  errorAfter?: number;
  delay: number;
}

type CancelKind = 'none' | 'signal' | 'handle' | 'unsubscribe';
interface CancelPlan {
  kind: CancelKind;
  at: { time: number } | { event: number } | { request: number };
}

/** One run: how it is driven, answered and cancelled. */
interface LaneSpec {
  tag: string;
  input: string;
  driver: 'run' | 'start' | 'invoke';
  channel: 'subject' | 'handle';
  person: 'random' | 'silent';
  /** Answers may carry `remember` (not for invoke, whose requests are seen by id only). */
  remember: boolean;
  cancel: CancelPlan;
  /** Virtual ms after the block starts. */
  startAt: number;
  runId?: string;
  session?: Session;
}

/** An agent's configuration, shared by every run of a case. */
interface AgentSpec {
  seed: number;
  middleware: Mw[];
  maxIterations: number;
  toolExecution: 'parallel' | 'sequential';
  needsApproval: Record<string, boolean>;
  /** Plans per model ('primary', 'fb1', 'fb2') and per tag. */
  plans: Record<string, Record<string, TurnPlan[]>>;
  /** What the summary and selector models answer, per call. */
  summaryAnswers: Array<'text' | 'empty' | 'error'>;
  selectorAnswers: Array<'good' | 'unknown' | 'bad' | 'fenced' | 'error'>;
  /** The tools a turn has (before toolSelector). */
  turnTools: string[];
}

const has = (a: AgentSpec, name: Op) => a.middleware.some((m) => m.name === name);
const optionsOf = (a: AgentSpec, name: Op) => a.middleware.find((m) => m.name === name)?.options;

// ---------------------------------------------------------------------------------------------
// Drawing a case
// ---------------------------------------------------------------------------------------------

/** Where an operator goes: documented orders are kept (lifecycleEvents first, permissions after toolCallLimit, …). */
function rankOf(rng: Rng, name: Op): number {
  switch (name) {
    case 'lifecycleEvents':
      return 0;
    case 'iterationLogging':
      return 1;
    case 'modelFallback':
    case 'modelRetry':
      return 2 + rng.next();
    case 'piiRedaction':
      return 3.5;
    case 'toolCallLimit':
      return 4;
    case 'permissions':
      return 4.5;
    case 'skills':
    case 'todoList':
    case 'iterationGuidance':
    case 'summarization':
      return 5 + rng.next();
    case 'responseCache':
      return 6.5;
    default:
      return 2 + rng.next() * 6;
  }
}

function drawMiddleware(rng: Rng, pool: readonly Op[], must: readonly Op[], p: number, maxIterations: number): Mw[] {
  const chosen = pool.filter((name) => must.includes(name) || rng.chance(p));
  const ranked = chosen.map((name) => ({ name, rank: rankOf(rng, name) })).sort((a, b) => a.rank - b.rank);
  return ranked.map(({ name }) => ({ name, options: drawOptions(rng, name, maxIterations) }));
}

function drawOptions(rng: Rng, name: Op, maxIterations: number): Record<string, unknown> {
  const requestTimeouts = [40, 150, 500];
  switch (name) {
    case 'modelFallback':
      return { fallbacks: rng.int(1, 2) };
    case 'errorTracking':
      return { maxConsecutiveErrors: rng.int(1, 3) };
    case 'responseCache':
      return { ttl: rng.pick([30, 400, 600000]) };
    case 'summarization':
      return { trigger: rng.chance(0.6) ? { messages: rng.int(2, 8) } : { tokens: rng.int(15, 120) }, keep: { messages: rng.int(1, 4) } };
    case 'contextEditing':
      return {
        trigger: { tokens: rng.int(5, 120) },
        keep: { toolResults: rng.int(0, 2) },
        clearAtLeast: rng.pick([0, 0, 5]),
        clearToolInputs: rng.chance(0.4),
        placeholder: PLACEHOLDER,
        ...(rng.chance(0.3) ? { excludeTools: ['t1'] } : {}),
      };
    case 'toolSelector':
      return { maxTools: rng.int(1, 3), minToolsToTrigger: rng.int(0, 4), alwaysInclude: rng.chance(0.5) ? ['t0'] : [] };
    case 'skills':
    case 'todoList':
    case 'lifecycleEvents':
      return {};
    case 'iterationGuidance':
      return { maxIterations, warnWithin: rng.int(0, 3) };
    case 'piiRedaction':
      return {
        rules: { email: rng.pick(['redact', 'mask', 'hash']), creditCard: rng.pick(['redact', 'mask', 'block']) },
        applyToInput: rng.chance(0.7),
        applyToOutput: rng.chance(0.6),
        applyToToolResults: rng.chance(0.6),
      };
    case 'iterationLogging':
      return { level: rng.pick(['info', 'debug', 'trace']) };
    case 'modelRetry':
      return {
        maxRetries: rng.int(0, 3),
        initialDelayMs: rng.int(1, 50),
        maxDelayMs: 200,
        jitter: rng.chance(0.5) ? 0 : 0.25,
        onFailure: rng.pick(['error', 'continue']),
      };
    case 'modelTimeout':
      return { firstTokenMs: rng.int(30, 300), idleMs: rng.int(30, 300), ...(rng.chance(0.3) ? { totalMs: rng.int(50, 600) } : {}) };
    case 'toolRetry':
      return { maxRetries: rng.int(0, 2), initialDelayMs: rng.int(1, 30), jitter: 0 };
    case 'toolTimeout':
      return { ms: rng.int(10, 200) };
    case 'permissions':
      return { timeout: rng.pick(requestTimeouts), ...(rng.chance(0.2) ? { tools: { t2: 'deny' } } : {}) };
    case 'toolCallLimit': {
      const runLimit = rng.int(1, 5);
      return {
        runLimit,
        ...(rng.chance(0.4) ? { threadLimit: runLimit + rng.int(0, 3) } : {}),
        ...(rng.chance(0.3) ? { toolName: rng.pick(TOOL_NAMES) } : {}),
        exitBehavior: rng.pick(['continue', 'end', 'error']),
      };
    }
    case 'modelCallLimit':
      return { runLimit: rng.int(1, 6), ...(rng.chance(0.4) ? { threadLimit: rng.int(2, 9) } : {}), exitBehavior: rng.pick(['end', 'error']) };
    case 'circuitBreaker':
      return { maxConsecutiveCalls: rng.int(2, 3) };
    case 'continuationPermission':
      return { maxIterations: rng.int(1, 4), extensionAmount: rng.int(1, 2), timeout: rng.pick(requestTimeouts) };
    case 'costBudget':
      return { maxCost: rng.pick([0.05, 0.2, 0.5, 1, 2]), pricing: { inputPerToken: 0.001, outputPerToken: 0.002 } };
  }
}

const TEXTS: string[][] = [
  ['Done', '.'],
  ['Hel', 'lo'],
  ['Mail an', 'n@exam', 'ple.com', ' today'],
  ['Write to bob.k', '@mail.', 'org now'],
  ['Card 4111 11', '11 1111 ', '1111 ok'],
  ['Pay with 5555-5555-5555-4444', '.'],
  ['Both: ann@example.com', ' and 4111 1111 1111 1111'],
];

function drawPlan(rng: Rng, prefix: string, canEndNever: boolean, extraTools: string[], length = 40): TurnPlan[] {
  const kinds: ToolKind[] = canEndNever
    ? ['instant', 'instant', 'delayed', 'delayed', 'throw', 'never', 'pii', 'fail']
    : ['instant', 'instant', 'delayed', 'delayed', 'throw', 'pii', 'fail'];
  const plan: TurnPlan[] = [];
  for (let i = 0; i < length; i++) {
    const r = rng.next();
    const delay = rng.chance(0.5) ? 0 : rng.chance(0.8) ? rng.int(1, 40) : rng.int(100, 700);
    const usage = rng.chance(0.7) ? { inputTokens: rng.int(10, 100), outputTokens: rng.int(5, 50) } : undefined;
    const text = rng.chance(0.35) ? rng.pick(TEXTS) : undefined;
    const toolCalls = (n: number): ToolCallPlan[] =>
      Array.from({ length: n }, (_, j) => {
        const callId = `${prefix}${i}_${j}`;
        const name = rng.chance(0.03) ? 'nope' : rng.chance(0.25) && extraTools.length > 0 ? rng.pick(extraTools) : rng.pick(TOOL_NAMES);
        if (name === 'activate_skill') return { name, args: { name: rng.pick(['calc', 'calc', 'ghost']) }, callId };
        if (name === 'write_todos') {
          return {
            name,
            args: rng.chance(0.8) ? { todos: [{ content: `step ${i}`, status: rng.pick(['pending', 'in_progress', 'completed']) }] } : { todos: 'all' },
            callId,
          };
        }
        const k = rng.pick(kinds);
        return { name, args: { k, d: k === 'delayed' || k === 'never' ? rng.pick([1, 5, 20, 80, 300]) : 0 }, callId };
      });
    if (r < 0.3) {
      plan.push({ text: text ?? ['Done', '.'], usage, delay });
    } else if (r < 0.85) {
      plan.push({ text, toolCalls: toolCalls(rng.int(1, 3)), usage, delay });
    } else {
      const calls = rng.chance(0.4) ? toolCalls(rng.int(1, 2)) : undefined;
      const updates = (text?.length ?? 0) + 2 * (calls?.length ?? 0) + (usage ? 1 : 0);
      plan.push({
        text,
        toolCalls: calls,
        usage,
        error: rng.chance(0.3) ? { retryAfterMs: rng.int(1, 100) } : {},
        errorAfter: rng.chance(0.5) ? rng.int(0, updates) : undefined,
        delay,
      });
    }
  }
  return plan;
}

function drawAgent(rng: Rng, seed: number, middleware: Mw[], tags: string[], canEndNever: boolean): AgentSpec {
  const maxIterations = middleware.some((m) => m.name === 'continuationPermission') ? rng.int(3, 10) : rng.int(2, 8);
  for (const m of middleware) if (m.name === 'iterationGuidance') m.options.maxIterations = maxIterations;
  const extraTools = [
    ...(middleware.some((m) => m.name === 'skills') ? ['activate_skill', 'sk0'] : []),
    ...(middleware.some((m) => m.name === 'todoList') ? ['write_todos'] : []),
  ];
  const plans: AgentSpec['plans'] = { primary: {}, fb1: {}, fb2: {} };
  for (const tag of tags) {
    plans.primary[tag] = drawPlan(rng, `${tag}p`, canEndNever, extraTools);
    plans.fb1[tag] = drawPlan(rng, `${tag}f`, canEndNever, extraTools, 20);
    plans.fb2[tag] = drawPlan(rng, `${tag}g`, canEndNever, extraTools, 20);
  }
  return {
    seed,
    middleware,
    maxIterations,
    toolExecution: rng.chance(0.25) ? 'sequential' : 'parallel',
    needsApproval: Object.fromEntries(TOOL_NAMES.map((name) => [name, rng.chance(0.6)])),
    plans,
    summaryAnswers: Array.from({ length: 30 }, () => rng.pick(['text', 'text', 'text', 'text', 'empty', 'error'] as const)),
    selectorAnswers: Array.from({ length: 30 }, () => rng.pick(['good', 'good', 'unknown', 'bad', 'fenced', 'error'] as const)),
    turnTools: [
      ...TOOL_NAMES,
      ...(middleware.some((m) => m.name === 'skills') ? ['activate_skill'] : []),
      ...(middleware.some((m) => m.name === 'todoList') ? ['write_todos'] : []),
    ],
  };
}

function drawCancel(rng: Rng, driver: LaneSpec['driver'], kinds?: CancelKind[]): CancelPlan {
  const pool: CancelKind[] =
    kinds ??
    (driver === 'run' ? ['none', 'none', 'signal', 'unsubscribe'] : driver === 'start' ? ['none', 'none', 'signal', 'handle'] : ['none', 'none', 'signal']);
  const kind = rng.pick(pool);
  const r = rng.next();
  const at =
    driver === 'invoke' || r < 0.5 ? { time: rng.int(0, 700) } : r < 0.8 ? { event: rng.int(0, 25) } : { request: rng.chance(0.3) ? -1 : rng.int(0, 60) };
  return { kind, at };
}

function inputFor(rng: Rng, tag: string, extra = ''): string {
  const pii = rng.chance(0.3) ? ` mail ${rng.pick(EMAILS)}` : '';
  const card = rng.chance(0.1) ? ` card ${rng.pick(CARDS)}` : '';
  return `go[${tag}]${extra}${pii}${card}`;
}

// ---------------------------------------------------------------------------------------------
// The world: models, tools and agent of a case, and what they saw
// ---------------------------------------------------------------------------------------------

interface Execution {
  runId: string;
  callId: string;
  tool: string;
  kind: string;
  iteration: number;
  startedAt: number;
  finished: boolean;
  abortedAt?: number;
  signal: AbortSignal;
}

interface SeenRequest {
  model: 'primary' | 'fb1' | 'fb2' | 'summary' | 'selector';
  tag: string;
  seq: number;
  request: ModelRequest;
}

interface World {
  ts: TestScheduler;
  agent: Agent;
  spec: AgentSpec;
  executions: Execution[];
  requests: SeenRequest[];
  logLines: string[];
  /** (runId, iteration, whether a model call was made) of every iteration that got through afterIteration. */
  finishedIterations: Array<{ runId: string; iteration: number; modelCalled: boolean }>;
  /** A clock of everything observed (events and model requests), to order them across runs. */
  seq: number;
  /** Called for every id the agent makes. */
  onId?: (prefix: string, id: string) => void;
  own: Set<unknown>;
  runIds: Set<string>;
  summaryCalls: number;
  selectorCalls: number;
}

const TAG = /(?:go|SUMMARY)\[(\w+)\]/;

function tagOf(request: ModelRequest): string {
  for (const m of request.messages) {
    if (m.role !== 'user') continue;
    for (const part of m.content) {
      if (part.type !== 'text') continue;
      const match = TAG.exec(part.text);
      if (match) return match[1];
    }
  }
  return '?';
}

function toTurn(p: TurnPlan | undefined): ScriptedTurn {
  if (!p) return { text: 'Out of script.', delay: 1 };
  return {
    ...(p.text ? { text: p.text } : {}),
    ...(p.toolCalls ? { toolCalls: p.toolCalls } : {}),
    ...(p.usage ? { usage: p.usage } : {}),
    ...(p.error ? { error: new ModelError('overloaded', { status: 503, retryable: true, retryAfterMs: p.error.retryAfterMs }) } : {}),
    ...(p.errorAfter !== undefined ? { errorAfter: p.errorAfter } : {}),
    delay: p.delay,
  };
}

function buildWorld(spec: AgentSpec): World {
  const ts = new TestScheduler((a, b) => expect(a).toEqual(b));
  const world = {
    ts,
    spec,
    executions: [],
    requests: [],
    logLines: [],
    finishedIterations: [],
    seq: 0,
    own: new Set(),
    runIds: new Set(),
    summaryCalls: 0,
    selectorCalls: 0,
  } as unknown as World;
  const jitter = new Rng(spec.seed ^ 0x85ebca6b);
  const counters = new Map<string, number>();

  const planned =
    (model: 'primary' | 'fb1' | 'fb2') =>
    (request: ModelRequest): ScriptedTurn => {
      const tag = tagOf(request);
      world.requests.push({ model, tag, seq: world.seq++, request });
      const key = `${model}:${tag}`;
      const n = counters.get(key) ?? 0;
      counters.set(key, n + 1);
      return toTurn(spec.plans[model][tag]?.[n]);
    };
  const primary = scriptedModel([planned('primary')], { loop: true, scheduler: ts });
  const fb1 = scriptedModel([planned('fb1')], { loop: true, scheduler: ts });
  const fb2 = scriptedModel([planned('fb2')], { loop: true, scheduler: ts });

  const summaryModel = scriptedModel(
    [
      (request): ScriptedTurn => {
        const tag = tagOf(request);
        world.requests.push({ model: 'summary', tag, seq: world.seq++, request });
        const answer = spec.summaryAnswers[world.summaryCalls++ % spec.summaryAnswers.length];
        if (answer === 'error') return { error: new ModelError('summary model down', { status: 400, retryable: false }), delay: 3 };
        if (answer === 'empty') return { text: [], delay: 2 };
        return { text: [`SUMMARY[${tag}] `, `part ${world.summaryCalls}`], delay: rngDelay(world.summaryCalls) };
      },
    ],
    { loop: true, scheduler: ts },
  );
  const selectorModel = scriptedModel(
    [
      (request): ScriptedTurn => {
        world.requests.push({ model: 'selector', tag: '?', seq: world.seq++, request });
        const answer = spec.selectorAnswers[world.selectorCalls++ % spec.selectorAnswers.length];
        const pickTwo = world.selectorCalls % 2 ? ['t1', 't2'] : ['t2', 'activate_skill', 'write_todos'];
        switch (answer) {
          case 'good':
            return { text: JSON.stringify({ tools: pickTwo }), delay: 2 };
          case 'unknown':
            return { text: ['{"tools": ["t1", "zzz"', ', "t0"]}'], delay: 1 };
          case 'fenced':
            return { text: '```json\n{"tools": ["t2"]}\n```', delay: 0 };
          case 'bad':
            return { text: ['{"tools": [t1', ' oops'], delay: 1 };
          case 'error':
            return { error: new ModelError('selector down', { status: 400, retryable: false }) };
        }
      },
    ],
    { loop: true, scheduler: ts },
  );

  const argsSchema = z.object({ k: z.enum(['instant', 'delayed', 'throw', 'never', 'pii', 'fail']), d: z.number() });
  const makeTool = (name: string, needsApproval: boolean) =>
    defineTool({
      name,
      description: `tool ${name}`,
      parameters: argsSchema,
      needsApproval,
      execute: ({ k, d }, ctx) => {
        const exec: Execution = {
          runId: ctx.runId,
          callId: ctx.callId,
          tool: name,
          kind: k,
          iteration: ctx.iteration,
          startedAt: ts.now(),
          finished: false,
          signal: ctx.signal,
        };
        ctx.signal.addEventListener('abort', () => (exec.abortedAt ??= ts.now()));
        world.executions.push(exec);
        switch (k) {
          case 'instant':
            exec.finished = true;
            return `${name} done`;
          case 'fail':
            exec.finished = true;
            return `Failed: ${name} could not`;
          case 'pii':
            exec.finished = true;
            return d % 2 === 0 ? { contact: 'ann@example.com', note: 'card 5555-5555-5555-4444', nested: ['bob.k@mail.org'] } : 'owner is bob.k@mail.org';
          case 'throw':
            exec.finished = true;
            throw new Error(`${name} failed for ann@example.com`);
          case 'delayed':
            return new Observable<string>((subscriber) =>
              ts.schedule(() => {
                exec.finished = true;
                subscriber.next(`${name} done after ${d}`);
                subscriber.complete();
              }, d),
            );
          case 'never':
            return new Observable<string>(() => undefined);
        }
      },
    });
  const tools = TOOL_NAMES.map((name) => makeTool(name, spec.needsApproval[name]));
  const sk0 = makeTool('sk0', false);

  const probe: AgentMiddleware = {
    name: 'probe',
    afterIteration: mapContext((ctx) => {
      world.finishedIterations.push({ runId: ctx.runId, iteration: ctx.iteration, modelCalled: !ctx.modelCallSkipped && ctx.response !== undefined });
      return ctx;
    }),
  };
  const logger = {
    info: (line: string) => world.logLines.push(`info ${line}`),
    debug: (line: string) => world.logLines.push(`debug ${line}`),
    trace: (line: string) => world.logLines.push(`trace ${line}`),
  };

  const middleware: AgentMiddleware[] = [probe];
  for (const { name, options } of spec.middleware) {
    const o = options as never;
    switch (name) {
      case 'modelFallback':
        middleware.push(options.fallbacks === 2 ? modelFallback(fb1, fb2) : modelFallback(fb1));
        break;
      case 'errorTracking':
        middleware.push(errorTracking(o));
        break;
      case 'responseCache':
        middleware.push(responseCache(o)); // one instance: shared by every run of this agent
        break;
      case 'summarization':
        middleware.push(summarization({ model: summaryModel, ...(options as object), summaryPrefix: SUMMARY_PREFIX } as never));
        break;
      case 'contextEditing':
        middleware.push(contextEditing(o));
        break;
      case 'toolSelector':
        middleware.push(toolSelector({ model: selectorModel, ...(options as object) }));
        break;
      case 'skills':
        middleware.push(skills({ skills: [{ name: 'calc', description: 'Calculations', instructions: 'SKILL-CALC: use sk0.', tools: [sk0] }] }));
        break;
      case 'todoList':
        middleware.push(todoList());
        break;
      case 'iterationGuidance':
        middleware.push(
          iterationGuidance({
            ...(options as object),
            firstIteration: 'GUIDE-FIRST',
            afterTools: (n) => `GUIDE-AFTER(${n})`,
            warning: (r) => `GUIDE-WARN(${r})`,
          }),
        );
        break;
      case 'piiRedaction':
        middleware.push(piiRedaction(o));
        break;
      case 'lifecycleEvents':
        middleware.push(lifecycleEvents());
        break;
      case 'iterationLogging':
        middleware.push(iterationLogging({ ...(options as object), logger }));
        break;
      case 'modelRetry':
        middleware.push(modelRetry({ ...(options as object), random: jitter.next, scheduler: ts }));
        break;
      case 'modelTimeout':
        // Exact: a sampled check is shared by the instance's calls and stops in a microtask, after the synchronous check that nothing is left on the clock.
        middleware.push(modelTimeout({ ...(options as object), idleCheck: 'exact', scheduler: ts }));
        break;
      case 'toolRetry':
        middleware.push(toolRetry({ ...(options as object), scheduler: ts }));
        break;
      case 'toolTimeout':
        middleware.push(toolTimeout({ ...(options as object), scheduler: ts }));
        break;
      case 'permissions':
        middleware.push(permissions({ ...(options as object), scheduler: ts }));
        break;
      case 'toolCallLimit':
        middleware.push(toolCallLimit(o));
        break;
      case 'modelCallLimit':
        middleware.push(modelCallLimit(o));
        break;
      case 'circuitBreaker':
        middleware.push(circuitBreaker(o));
        break;
      case 'continuationPermission':
        middleware.push(continuationPermission({ ...(options as object), scheduler: ts }));
        break;
      case 'costBudget':
        middleware.push(costBudget(o));
        break;
    }
  }
  let ids = 0;
  world.agent = createAgent({
    model: primary,
    tools,
    middleware,
    maxIterations: spec.maxIterations,
    toolExecution: spec.toolExecution,
    scheduler: ts,
    idGenerator: (prefix) => {
      const id = `${prefix}_${spec.seed}_${ids++}`;
      world.onId?.(prefix, id);
      return id;
    },
  });
  return world;
}

function rngDelay(n: number): number {
  return n % 3 === 0 ? 0 : n % 3 === 1 ? 2 : 15;
}

// ---------------------------------------------------------------------------------------------
// Running lanes (runs of one agent, maybe at once) in virtual time
// ---------------------------------------------------------------------------------------------

interface LaneObs {
  spec: LaneSpec;
  events: Array<{ t: number; seq: number; e: AgentEvent }>;
  startSeq: number;
  endSeq: number;
  startedAt: number;
  completed: boolean;
  observableError: unknown;
  cancelledAt?: number;
  cancelledTime?: number;
  cancelledHow?: CancelKind;
  maybeCancelled?: { at: number; time: number; how: CancelKind };
  leftEarly: boolean;
  leftTime?: number;
  responses: Array<{ requestId: string; t: number; eventIndex: number; open: boolean; approved: boolean; accepted?: boolean; remember?: 'always' | 'never' }>;
  /** What another run's handle said to this run's requests. */
  crossAccepted: boolean[];
  runEndAt?: number;
  strangerAccepted?: boolean;
  /** invoke(): how its promise settled. */
  result?: { ok: true; value: RunResult } | { ok: false; error: unknown };
  handle?: RunHandle;
  responses$: Subject<AgentResponse>;
  ended: boolean;
}

interface BlockObs {
  lanes: LaneObs[];
  stuck: boolean;
  leakedTimers: number[];
  wallClockTimers: number;
}

const HORIZON = 50_000_000;

function requestTimeout(a: AgentSpec, type: string): number | undefined {
  const owner = type === 'permission-request' ? 'permissions' : type === 'continuation-request' ? 'continuationPermission' : undefined;
  return owner ? (optionsOf(a, owner)?.timeout as number | undefined) : undefined;
}

/** Runs the lanes of a block to their ends (each from its `startAt`, relative to now) and records them. */
function runLanes(world: World, specs: LaneSpec[], personSeed: number): BlockObs {
  const { ts, spec: a } = world;
  const personRng = new Rng(personSeed ^ 0x9e3779b9);
  const base = ts.now();
  const later = (work: () => void, delay: number) => world.own.add(ts.schedule(work, delay));
  const lanes: LaneObs[] = specs.map((s) => ({
    spec: s,
    events: [],
    startSeq: -1,
    endSeq: Number.MAX_SAFE_INTEGER,
    startedAt: -1,
    completed: false,
    observableError: undefined,
    leftEarly: false,
    responses: [],
    crossAccepted: [],
    responses$: new Subject<AgentResponse>(),
    ended: false,
  }));
  const setTimeoutSpy = jest.spyOn(globalThis, 'setTimeout');
  const setIntervalSpy = jest.spyOn(globalThis, 'setInterval');
  let wallClockTimers = 0;
  let stuck = false;
  let leakedTimers: number[] = [];
  try {
    for (const lane of lanes) later(() => launch(lane), lane.spec.startAt);

    function launch(lane: LaneObs): void {
      const s = lane.spec;
      lane.startSeq = world.seq++;
      lane.startedAt = ts.now();
      const controller = new AbortController();
      const stop$ = new Subject<void>();
      let subscription: Subscription | undefined;
      const truth: AgentEvent[] = [];
      const happened = (): readonly AgentEvent[] => (s.driver === 'start' ? truth : lane.events.map(({ e }) => e));
      const runEnded = () => happened().some((e) => e.type === 'run-end');
      const closed = new Set<string>();
      const open = (requestId: string) =>
        !closed.has(requestId) &&
        !runEnded() &&
        happened().some((e) => 'requestId' in e && e.requestId === requestId && e.type.endsWith('-request')) &&
        !happened().some((e) => e.type === 'request-expired' && e.requestId === requestId);
      const finish = () => {
        if (!lane.ended) lane.endSeq = world.seq++;
        lane.ended = true;
      };

      const doCancel = () => {
        if (lane.ended || runEnded() || lane.cancelledAt !== undefined || lane.leftEarly) return;
        const kind = s.cancel.kind;
        const failing = lane.events.some(({ e }) => e.type === 'error');
        if (kind === 'unsubscribe') {
          lane.leftEarly = true;
          lane.leftTime = ts.now();
          finish();
          if (subscription) subscription.unsubscribe();
          else stop$.next();
          return;
        }
        // agent-run-completed { success: false } may come from an onError hook: the run is failing
        // already, and a cancel then ends it with its error (docs/guarantees.md: hooks on cancel and error).
        const last = happened().at(-1);
        if (!failing && last?.type === 'agent-run-completed' && !last.success) {
          lane.maybeCancelled = { at: happened().length, time: ts.now(), how: kind };
        } else if (!failing) {
          lane.cancelledAt = happened().length;
          lane.cancelledTime = ts.now();
          lane.cancelledHow = kind;
        }
        if (kind === 'signal') controller.abort();
        else if (kind === 'handle') lane.handle?.cancel();
      };

      const responseTo = (request: AgentEvent & { requestId: string }, approved: boolean, remember: boolean): AgentResponse =>
        request.type === 'continuation-request'
          ? { type: 'continuation-response', requestId: request.requestId, approved, ...(personRng.chance(0.3) ? { extension: personRng.int(1, 2) } : {}) }
          : {
              type: 'permission-response',
              requestId: request.requestId,
              approved,
              ...(remember && personRng.chance(0.3) ? { remember: personRng.pick(['always', 'never'] as const) } : {}),
              ...(!approved && personRng.chance(0.3) ? { reason: 'not today' } : {}),
            };

      const answer = (request: AgentEvent & { requestId: string }) => {
        // Another run's channels first: they must not reach this run.
        for (const other of lanes) {
          if (other === lane || !personRng.chance(0.5)) continue;
          const wrong = responseTo(request, personRng.chance(0.5), false);
          if (other.handle) lane.crossAccepted.push(other.handle.respond(wrong));
          else other.responses$.next(wrong);
        }
        const decision = personRng.pick(['approve', 'approve', 'approve', 'deny', 'never', 'late'] as const);
        if (decision === 'never') return;
        const timeout = requestTimeout(a, request.type) ?? 1000;
        const approved = decision === 'approve' || (decision === 'late' && personRng.chance(0.5));
        const response = responseTo(request, approved, s.remember);
        const send = () => {
          const wasOpen = open(request.requestId);
          const record: LaneObs['responses'][number] = {
            requestId: request.requestId,
            t: ts.now(),
            eventIndex: happened().length,
            open: wasOpen,
            approved,
            ...(response.type === 'permission-response' && response.remember ? { remember: response.remember } : {}),
          };
          lane.responses.push(record);
          if (s.channel === 'handle' && lane.handle) record.accepted = lane.handle.respond(response);
          else lane.responses$.next(response);
          if (wasOpen) closed.add(request.requestId);
          if (s.channel === 'handle' && lane.handle && personRng.chance(0.2)) {
            lane.responses.push({
              requestId: request.requestId,
              t: ts.now(),
              eventIndex: happened().length,
              open: false,
              approved,
              accepted: lane.handle.respond(response),
            });
          }
        };
        const when = decision === 'late' ? timeout + personRng.int(0, 30) : personRng.chance(0.25) ? -1 : personRng.int(0, timeout - 1);
        if (when < 0) send();
        else later(send, when);
      };

      let cancelArmed = false;
      // Events a start() emitted before anyone subscribed are replayed later: their place among
      // the model requests is unknown (NaN, so the checks that order them skip them).
      let replaying = false;
      const onEvent = (e: AgentEvent) => {
        lane.events.push({ t: ts.now(), seq: replaying ? NaN : world.seq++, e });
        if (e.type === 'request-expired') closed.add(e.requestId);
        if (e.type === 'run-end') lane.runEndAt = ts.now();
        if (s.person === 'random' && (e.type === 'permission-request' || e.type === 'continuation-request')) answer(e);
        if (s.cancel.kind !== 'none' && 'event' in s.cancel.at && lane.events.length - 1 === s.cancel.at.event) doCancel();
        if (s.cancel.kind !== 'none' && 'request' in s.cancel.at && e.type.endsWith('-request') && !cancelArmed) {
          cancelArmed = true;
          const delay = s.cancel.at.request;
          if (delay < 0) doCancel();
          else later(doCancel, delay);
        }
      };
      const observer = {
        next: onEvent,
        error: (error: unknown) => {
          lane.observableError = error ?? new Error('undefined error');
          finish();
        },
        complete: () => {
          if (!lane.leftEarly) lane.completed = true;
          finish();
        },
      };
      const options = {
        ...(s.runId !== undefined ? { runId: s.runId } : {}),
        ...(s.session ? { session: s.session } : {}),
        ...(s.channel === 'subject' || s.driver === 'invoke' ? { responses: lane.responses$ } : {}),
        ...(s.cancel.kind === 'signal' ? { signal: controller.signal } : {}),
      };
      if (s.cancel.kind !== 'none' && 'time' in s.cancel.at) later(doCancel, s.cancel.at.time);
      if (s.driver === 'start') {
        lane.handle = world.agent.start(s.input, options);
        lane.handle.events$.subscribe((e) => truth.push(e));
        replaying = true;
        lane.handle.events$.subscribe(observer);
        replaying = false;
      } else if (s.driver === 'run') {
        subscription = world.agent.run(s.input, options).pipe(tap(onEvent), takeUntil(stop$)).subscribe({ error: observer.error, complete: observer.complete });
      } else {
        // invoke: no events; the person answers the ids it sees made (only permission requests here).
        world.onId = (prefix, id) => {
          if (prefix !== 'req' || s.person !== 'random') return;
          const decision = personRng.pick(['approve', 'approve', 'deny', 'never'] as const);
          if (decision === 'never') return;
          const timeout = requestTimeout(a, 'permission-request') ?? 1000;
          later(() => lane.responses$.next({ type: 'permission-response', requestId: id, approved: decision === 'approve' }), personRng.int(1, timeout - 1));
        };
        world.agent.invoke(s.input, options).then(
          (value) => (lane.result = { ok: true, value }),
          (error: unknown) => (lane.result = { ok: false, error }),
        );
        finish(); // its end is not observable here: the block flushes every timer
      }
    }

    let steps = 0;
    const allEnded = () => lanes.every((l) => l.ended);
    while (!allEnded() && ts.actions.length > 0 && steps++ < 200_000) {
      ts.maxFrames = ts.actions[0].delay;
      ts.flush();
    }
    if (!allEnded()) stuck = true;
    const invoking = lanes.some((l) => l.spec.driver === 'invoke');
    leakedTimers = invoking
      ? []
      : (ts.actions as Array<{ closed: boolean; delay: number | null }>)
          .filter((x) => !x.closed && !world.own.has(x))
          .map((x) => (x.delay as number) - ts.now());
    ts.maxFrames = ts.now() + HORIZON;
    ts.flush();
    for (const lane of lanes)
      if (lane.handle) lane.strangerAccepted = lane.handle.respond({ type: 'permission-response', requestId: 'req_nobody_asked', approved: true });
    world.onId = undefined;
    void base;
  } finally {
    wallClockTimers = setTimeoutSpy.mock.calls.length + setIntervalSpy.mock.calls.length;
    setTimeoutSpy.mockRestore();
    setIntervalSpy.mockRestore();
  }
  return { lanes, stuck, leakedTimers, wallClockTimers };
}

// ---------------------------------------------------------------------------------------------
// Invariants of one run
// ---------------------------------------------------------------------------------------------

const REASONS = ['completed', 'terminated', 'max-iterations', 'cancelled', 'error'];

function terminations(a: AgentSpec): RegExp[] {
  const out: RegExp[] = [];
  for (const { name, options } of a.middleware) {
    if (name === 'circuitBreaker') out.push(/^Circuit breaker triggered: '\w+' was called \d+ times in a row with identical arguments\.$/);
    if (name === 'toolCallLimit' && options.exitBehavior === 'end') out.push(/^('\w+' t|T)ool call limit reached: /);
    if (name === 'modelCallLimit' && options.exitBehavior === 'end') out.push(/^Model call limits exceeded: /);
    if (name === 'continuationPermission') out.push(/^Execution terminated: maximum iteration limit reached\.$/);
    if (name === 'costBudget') out.push(/^Budget exhausted: \$\d+\.\d{4} \/ \$\d+\.\d{4}$/);
    if (name === 'errorTracking') out.push(/^Maximum consecutive failures \(\d+\) exceeded$/);
  }
  return out;
}

type Ev<T extends AgentEvent['type']> = Extract<AgentEvent, { type: T }>;
const json = (v: unknown): string => {
  try {
    return typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
  } catch {
    return String(v);
  }
};
const rawIn = (text: string): string | undefined => RAW_PII.find((raw) => text.includes(raw));

function isFailingResult(e: Ev<'tool-result'>): boolean {
  return e.isError || (typeof e.result === 'string' && /^(error|failed):/i.test(e.result));
}

/** When the lane stopped (cancelled, left, failed or ended), on the virtual clock. */
function stopTime(lane: LaneObs): number {
  const times = [lane.cancelledTime, lane.leftTime, lane.events.find(({ e }) => e.type === 'error')?.t, lane.runEndAt].filter(
    (t): t is number => t !== undefined,
  );
  return times.length ? Math.min(...times) : Infinity;
}

function laneRequests(world: World, lane: LaneObs, models: ReadonlyArray<SeenRequest['model']>): SeenRequest[] {
  return world.requests.filter((r) => models.includes(r.model) && r.tag === lane.spec.tag && r.seq > lane.startSeq && r.seq < lane.endSeq);
}

function laneViolations(world: World, lane: LaneObs): string[] {
  const a = world.spec;
  const v: string[] = [];
  const s = lane.spec;
  const events = lane.events.map(({ e }) => e);
  if (lane.maybeCancelled && events.some((e) => e.type === 'run-end' && e.reason === 'cancelled')) {
    lane.cancelledAt = lane.maybeCancelled.at;
    lane.cancelledTime = lane.maybeCancelled.time;
    lane.cancelledHow = lane.maybeCancelled.how;
  }
  const runEnds = events.filter((e): e is Ev<'run-end'> => e.type === 'run-end');
  const runEnd = runEnds[0];
  const endIndex = runEnd ? events.indexOf(runEnd) : events.length;
  const cancelled = lane.cancelledAt !== undefined;
  const failed = runEnd?.reason === 'error';

  // 1. run-start first, one run-end last, one runId.
  if (lane.observableError !== undefined) v.push(`Observable error: ${String(lane.observableError)}`);
  if (events[0]?.type !== 'run-start') v.push(`first event is ${events[0] ? eventLabel(events[0]) : 'missing'}, not run-start`);
  const runId = events[0]?.runId;
  if (s.runId !== undefined && runId !== s.runId) v.push(`runId ${runId} is not the one given (${s.runId})`);
  const strangers = events.filter((e) => e.runId !== runId);
  if (strangers.length > 0) v.push(`${strangers.length} event(s) carry another runId (${eventLabel(strangers[0])}: ${strangers[0].runId})`);
  if (lane.leftEarly) {
    if (runEnds.length > 0) v.push('a run-end after the consumer left');
  } else {
    if (runEnds.length !== 1) v.push(`${runEnds.length} run-end events`);
    else if (events.at(-1) !== runEnd)
      v.push(
        `run-end is not the last event (then: ${events
          .slice(endIndex + 1)
          .map(eventLabel)
          .join(', ')})`,
      );
    if (!lane.completed) v.push('the Observable did not complete');
  }

  // 2. The reason says what happened.
  const errors = events.filter((e): e is Ev<'error'> => e.type === 'error');
  if (errors.some((e) => events.indexOf(e) > endIndex)) v.push('an error event after run-end');
  if (runEnd) {
    if (!REASONS.includes(runEnd.reason)) v.push(`unknown run-end reason ${runEnd.reason}`);
    if (runEnd.reason === 'cancelled' && !cancelled) v.push('run-end reason cancelled, but nobody cancelled');
    if (cancelled && runEnd.reason !== 'cancelled') v.push(`cancelled (${lane.cancelledHow}) before the end, but run-end reason ${runEnd.reason}`);
    if (failed && errors.length === 0) v.push('run-end reason error without an error event');
    if (!failed && errors.length > 0)
      v.push(`error event(s) (${errors.map(eventLabel).join(', ')}: ${errors[0].error.message}) but run-end reason ${runEnd.reason}`);
    if (errors.length > 1) v.push(`${errors.length} error events`);
    if (failed && errors.length > 0) {
      const after = events.slice(events.indexOf(errors[0]) + 1, endIndex);
      if (after.length > 0) v.push(`events between error and run-end: ${after.map(eventLabel).join(', ')}`);
      if (errors[0].source === 'run') v.push(`error with source run: ${errors[0].error.message}`);
    }
    if (runEnd.reason === 'terminated') {
      const text = runEnd.terminationReason ?? '';
      if (!terminations(a).some((re) => re.test(text))) v.push(`terminated with "${text}", which no registered middleware says`);
      if (runEnd.text !== text) v.push(`run-end.text "${runEnd.text}" is not the terminationReason "${text}"`);
    } else if (runEnd.terminationReason !== undefined) {
      v.push(`terminationReason on a run-end with reason ${runEnd.reason}`);
    }
    const iterations = events.filter((e) => e.type === 'iteration-start').length;
    if (runEnd.reason === 'max-iterations' && iterations !== a.maxIterations)
      v.push(`max-iterations after ${iterations} iterations (maxIterations ${a.maxIterations})`);
    if (iterations > a.maxIterations) v.push(`${iterations} iterations, more than maxIterations ${a.maxIterations}`);
    if (runEnd.reason === 'completed') {
      const lastStart = events.map((e) => e.type).lastIndexOf('iteration-start');
      if (events.slice(lastStart).some((e) => e.type === 'tool-call')) v.push('completed, but its last iteration called tools');
      // The answer is what was streamed in the last iteration, after its last retry or fallback.
      const last = events.slice(lastStart);
      const restart = Math.max(last.map((e) => e.type).lastIndexOf('model-retry'), last.map((e) => e.type).lastIndexOf('model-fallback'));
      const streamed = last
        .slice(restart + 1)
        .filter((e): e is Ev<'text-delta'> => e.type === 'text-delta')
        .map((e) => e.text)
        .join('');
      if (!runEnd.text.startsWith('Model call failed after') && streamed !== runEnd.text)
        v.push(`completed with text ${JSON.stringify(runEnd.text)}, but its last iteration streamed ${JSON.stringify(streamed)}`);
    }
  }
  if (cancelled) {
    const between = events.slice(lane.cancelledAt, endIndex).filter((e) => e.type !== 'request-expired');
    if (between.length > 0) v.push(`after the cancel, before run-end: ${between.map(eventLabel).join(', ')}`);
  }

  // 3. Every request is settled exactly once before run-end.
  const requests = events.filter(
    (e): e is AgentEvent & { requestId: string } => 'requestId' in e && typeof e.requestId === 'string' && e.type.endsWith('-request'),
  );
  const requestIds = new Set<string>();
  const toolOfRequest = new Map<string, string>();
  const runExecutions = world.executions.filter((x) => x.runId === runId);
  for (const request of requests) {
    if (requestIds.has(request.requestId)) v.push(`request ${request.requestId} emitted twice`);
    requestIds.add(request.requestId);
    if (request.type === 'permission-request') toolOfRequest.set(request.requestId, request.toolName);
    const at = events.indexOf(request);
    const t = lane.events[at].t;
    const expiries = events.filter((e): e is Ev<'request-expired'> => e.type === 'request-expired' && e.requestId === request.requestId);
    const accepted = lane.responses.filter((r) => r.requestId === request.requestId && r.open);
    for (const r of lane.responses.filter((x) => x.requestId === request.requestId && x.accepted !== undefined)) {
      if (r.accepted !== r.open) v.push(`respond() returned ${r.accepted} for ${r.open ? 'an open' : 'a settled'} request ${request.requestId} at ${r.t}`);
    }
    for (const x of expiries) {
      const xi = events.indexOf(x);
      if (xi > endIndex) v.push(`request-expired for ${request.requestId} after run-end`);
      if (x.reason === 'cancelled' && !(cancelled && xi >= (lane.cancelledAt as number)))
        v.push(`request ${request.requestId} expired as cancelled, but the run was not cancelled`);
      if (x.reason === 'timeout') {
        const expected = requestTimeout(a, request.type);
        const waited = lane.events[xi].t - t;
        if (expected !== undefined && waited !== expected) v.push(`request ${request.requestId} timed out after ${waited} ms, not ${expected}`);
      }
    }
    const settled = expiries.length + accepted.length;
    if (settled > 1) v.push(`request ${request.requestId} settled ${settled} times (${expiries.length} expiries, ${accepted.length} answers)`);
    if (settled === 0 && !(failed || lane.leftEarly))
      v.push(`request ${request.requestId} (${request.type}) never settled before run-end (${runEnd?.reason ?? 'no run-end'})`);
    if (request.type === 'permission-request') {
      const callId = request.callId;
      const answer = accepted[0];
      const denied = (answer && !answer.approved) || expiries.some((x) => x.reason === 'timeout');
      if (denied && runExecutions.some((x) => x.callId === callId)) v.push(`call ${callId} ran although its permission was denied or timed out`);
    }
  }
  if (lane.crossAccepted.some(Boolean)) v.push("another run's handle accepted an answer to this run's request");
  if (lane.strangerAccepted) v.push('respond() accepted an answer to an id the run never used');

  // Within a run, a remembered choice applies to the later calls of the tool: no second question.
  for (const r of lane.responses) {
    if (!r.open || !r.remember) continue;
    const tool = toolOfRequest.get(r.requestId);
    const again = events.slice(r.eventIndex).find((e) => e.type === 'permission-request' && e.toolName === tool);
    if (again)
      v.push(`asked about ${tool} again (${(again as Ev<'permission-request'>).requestId}) after the answer to ${r.requestId} said remember ${r.remember}`);
  }

  // 4. Tool calls and results, iterations.
  const { violations: outOfOrder, calls, results, open: current } = eventSequence(events);
  v.push(...outOfOrder);
  if (runEnd && !lane.leftEarly && !cancelled && !failed) {
    for (const callId of calls.keys()) if (!results.has(callId)) v.push(`tool-call ${callId} has no tool-result (run ${runEnd.reason})`);
    if (current !== undefined) v.push(`iteration ${current} has no iteration-end (run ${runEnd.reason})`);
  }

  // 5. Nothing of the run left running; its tools saw only its own cancellation.
  const stop = stopTime(lane);
  const toolTimeoutMs = optionsOf(a, 'toolTimeout')?.ms as number | undefined;
  for (const x of runExecutions) {
    if (!x.finished && !x.signal.aborted)
      v.push(`tool ${x.tool} (${x.kind}, call ${x.callId}, started at ${x.startedAt}) never finished and its signal was not aborted`);
    if (x.finished && x.signal.aborted) v.push(`tool ${x.tool} (call ${x.callId}) finished, yet its signal was aborted`);
    if (!calls.has(x.callId)) v.push(`tool ${x.tool} ran for call ${x.callId} without a tool-call event in its run`);
    if (x.startedAt > stop) v.push(`tool ${x.tool} (call ${x.callId}) started at ${x.startedAt}, after the run stopped at ${stop}`);
    if (x.abortedAt !== undefined && x.abortedAt < stop && !(toolTimeoutMs !== undefined && x.abortedAt - x.startedAt <= toolTimeoutMs)) {
      v.push(`tool ${x.tool} (call ${x.callId}) aborted at ${x.abortedAt}, before its run stopped (${stop}) and not by a timeout`);
    }
  }

  v.push(...operatorViolations(world, lane, events, runEnd, endIndex));
  return v;
}

/** What the operators of the case promise about one run. */
function operatorViolations(world: World, lane: LaneObs, events: AgentEvent[], runEnd: Ev<'run-end'> | undefined, endIndex: number): string[] {
  const a = world.spec;
  const v: string[] = [];
  const runId = events[0]?.runId;
  const cancelled = lane.cancelledAt !== undefined;
  const normal = !!runEnd && !cancelled && !lane.leftEarly && runEnd.reason !== 'error';
  const mainRequests = laneRequests(world, lane, ['primary', 'fb1', 'fb2']);
  const iterationEnds = events.filter((e): e is Ev<'iteration-end'> => e.type === 'iteration-end');
  const iterationStarts = events.filter((e): e is Ev<'iteration-start'> => e.type === 'iteration-start');

  // Every request the model is sent is a valid call/result sequence.
  for (const { request, model } of mainRequests) {
    const ms = request.messages;
    ms.forEach((m, i) => {
      const callIds = m.role === 'assistant' ? m.content.filter((p) => p.type === 'tool-call').map((p) => (p as { callId: string }).callId) : [];
      if (callIds.length > 0) {
        const answered =
          ms[i + 1]?.role === 'tool' ? ms[i + 1].content.filter((p) => p.type === 'tool-result').map((p) => (p as { callId: string }).callId) : [];
        if (json(answered) !== json(callIds)) v.push(`${model} request: calls ${json(callIds)} answered by ${json(answered)}`);
      }
      if (m.role === 'tool') {
        const before = ms[i - 1];
        const asked = before?.role === 'assistant' ? before.content.filter((p) => p.type === 'tool-call').map((p) => (p as { callId: string }).callId) : [];
        for (const p of m.content) if (p.type === 'tool-result' && !asked.includes(p.callId)) v.push(`${model} request: an orphan tool result ${p.callId}`);
      }
    });
  }

  // modelFallback: positions one after another, never past the last fallback.
  if (has(a, 'modelFallback')) {
    const count = optionsOf(a, 'modelFallback')?.fallbacks as number;
    for (const e of events)
      if (e.type === 'model-fallback' && (e.to !== e.from + 1 || e.to > count || e.from < 0))
        v.push(`model-fallback from ${e.from} to ${e.to} (${count} fallbacks)`);
  } else if (events.some((e) => e.type === 'model-fallback')) v.push('model-fallback without modelFallback');

  // errorTracking: no iteration starts after the one that reached the limit.
  if (has(a, 'errorTracking')) {
    const max = optionsOf(a, 'errorTracking')?.maxConsecutiveErrors as number;
    let count = 0;
    for (const end of iterationEnds) {
      const results = events.filter((e): e is Ev<'tool-result'> => e.type === 'tool-result' && e.iteration === end.iteration);
      if (results.length === 0) continue;
      count = results.some(isFailingResult) ? count + 1 : 0;
      if (count >= max && iterationStarts.some((s) => s.iteration > end.iteration)) {
        v.push(`iteration ${end.iteration} was the ${count}th failing one in a row (max ${max}), yet the run went on`);
        break;
      }
    }
    for (const e of events)
      if (e.type === 'error-threshold-exceeded' && (e.maxAllowed !== max || e.consecutiveErrors !== max))
        v.push(`error-threshold-exceeded ${json(e)} (max ${max})`);
  }

  // lifecycleEvents: started right after run-start, completed once before run-end with the right outcome.
  if (has(a, 'lifecycleEvents')) {
    const started = events.filter((e): e is Ev<'agent-run-started'> => e.type === 'agent-run-started');
    const completed = events.filter((e): e is Ev<'agent-run-completed'> => e.type === 'agent-run-completed');
    if (started.length > 1 || completed.length > 1) v.push(`${started.length} agent-run-started, ${completed.length} agent-run-completed`);
    if (started[0] && events.indexOf(started[0]) !== 1) v.push('agent-run-started is not right after run-start');
    if (started[0] && started[0].inputMessageCount !== 1) v.push(`agent-run-started counts ${started[0].inputMessageCount} input messages`);
    if (normal && runEnd && events.some((e) => e.type === 'iteration-start')) {
      const c = completed[0];
      if (!c) v.push(`no agent-run-completed for a run that ended ${runEnd.reason}`);
      else {
        if (c.success !== (runEnd.reason === 'completed')) v.push(`agent-run-completed success ${c.success} for run-end ${runEnd.reason}`);
        if (runEnd.reason === 'terminated' && c.terminationReason !== runEnd.terminationReason)
          v.push(`agent-run-completed terminationReason ${c.terminationReason}, run-end ${runEnd.terminationReason}`);
        const at = lane.events[events.indexOf(c)].t;
        if (c.durationMs !== at - lane.events[0].t) v.push(`agent-run-completed durationMs ${c.durationMs}, the run took ${at - lane.events[0].t}`);
        if (c.iterations !== iterationStarts.length && c.iterations !== iterationEnds.length)
          v.push(`agent-run-completed iterations ${c.iterations}: ${iterationStarts.length} started, ${iterationEnds.length} ended`);
      }
    }
    if (cancelled && completed.some((c) => events.indexOf(c) >= (lane.cancelledAt as number))) v.push('agent-run-completed after the cancel');
    if (runEnd?.reason === 'error' && completed.some((c) => c.success)) {
      const failure = events.find((e): e is Ev<'error'> => e.type === 'error');
      if (failure?.source !== 'run') v.push('agent-run-completed success true for a failed run');
    }
  }

  // iterationLogging: one "completed" line per iteration that ended, with its duration.
  if (has(a, 'iterationLogging') && runId) {
    const mine = world.logLines.filter((l) => l.includes(`(run ${runId})`));
    const starting = mine.filter((l) => / starting /.test(l)).length;
    const done = mine.filter((l) => / completed in /.test(l));
    if (starting > iterationStarts.length + (lane.leftEarly ? 1 : 0)) v.push(`${starting} "starting" lines for ${iterationStarts.length} iterations`);
    for (const end of iterationEnds) {
      const lines = done.filter((l) => l.startsWith(`info Iteration ${end.iteration} completed in `));
      if (lines.length !== 1) {
        v.push(`${lines.length} "completed" lines for iteration ${end.iteration}`);
        continue;
      }
      const ms = Number(/completed in (\d+)ms/.exec(lines[0])?.[1]);
      const start = iterationStarts.find((s) => s.iteration === end.iteration);
      const span = lane.events[events.indexOf(end)].t - (start ? lane.events[events.indexOf(start)].t : 0);
      if (!(ms >= 0 && ms <= span)) v.push(`iteration ${end.iteration} logged ${ms}ms, it spanned ${span}ms`);
    }
    if (done.length > iterationEnds.length + (normal ? 0 : 1)) v.push(`${done.length} "completed" lines for ${iterationEnds.length} ended iterations`);
  }

  // skills: a skill's tool is offered only after its activation in this run, and activated once.
  if (has(a, 'skills')) {
    const activated = lane.events.find(({ e }) => e.type === 'skill-activated');
    for (const r of mainRequests) {
      if (r.request.tools.some((t) => t.name === 'sk0') && (!activated || activated.seq > r.seq))
        v.push(
          `sk0 offered before calc was activated in this run (${r.model} request ${r.seq}, activation ${activated?.seq}, ${r.request.messages.length} messages: ${json(r.request.messages).slice(0, 400)})`,
        );
      if (activated && activated.seq < r.seq && !(r.request.instructions ?? '').includes('SKILL-CALC'))
        v.push('a request after the activation lacks the skill instructions');
    }
    if (events.filter((e) => e.type === 'skill-activated').length > 1) v.push('calc activated twice in one run');
  }

  // iterationGuidance: the first-iteration text exactly on the requests of iteration 0.
  if (has(a, 'iterationGuidance')) {
    for (const { request, model } of mainRequests) {
      const first = request.messages.at(-1)?.role === 'user';
      const ins = request.instructions ?? '';
      if (first !== ins.includes('GUIDE-FIRST') || first === ins.includes('GUIDE-AFTER('))
        v.push(`${model} request ending with a ${request.messages.at(-1)?.role} message has instructions ${JSON.stringify(ins.slice(0, 80))}`);
    }
  }

  // todoList: todos-updated for each successful write_todos, with its todos, never for a parallel pair.
  if (has(a, 'todoList')) {
    const updates = events.filter((e): e is Ev<'todos-updated'> => e.type === 'todos-updated');
    const writes = events.filter((e): e is Ev<'tool-result'> => e.type === 'tool-result' && e.name === 'write_todos' && !e.isError);
    if (normal ? updates.length !== writes.length : updates.length > writes.length + 1)
      v.push(`${updates.length} todos-updated for ${writes.length} successful write_todos`);
    for (const u of updates) {
      const call = events.find(
        (e): e is Ev<'tool-call'> => e.type === 'tool-call' && e.name === 'write_todos' && json((e.args as { todos?: unknown }).todos) === json(u.todos),
      );
      if (!call) v.push(`todos-updated ${json(u.todos)} matches no write_todos call`);
      else if (events.filter((e) => e.type === 'tool-call' && e.name === 'write_todos' && e.iteration === call.iteration).length > 1)
        v.push('todos-updated for a write_todos made in parallel');
    }
  }

  // toolSelector: one selection per run, before the loop; requests offer only what was selected.
  if (has(a, 'toolSelector')) {
    const o = optionsOf(a, 'toolSelector') as { maxTools: number; minToolsToTrigger: number; alwaysInclude: string[] };
    const selections = events.filter((e): e is Ev<'tool-selection'> => e.type === 'tool-selection');
    if (selections.length > 1) v.push(`${selections.length} tool-selection events`);
    const sel = selections[0];
    if (sel) {
      if (events.findIndex((e) => e.type === 'iteration-start') >= 0 && events.indexOf(sel) > events.findIndex((e) => e.type === 'iteration-start'))
        v.push('tool-selection after the loop began');
      if (!o.alwaysInclude.every((n) => sel.selected.includes(n))) v.push(`selected ${json(sel.selected)} lacks alwaysInclude`);
      if (sel.selected.some((n) => !a.turnTools.includes(n))) v.push(`selected ${json(sel.selected)} names tools the turn does not have`);
      if (sel.selected.length < a.turnTools.length && sel.selected.filter((n) => !o.alwaysInclude.includes(n)).length > o.maxTools)
        v.push(`selected ${json(sel.selected)}, more than maxTools ${o.maxTools}`);
      for (const { request } of mainRequests) {
        const offered = request.tools.map((t) => t.name).filter((n) => n !== 'sk0');
        if (offered.some((n) => !sel.selected.includes(n))) v.push(`a request offers ${json(offered)}, selected ${json(sel.selected)}`);
      }
    } else if (a.turnTools.length > o.minToolsToTrigger && normal)
      v.push(`no tool-selection with ${a.turnTools.length} tools (minToolsToTrigger ${o.minToolsToTrigger})`);
  }

  // summarization: the summary replaces older messages and never reaches the run's text.
  if (has(a, 'summarization')) {
    for (const e of events) {
      if (e.type === 'summarized' && !(e.messagesAfter <= e.messagesBefore)) v.push(`summarized ${e.messagesBefore} -> ${e.messagesAfter}`);
      if ((e.type === 'text-delta' && e.text.includes('SUMMARY[')) || (e.type === 'run-end' && e.text.includes('SUMMARY[')))
        v.push(`the summary reached ${eventLabel(e)}`);
    }
    const summarized = lane.events.filter(({ e }) => e.type === 'summarized');
    for (const s of summarized) {
      const nextRequest = mainRequests.find((r) => r.seq > s.seq);
      const firstText = nextRequest?.request.messages[0]?.content[0];
      if (
        nextRequest &&
        !(nextRequest.request.messages[0].role === 'user' && firstText?.type === 'text' && firstText.text.startsWith(`${SUMMARY_PREFIX}\n\n`))
      ) {
        v.push('the request after a summary does not start with it');
      }
    }
    const skipped = lane.events.filter(({ e }) => e.type === 'summary-skipped');
    if (skipped.length > 1) v.push(`${skipped.length} summary-skipped in one run`);
    if (skipped[0] && laneRequests(world, lane, ['summary']).some((r) => r.seq > skipped[0].seq))
      v.push('the summary model was asked again in the run that skipped it');
  }

  // contextEditing: edits the requests only, never the results the run reports.
  if (has(a, 'contextEditing')) {
    for (const e of events) {
      if (e.type === 'context-edited' && !(e.cleared >= 1 && e.tokensAfter <= e.tokensBefore)) v.push(`context-edited ${json(e)}`);
      if (e.type === 'tool-result' && json(e.result).includes(PLACEHOLDER)) v.push(`tool-result ${e.callId} shows the placeholder`);
    }
  }

  // piiRedaction: no raw value on a channel it is configured to clean.
  if (has(a, 'piiRedaction')) {
    const o = optionsOf(a, 'piiRedaction') as { rules: { creditCard: string }; applyToInput: boolean; applyToOutput: boolean; applyToToolResults: boolean };
    if (o.applyToOutput) {
      const byIteration = new Map<number, string>();
      for (const e of events) {
        if (e.type === 'model-retry' || e.type === 'model-fallback') byIteration.clear();
        if (e.type === 'text-delta') byIteration.set(e.iteration, (byIteration.get(e.iteration) ?? '') + e.text);
        if (e.type === 'text-delta' && rawIn(e.text)) v.push(`text-delta ${JSON.stringify(e.text)} holds ${rawIn(e.text)}`);
        for (const text of byIteration.values()) if (rawIn(text)) v.push(`the streamed text ${JSON.stringify(text)} holds ${rawIn(text)}`);
        if (e.type === 'run-end' && rawIn(e.text) && e.text !== e.terminationReason) v.push(`run-end text holds ${rawIn(e.text)}`);
      }
    }
    if (o.applyToToolResults)
      for (const e of events) if (e.type === 'tool-result' && rawIn(json(e.result))) v.push(`tool-result ${e.callId} holds ${rawIn(json(e.result))}`);
    const piiIndex = a.middleware.findIndex((m) => m.name === 'piiRedaction');
    const selectorIndex = a.middleware.findIndex((m) => m.name === 'toolSelector');
    const models: Array<SeenRequest['model']> = ['primary', 'fb1', 'fb2', 'summary', ...(selectorIndex > piiIndex ? (['selector'] as const) : [])];
    const seen = world.requests.filter(
      (r) => models.includes(r.model) && (r.model === 'selector' || r.tag === lane.spec.tag) && r.seq > lane.startSeq && r.seq < lane.endSeq,
    );
    for (const { request, model } of seen) {
      for (const m of request.messages) {
        for (const p of m.content) {
          const text = p.type === 'text' ? p.text : p.type === 'tool-result' ? json(p.result) : '';
          const raw = rawIn(text);
          if (!raw) continue;
          if (model === 'selector') {
            if (o.applyToInput) v.push(`the selector model was sent ${raw}`);
          } else if (model === 'summary') {
            // A transcript: one line per part, named by its role.
            for (const line of text.split('\n')) {
              if (!rawIn(line)) continue;
              if (
                (line.startsWith('user: ') && o.applyToInput) ||
                (line.startsWith('tool ') && o.applyToToolResults) ||
                (line.startsWith('assistant: ') && !line.startsWith('assistant: [call') && o.applyToOutput)
              ) {
                v.push(`the summary model was sent ${rawIn(line)} in ${JSON.stringify(line.slice(0, 60))}`);
              }
            }
          } else if (
            (m.role === 'user' && o.applyToInput) ||
            (m.role === 'tool' && o.applyToToolResults) ||
            (m.role === 'assistant' && p.type === 'text' && o.applyToOutput)
          ) {
            v.push(`the ${model} model was sent ${raw} in a ${m.role} message`);
          }
        }
      }
    }
  }
  void endIndex;
  return v;
}

function describeLanes(world: World, block: BlockObs): string {
  const mw = world.spec.middleware.map(({ name, options }) => `${name}(${JSON.stringify(options)})`).join(', ');
  const out = [
    `  middleware: ${mw || '(none)'}`,
    `  maxIterations ${world.spec.maxIterations}, ${world.spec.toolExecution}, needsApproval ${json(world.spec.needsApproval)}`,
  ];
  for (const lane of block.lanes) {
    const s = lane.spec;
    out.push(
      `  lane ${s.tag}: ${s.driver} via ${s.channel} (${s.person}), input ${JSON.stringify(s.input)}, cancel ${s.cancel.kind} at ${json(s.cancel.at)}, start at ${s.startAt}${s.session ? `, session ${s.session.id}` : ''}`,
    );
    out.push(`    responses: ${json(lane.responses)}`);
    for (const { t, e } of lane.events) {
      const extra =
        e.type === 'tool-call' || e.type === 'tool-result'
          ? ` ${e.callId} ${json(e.type === 'tool-result' ? e.result : e.args)}`
          : 'requestId' in e
            ? ` ${String(e.requestId)}`
            : e.type === 'error'
              ? ` ${e.error.message}`
              : e.type === 'run-end'
                ? ` ${JSON.stringify(e.text)}`
                : e.type === 'text-delta'
                  ? ''
                  : ` ${json({ ...e, type: undefined, runId: undefined })}`;
      out.push(`    ${t} ${eventLabel(e)}${extra}`);
    }
    if (lane.result) out.push(`    invoke: ${lane.result.ok ? json({ ...lane.result.value, usage: undefined }) : String(lane.result.error)}`);
  }
  return out.join('\n');
}

function blockViolations(world: World, block: BlockObs): string[] {
  const v: string[] = [];
  if (block.stuck) v.push('a run never ended although no timer was left');
  if (block.wallClockTimers > 0) v.push(`${block.wallClockTimers} wall-clock timer(s) were set`);
  if (block.leakedTimers.length > 0)
    v.push(`${block.leakedTimers.length} timer(s) still pending after every run was over (due in ${block.leakedTimers.join(', ')} ms)`);
  const observed = block.lanes.filter((l) => l.spec.driver !== 'invoke');
  for (const lane of observed) v.push(...laneViolations(world, lane).map((x) => `[${lane.spec.tag}] ${x}`));
  // Runs of one agent at once: their own ids, requests and tools.
  const runIds = observed.map((l) => l.events[0]?.e.runId);
  if (new Set(runIds).size !== runIds.length) v.push(`runs share a runId: ${json(runIds)}`);
  const requestOwners = new Map<string, string>();
  for (const lane of observed) {
    for (const { e } of lane.events) {
      if (!('requestId' in e) || typeof e.requestId !== 'string') continue;
      const owner = requestOwners.get(e.requestId);
      if (owner !== undefined && owner !== lane.spec.tag) v.push(`request ${e.requestId} appears in runs ${owner} and ${lane.spec.tag}`);
      requestOwners.set(e.requestId, lane.spec.tag);
    }
  }
  return v;
}

const stats: Record<string, number> = {};
function tally(block: BlockObs): void {
  const bump = (k: string) => (stats[k] = (stats[k] ?? 0) + 1);
  for (const lane of block.lanes) {
    const end = lane.events.find(({ e }) => e.type === 'run-end')?.e as Ev<'run-end'> | undefined;
    bump(`end:${lane.spec.driver === 'invoke' ? `invoke:${lane.result?.ok ? lane.result.value.reason : 'rejected'}` : lane.leftEarly ? 'left' : end?.reason}`);
    for (const { e } of lane.events) {
      if (!['text-delta', 'tool-call', 'tool-result', 'iteration-start', 'iteration-end', 'run-start', 'run-end', 'cost-recorded'].includes(e.type))
        bump(e.type === 'error' ? `error:${e.error.name}` : e.type);
    }
  }
}
afterAll(() => {
  if (process.env.FUZZ_STATS) console.log(JSON.stringify(stats, null, 1));
});

const { perBlock, seedsFrom } = fuzzSeeds(60);

function report(failures: string[], total: number): void {
  if (failures.length > 0) throw new Error(`${failures.length} of ${total} case(s) broke an invariant:\n${failures.join('\n')}`);
}

// ---------------------------------------------------------------------------------------------
// Block 1: one run (sometimes two in a row, sharing the cache) with the other operators
// ---------------------------------------------------------------------------------------------

function singleCase(seed: number): { spec: AgentSpec; lanes: LaneSpec[] } {
  const rng = new Rng(seed);
  const driver = rng.pick(['run', 'start'] as const);
  const cancel = drawCancel(rng, driver);
  const must = [rng.pick(NEW_OPS), rng.pick(NEW_OPS)];
  const middleware = drawMiddleware(rng, [...NEW_OPS, ...OLD_OPS], must, 0.3, 8);
  const canEndNever = middleware.some((m) => m.name === 'toolTimeout') || (cancel.kind !== 'none' && 'time' in cancel.at);
  const spec = drawAgent(rng, seed, middleware, ['A'], canEndNever);
  const input = inputFor(rng, 'A');
  const lane = (startAt: number, c: CancelPlan): LaneSpec => ({
    tag: 'A',
    input,
    driver,
    channel: driver === 'start' && rng.chance(0.6) ? 'handle' : 'subject',
    person: rng.chance(0.85) ? 'random' : 'silent',
    remember: true,
    cancel: c,
    startAt,
    ...(rng.chance(0.3) ? { session: createSession({ id: `s${seed}` }) } : {}),
  });
  const lanes = [lane(0, cancel)];
  // A second run of the same agent with the same input: the cache (one instance) serves it.
  if (rng.chance(0.5)) lanes.push(lane(0, canEndNever ? cancel : { kind: 'none', at: { time: 0 } }));
  return { spec, lanes };
}

function runSingle(seed: number): { world: World; blocks: BlockObs[] } {
  const { spec, lanes } = singleCase(seed);
  const world = buildWorld(spec);
  const blocks = lanes.map((lane, i) => runLanes(world, [lane], seed * 7 + i));
  return { world, blocks };
}

describe('operator invariants: one run at a time', () => {
  it.each([
    ['the other operators mixed with the first ten', 10_000],
    ['more of them', 11_000],
  ])('%s (seeds from %i)', (_label, base) => {
    const seeds = seedsFrom(base);
    const failures: string[] = [];
    for (const seed of seeds) {
      let result: { world: World; blocks: BlockObs[] };
      try {
        result = runSingle(seed);
      } catch (error) {
        failures.push(`seed ${seed}: the case threw ${error instanceof Error ? error.stack : String(error)}`);
        continue;
      }
      const { world, blocks } = result;
      const broken = blocks.flatMap((b, i) => blockViolations(world, b).map((x) => `run ${i + 1}: ${x}`));
      const runIds = new Set(blocks.flatMap((b) => b.lanes.map((l) => l.events[0]?.e.runId)));
      for (const x of world.executions) if (!runIds.has(x.runId)) broken.push(`a tool ran for run ${x.runId}, which is none of the runs`);
      if (process.env.FUZZ_STATS) blocks.forEach(tally);
      if (broken.length > 0)
        failures.push(
          `seed ${seed} (replay: FUZZ_SEED=${seed}):\n  - ${broken.join('\n  - ')}${failures.length === 0 ? `\n${blocks.map((b) => describeLanes(world, b)).join('\n')}` : ''}`,
        );
    }
    report(failures, seeds.length);
  });
});

// ---------------------------------------------------------------------------------------------
// Block 2: several turns on one session
// ---------------------------------------------------------------------------------------------

interface SessionCase {
  spec: AgentSpec;
  store: InMemorySessionStore | undefined;
  /** Which Session object each turn uses: the first, the second (same id and store), or a new one. */
  objects: Array<0 | 1 | 'new'>;
  turns: LaneSpec[];
}

function sessionCase(seed: number): SessionCase {
  const rng = new Rng(seed);
  const withStore = rng.chance(0.6);
  const pool: Op[] = [
    'permissions',
    'toolCallLimit',
    'modelCallLimit',
    'summarization',
    'todoList',
    'contextEditing',
    'skills',
    'responseCache',
    'lifecycleEvents',
    'iterationLogging',
    'piiRedaction',
    'errorTracking',
    'modelRetry',
    'toolTimeout',
    'iterationGuidance',
    'modelFallback',
    'costBudget',
    'circuitBreaker',
  ];
  const must: Op[] = [
    'permissions',
    ...(rng.chance(0.7) ? (['toolCallLimit'] as Op[]) : []),
    ...(rng.chance(0.5) ? (['modelCallLimit'] as Op[]) : []),
    ...(rng.chance(0.6) ? (['summarization'] as Op[]) : []),
  ];
  const middleware = drawMiddleware(rng, pool, must, 0.15, 8);
  for (const m of middleware) {
    // Thread limits are the point here; an 'error' exit is covered by the first block.
    if (m.name === 'toolCallLimit')
      m.options = { ...m.options, threadLimit: (m.options.runLimit as number) + rng.int(0, 3), exitBehavior: rng.pick(['continue', 'end']) };
    if (m.name === 'modelCallLimit') m.options = { ...m.options, threadLimit: rng.int(2, 9), runLimit: rng.int(1, 4) };
  }
  const hasToolTimeout = middleware.some((m) => m.name === 'toolTimeout');
  const spec = drawAgent(rng, seed, middleware, ['S'], hasToolTimeout);
  const n = rng.int(2, 5);
  const turns: LaneSpec[] = [];
  const objects: SessionCase['objects'] = [];
  for (let k = 0; k < n; k++) {
    const driver = rng.pick(['run', 'start', 'invoke'] as const);
    const cancel = drawCancel(rng, driver, driver === 'invoke' ? ['none', 'none', 'signal'] : undefined);
    turns.push({
      tag: 'S',
      input: inputFor(rng, 'S', ` turn ${k}`),
      driver,
      channel: driver === 'start' && rng.chance(0.6) ? 'handle' : 'subject',
      person: rng.chance(0.9) ? 'random' : 'silent',
      remember: driver !== 'invoke',
      cancel,
      startAt: rng.int(0, 20),
    });
    objects.push(withStore ? rng.pick([0, 1, 1, 'new'] as const) : 0);
  }
  return { spec, store: withStore ? new InMemorySessionStore() : undefined, objects, turns };
}

const plain = (messages: readonly Message[] | undefined): unknown[] => JSON.parse(JSON.stringify(messages ?? [])) as unknown[];
const isSummary = (m: unknown): boolean => {
  const part = (m as Message | undefined)?.content?.[0];
  return (m as Message | undefined)?.role === 'user' && part?.type === 'text' && part.text.startsWith(`${SUMMARY_PREFIX}\n\n`);
};

async function runSessionCase(seed: number): Promise<{ world: World; blocks: BlockObs[]; broken: string[] }> {
  const c = sessionCase(seed);
  const world = buildWorld(c.spec);
  const id = `sess-${seed}`;
  const made = [createSession({ id, store: c.store }), createSession({ id, store: c.store })];
  const history = (used: Session): unknown[] => plain(c.store ? c.store.load(id)?.messages : used.messages);
  const broken: string[] = [];
  const blocks: BlockObs[] = [];
  /** Choices remembered by a finished iteration of an earlier turn. */
  const remembered = new Map<string, 'always' | 'never'>();
  const tcl = optionsOf(c.spec, 'toolCallLimit') as { threadLimit?: number; toolName?: string } | undefined;
  const mcl = optionsOf(c.spec, 'modelCallLimit') as { threadLimit?: number } | undefined;
  const sessionRunIds: string[] = [];

  for (let k = 0; k < c.turns.length; k++) {
    const which = c.objects[k];
    const session = which === 'new' ? createSession({ id, store: c.store }) : made[which];
    const turn = { ...c.turns[k], session };
    const before = history(session);
    const block = runLanes(world, [turn], seed * 31 + k);
    await new Promise((resolve) => setImmediate(resolve));
    blocks.push(block);
    const lane = block.lanes[0];
    const v = blockViolations(world, block);
    const after = history(session);
    const events = lane.events.map(({ e }) => e);
    const runId = lane.spec.driver === 'invoke' ? world.finishedIterations.at(-1)?.runId : events[0]?.runId;

    // The history: the one before plus what the turn added, unless a summary replaced it.
    if (c.store && json(plain(session.messages)) !== json(after)) v.push('the Session object used differs from its store after the turn');
    // A summary made in an iteration that did not finish is not kept (the turn keeps its finished iterations).
    const summaryAt = events.findIndex((e) => e.type === 'summarized');
    const summaryKept = summaryAt >= 0 && events.some((e, i) => i > summaryAt && e.type === 'iteration-end');
    const summarized = lane.spec.driver === 'invoke' ? isSummary(after[0]) && json(after.slice(0, before.length)) !== json(before) : summaryAt >= 0;
    if (lane.spec.driver === 'invoke') {
      if (!lane.result) v.push('invoke() never settled');
      else if (lane.result.ok) {
        const added = plain(lane.result.value.messages);
        if (summarized) {
          if (!isSummary(after[0]) || json(after.slice(after.length - added.length)) !== json(added))
            v.push(`after a summary the history (${after.length}) does not end with the ${added.length} message(s) invoke() says the turn added`);
        } else if (json(after) !== json([...before, ...added])) {
          v.push(`history ${before.length} -> ${after.length} messages, but invoke() says the turn added ${added.length}: ${json(added).slice(0, 300)}`);
        }
      }
    } else if (summaryKept) {
      if (!isSummary(after[0])) v.push('the turn summarised in an iteration that finished, but the history does not start with the summary');
    } else if (!summarized || json(after.slice(0, before.length)) === json(before)) {
      if (json(after.slice(0, before.length)) !== json(before)) v.push('the turn changed the history before it');
      const added = after.slice(before.length) as Message[];
      const begun = events.some((e) => e.type === 'iteration-start');
      if (begun && (added[0]?.role !== 'user' || !json(added[0]).includes('go[S]')))
        v.push(`the turn's messages do not start with its input: ${json(added).slice(0, 200)}`);
      const assistants = added.filter((m) => m.role === 'assistant').length;
      const ends = events.filter((e) => e.type === 'iteration-end').length;
      if (assistants < ends || assistants > ends + 1) v.push(`the turn added ${assistants} assistant message(s) for ${ends} finished iteration(s)`);
    }
    if (runId) sessionRunIds.push(runId);

    // Remembered choices from earlier turns: no question, and 'never' never runs.
    if (lane.spec.driver !== 'invoke' && runId) {
      for (const [tool, choice] of remembered) {
        if (events.some((e) => e.type === 'permission-request' && e.toolName === tool))
          v.push(`asked about ${tool}, remembered '${choice}' by an earlier turn`);
        if (choice === 'never' && world.executions.some((x) => x.runId === runId && x.tool === tool))
          v.push(`${tool} ran, remembered 'never' by an earlier turn`);
      }
      for (const r of lane.responses) {
        if (!r.open || !r.remember) continue;
        const request = events.find((e): e is Ev<'permission-request'> => e.type === 'permission-request' && e.requestId === r.requestId);
        if (!request) continue;
        const at = events.indexOf(request);
        const nextEnd = events.findIndex((e, i) => i > at && e.type === 'iteration-end');
        const nextStart = events.findIndex((e, i) => i > at && e.type === 'iteration-start');
        if (nextEnd >= 0 && (nextStart < 0 || nextStart > nextEnd) && r.eventIndex <= nextEnd) remembered.set(request.toolName, r.remember);
      }
    }

    // Thread limits hold across the turns: calls and model calls of the finished iterations.
    const finished = world.finishedIterations.filter((f) => sessionRunIds.includes(f.runId));
    const isFinished = (runId: string, iteration: number) => finished.some((f) => f.runId === runId && f.iteration === iteration);
    if (tcl?.threadLimit !== undefined) {
      const calls = new Set(
        world.executions
          .filter((x) => sessionRunIds.includes(x.runId) && isFinished(x.runId, x.iteration) && (tcl.toolName === undefined || x.tool === tcl.toolName))
          .map((x) => `${x.runId}/${x.callId}`),
      );
      if (calls.size > tcl.threadLimit) v.push(`${calls.size} tool calls ran in the session's finished iterations, threadLimit ${tcl.threadLimit}`);
    }
    if (mcl?.threadLimit !== undefined) {
      const calls = finished.filter((f) => f.modelCalled).length;
      if (calls > mcl.threadLimit) v.push(`${calls} model calls in the session's finished iterations, threadLimit ${mcl.threadLimit}`);
    }
    broken.push(...v.map((x) => `turn ${k + 1} (${lane.spec.driver}, object ${which}): ${x}`));
  }
  return { world, blocks, broken };
}

describe('operator invariants: several turns on one session', () => {
  it('keeps history, remembered answers and thread limits across turns and Session objects', async () => {
    const seeds = seedsFrom(20_000, perBlock + 20);
    const failures: string[] = [];
    for (const seed of seeds) {
      let result: Awaited<ReturnType<typeof runSessionCase>>;
      try {
        result = await runSessionCase(seed);
      } catch (error) {
        failures.push(`seed ${seed}: the case threw ${error instanceof Error ? error.stack : String(error)}`);
        continue;
      }
      const { world, blocks, broken } = result;
      if (process.env.FUZZ_STATS) blocks.forEach(tally);
      if (broken.length > 0)
        failures.push(
          `seed ${seed} (replay: FUZZ_SEED=${seed}):\n  - ${broken.join('\n  - ')}${failures.length === 0 ? `\n${blocks.map((b) => describeLanes(world, b)).join('\n')}` : ''}`,
        );
    }
    report(failures, seeds.length);
  });
});

// ---------------------------------------------------------------------------------------------
// Block 3: two or three runs of one agent at once
// ---------------------------------------------------------------------------------------------

function concurrentCase(seed: number): { spec: AgentSpec; lanes: LaneSpec[] } {
  const rng = new Rng(seed);
  const tags = ['A', 'B', 'C'].slice(0, rng.int(2, 3));
  const middleware = drawMiddleware(rng, [...NEW_OPS, ...OLD_OPS], ['permissions', rng.pick(NEW_OPS)], 0.3, 8);
  const specs = tags.map((tag) => {
    const driver = rng.pick(['run', 'start'] as const);
    return { tag, driver, cancel: drawCancel(rng, driver) };
  });
  const canEndNever = middleware.some((m) => m.name === 'toolTimeout') || specs.every((s) => s.cancel.kind !== 'none' && 'time' in s.cancel.at);
  const spec = drawAgent(rng, seed, middleware, tags, canEndNever);
  const lanes = specs.map(({ tag, driver, cancel }): LaneSpec => ({
    tag,
    input: inputFor(rng, tag),
    driver,
    channel: driver === 'start' && rng.chance(0.6) ? 'handle' : 'subject',
    person: rng.chance(0.85) ? 'random' : 'silent',
    remember: true,
    cancel,
    startAt: rng.chance(0.4) ? 0 : rng.int(0, 150),
    ...(rng.chance(0.5) ? { runId: `run-${tag}-${seed}` } : {}),
    ...(rng.chance(0.4) ? { session: createSession({ id: `s-${tag}-${seed}` }) } : {}),
  }));
  return { spec, lanes };
}

describe('operator invariants: runs of one agent at once', () => {
  it.each([
    ['two or three runs, each with its own answers and cancels', 30_000],
    ['more of them', 31_000],
  ])('%s (seeds from %i)', (_label, base) => {
    const seeds = seedsFrom(base, Math.round(perBlock * 0.75));
    const failures: string[] = [];
    for (const seed of seeds) {
      let world: World;
      let block: BlockObs;
      try {
        const c = concurrentCase(seed);
        world = buildWorld(c.spec);
        block = runLanes(world, c.lanes, seed);
      } catch (error) {
        failures.push(`seed ${seed}: the case threw ${error instanceof Error ? error.stack : String(error)}`);
        continue;
      }
      const broken = blockViolations(world, block);
      // Each run's tools belong to it: executed for a call of its own.
      for (const x of world.executions) {
        const owner = block.lanes.find((l) => l.events[0]?.e.runId === x.runId);
        if (!owner) broken.push(`a tool ran for run ${x.runId}, which is none of the runs`);
        else if (!owner.events.some(({ e }) => e.type === 'tool-call' && e.callId === x.callId))
          broken.push(`[${owner.spec.tag}] ran ${x.callId}, a call of another run`);
      }
      if (process.env.FUZZ_STATS) tally(block);
      if (broken.length > 0)
        failures.push(
          `seed ${seed} (replay: FUZZ_SEED=${seed}):\n  - ${broken.join('\n  - ')}${failures.length === 0 ? `\n${describeLanes(world, block)}` : ''}`,
        );
    }
    report(failures, seeds.length);
  });
});

describe('the checks themselves', () => {
  it('see a planted second run-end and raw PII in a redacted channel', () => {
    // The first seed whose first run was observed, redacts output, and ended: plant breaches into what it saw.
    let found: { world: World; block: BlockObs; lane: LaneObs } | undefined;
    for (let seed = 10_000; seed < 10_300 && !found; seed++) {
      const { world, blocks } = runSingle(seed);
      const lane = blocks[0].lanes[0];
      const pii = optionsOf(world.spec, 'piiRedaction');
      const ended = lane.events.some(({ e }) => e.type === 'run-end');
      if (lane.spec.driver !== 'invoke' && pii?.applyToOutput === true && ended && blockViolations(world, blocks[0]).length === 0)
        found = { world, block: blocks[0], lane };
    }
    expect(found).toBeDefined();
    const { world, block, lane } = found!;
    const end = lane.events.find(({ e }) => e.type === 'run-end')!;
    const runId = end.e.runId;
    const iteration = (lane.events.find(({ e }) => e.type === 'iteration-start')?.e as { iteration: number } | undefined)?.iteration ?? 0;
    const planted = (e: AgentEvent) => ({ t: end.t, seq: end.seq, e });
    lane.events.splice(lane.events.indexOf(end), 0, planted({ type: 'text-delta', runId, iteration, text: `mail ${EMAILS[0]}` }));
    lane.events.push(planted(end.e));
    const broken = blockViolations(world, block);
    expect(broken).toContain(`[A] text-delta "mail ${EMAILS[0]}" holds ${EMAILS[0]}`);
    expect(broken).toContain('[A] 2 run-end events');
  });
});
