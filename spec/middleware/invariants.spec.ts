import {
  Observable,
  Subject,
  catchError,
  concatMap,
  defer,
  delay,
  filter,
  map,
  mergeMap,
  of,
  retry,
  tap,
  throwError,
  timeout,
  timer,
  type MonoTypeOperatorFunction,
} from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import {
  ModelError,
  ToolError,
  createAgent,
  createSession,
  defineState,
  defineTool,
  mapContext,
  textMessage,
  textOf,
  type AgentEvent,
  type AgentMiddleware,
  type AgentResponse,
  type Message,
  type ModelClient,
  type ModelRequest,
  type Session,
  type ToolOutcome,
  type TurnContext,
} from '../../src/index';
import { collectEvents, eventLabel, eventsOfType, scriptedModel } from '../../src/testing/index';
import { Rng, fuzzSeeds } from '../support/random';

/*
 * Seeded random runs of hand-written middleware, in virtual time. Each case draws up to four
 * middleware whose hooks (all ten of the contract) pass the context on, wait, write their own
 * run- and session-scoped state and read it back, emit events, ask a question, rewrite the model
 * request, terminate, skip the model or the tools, block calls, rewrite results and errors, or
 * break: throw, error later, emit no context or two, return something that is not an operator.
 * The wrappers retry, catch, send another request, fall back to another client, time out.
 *
 * From the plan alone the suite computes which hooks run in which order (docs/guide/middleware.md:
 * the hooks and their order), how the run ends and who is named when it fails, and compares.
 *
 * A failing case names its seed; replay one with `FUZZ_SEED=<seed> npx jest spec/middleware/invariants.spec.ts`
 * (`FUZZ_CASES=<n>` runs more cases per block).
 */

/** Events of the middleware here, not in AgentEventMap: emitted with a cast, read by `type`. */
type MwNote = { type: 'mw-note'; runId: string; middleware: string; hook: string };
type MwQuestion = { type: 'mw-question'; runId: string; requestId: string; middleware: string; hook: string };
const custom = <T extends { type: string }>(events: readonly unknown[], type: T['type']) => events.filter((e): e is T => (e as { type: string }).type === type);

// ---------------------------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------------------------

const PHASES = [
  'beforeMessageTurn',
  'beforeIteration',
  'beforeToolExecution',
  'beforeFunction',
  'afterFunction',
  'afterIteration',
  'afterMessageTurn',
  'onError',
] as const;
type Phase = (typeof PHASES)[number];
type Fatal = 'throw' | 'throwInHook' | 'errorAsync' | 'emit0' | 'emit2' | 'nonOp';
type Special = 'none' | 'terminate' | 'skipModel' | 'skipTools' | 'skipToolsResp' | 'block' | 'rewrite' | Fatal;
const FATAL: readonly string[] = ['throw', 'throwInHook', 'errorAsync', 'emit0', 'emit2', 'nonOp'];
const isFatal = (s: string): s is Fatal => FATAL.includes(s);

interface PhasePlan {
  mode: 'mapContext' | 'map' | 'concat';
  delay: number;
  update: boolean;
  emit: boolean;
  ask: boolean;
  /** beforeMessageTurn / beforeIteration: rewrite the request with ctx.with(...) (every time). */
  rewrite: boolean;
  special: Special;
  /** The iteration (the turn, for turn hooks) at which `special` happens. */
  at: number;
  /** onError: which errors its special is for. */
  on: 'tool' | 'run';
}

type WrapModelKind = 'pass' | 'delay' | 'retry' | 'catchCall' | 'call' | 'fallback' | 'throw' | 'nonOp' | 'errorAsync';
type WrapFunctionKind = 'pass' | 'delay' | 'retry' | 'catchRecover' | 'errBack' | 'timeout' | 'errorAsync' | 'throw' | 'nonOp' | 'empty' | 'junk';
const WRAP_MODEL_FATAL: readonly WrapModelKind[] = ['throw', 'nonOp', 'errorAsync'];
const WRAP_FUNCTION_AT: readonly WrapFunctionKind[] = ['throw', 'nonOp', 'empty', 'junk', 'errorAsync'];

interface MwPlan {
  name: string;
  phases: Partial<Record<Phase, PhasePlan>>;
  wrapModel?: { kind: WrapModelKind; at: number; delay: number };
  wrapFunction?: { kind: WrapFunctionKind; at: number; delay: number };
}

type ToolKind = 'instant' | 'delayed' | 'throw' | 'never';
interface CallPlan {
  name: string;
  callId: string;
  k: ToolKind;
  d: number;
}
interface TurnPlan {
  calls?: CallPlan[];
  /** The first attempt of this iteration's model call fails (a retryable ModelError). */
  error: boolean;
  delay: number;
}

interface Case {
  seed: number;
  middleware: MwPlan[];
  plan: TurnPlan[];
  maxIterations: number;
  toolExecution: 'parallel' | 'sequential';
  turns: 1 | 2;
  /** Turn 2 on a session restored from turn 1's snapshot (through JSON). */
  restore: boolean;
  /** Cancel (options.signal) at this virtual time, per turn. */
  cancelAt: Array<number | undefined>;
  answers: 'random' | 'silent';
}

const ASK_TIMEOUT = 100;
const FN_TIMEOUT = 500;

function phaseSpecials(phase: Phase): Special[] {
  switch (phase) {
    case 'beforeMessageTurn':
      return ['terminate'];
    case 'beforeIteration':
      return ['terminate', 'skipModel', 'skipModel'];
    case 'beforeToolExecution':
      return ['terminate', 'skipTools', 'skipToolsResp'];
    case 'beforeFunction':
      return ['block', 'block'];
    case 'afterFunction':
      return ['rewrite'];
    case 'afterIteration':
      return ['terminate'];
    case 'afterMessageTurn':
      return ['terminate'];
    case 'onError':
      return ['rewrite', 'rewrite'];
  }
}

function makeCase(seed: number, opts: { fatal?: number } = {}): Case {
  const rng = new Rng(seed);
  const fatalChance = opts.fatal ?? rng.pick([0, 0.04, 0.08]);
  const n = rng.int(1, 4);
  const middleware: MwPlan[] = [];
  for (let k = 0; k < n; k++) {
    const phases: MwPlan['phases'] = {};
    for (const phase of PHASES) {
      if (!rng.chance(0.6)) continue;
      const mode = rng.pick(['mapContext', 'map', 'concat', 'concat'] as const);
      let special: Special = 'none';
      const r = rng.next();
      if (r < fatalChance) {
        const kinds: Fatal[] =
          mode === 'mapContext'
            ? ['throw']
            : phase === 'onError'
              ? ['throw', 'errorAsync', 'emit0', 'emit2']
              : ['throw', 'throwInHook', 'errorAsync', 'emit0', 'emit2', 'nonOp'];
        special = rng.pick(kinds);
      } else if (r < fatalChance + 0.25) {
        special = rng.pick(phaseSpecials(phase));
      }
      if (mode !== 'concat' && (special === 'errorAsync' || special === 'emit0' || special === 'emit2' || special === 'throwInHook' || special === 'nonOp'))
        special = 'throw';
      phases[phase] = {
        mode,
        delay: mode === 'concat' && rng.chance(0.5) ? rng.int(1, 20) : 0,
        update: rng.chance(0.6),
        emit: rng.chance(0.3),
        ask: mode === 'concat' && phase !== 'onError' && rng.chance(0.15),
        rewrite: (phase === 'beforeMessageTurn' || phase === 'beforeIteration') && rng.chance(0.5),
        special,
        at: phase === 'beforeMessageTurn' || phase === 'afterMessageTurn' ? rng.int(0, 1) : rng.int(0, 3),
        on: rng.pick(['tool', 'run'] as const),
      };
    }
    const mw: MwPlan = { name: `m${k}`, phases };
    if (rng.chance(0.6)) {
      const fatal = rng.chance(fatalChance * 3);
      mw.wrapModel = {
        kind: fatal ? rng.pick(WRAP_MODEL_FATAL) : rng.pick(['pass', 'delay', 'retry', 'catchCall', 'call', 'fallback'] as const),
        at: rng.int(0, 3),
        delay: rng.int(1, 20),
      };
    }
    if (rng.chance(0.6)) {
      const r = rng.next();
      mw.wrapFunction = {
        kind:
          r < fatalChance * 3 ? rng.pick(WRAP_FUNCTION_AT) : rng.pick(['pass', 'delay', 'retry', 'catchRecover', 'errBack', 'timeout', 'errorAsync'] as const),
        at: rng.int(0, 3),
        delay: rng.int(1, 20),
      };
    }
    middleware.push(mw);
  }

  const plan: TurnPlan[] = [];
  for (let i = 0; i < 8; i++) {
    const tools = rng.chance(0.65);
    plan.push({
      ...(tools
        ? {
            calls: Array.from({ length: rng.int(1, 3) }, (_, j) => {
              const k = rng.pick(['instant', 'instant', 'delayed', 'delayed', 'throw', 'throw', 'never'] as const);
              return { name: rng.chance(0.05) ? 'nope' : rng.pick(['t0', 't1', 't2']), callId: `c${i}_${j}`, k, d: k === 'delayed' ? rng.int(1, 60) : 0 };
            }),
          }
        : {}),
      error: rng.chance(0.15),
      delay: rng.chance(0.5) ? 0 : rng.int(1, 20),
    });
  }
  const turns = rng.chance(0.5) ? 2 : 1;
  const c: Case = {
    seed,
    middleware,
    plan,
    maxIterations: rng.int(1, 5),
    toolExecution: rng.chance(0.3) ? 'sequential' : 'parallel',
    turns,
    restore: rng.chance(0.5),
    cancelAt: [],
    answers: rng.chance(0.8) ? 'random' : 'silent',
  };
  for (let t = 0; t < turns; t++) {
    const sim = simulate(c, t);
    // A call that never ends needs a cancel; some others get one too.
    c.cancelAt.push(sim.hang || rng.chance(0.12) ? rng.int(0, 300) : undefined);
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// What the plan says must happen
// ---------------------------------------------------------------------------------------------

interface End {
  reason: 'completed' | 'terminated' | 'max-iterations' | 'error';
  text?: string;
  source?: string;
  middleware?: string;
  /** The error message, or a pattern it must match. */
  message?: string | RegExp;
  /** The error before the onError hooks: what a breach's message must say. */
  original?: string | RegExp;
  /** The failure as it was before the onError hooks (what a cancel while they run reports). */
  origin?: End;
}

interface RequestExpectation {
  instructions: string;
  settings: Record<string, unknown>;
  tools: string[];
  userText: string;
}

interface Sim {
  main: string[];
  perCall: Map<string, string[]>;
  /** The ends the run may reach (more than one when parallel calls race to fail). */
  ends: End[];
  hang: boolean;
  modelIterations: Set<number>;
  requests: Map<number, RequestExpectation>;
  /** Iterations whose model call was skipped or not reached. */
  skipped: Set<number>;
}

const fires = (p: PhasePlan | undefined, at: number): boolean => !!p && p.at === at;
const INPUTS = ['go', 'again'];

function fatalMessage(m: string, hook: string, kind: Fatal | 'wrapThrow'): string | RegExp {
  switch (kind) {
    case 'emit0':
      return `Middleware '${m}' ${hook} emitted 0 contexts; a phase hook must emit exactly one`;
    case 'emit2':
      return `Middleware '${m}' ${hook} emitted 2 contexts; a phase hook must emit exactly one`;
    case 'nonOp':
      return `Middleware '${m}' ${hook} is not an operator: it returned 42`;
    default:
      return `${m} ${hook} failed`;
  }
}

function simulate(c: Case, turn: number): Sim {
  const mws = c.middleware;
  const main: string[] = [];
  const perCall = new Map<string, string[]>();
  const sim: Sim = { main, perCall, ends: [], hang: false, modelIterations: new Set(), requests: new Map(), skipped: new Set() };
  let cur = 'T';
  const rec = (m: string, hook: string, it: string | number = cur) => main.push(`${m}.${hook}@${it}`);
  const withHook = (phase: Phase) => mws.filter((m) => m.phases[phase]);
  const reversed = (phase: Phase) => withHook(phase).reverse();

  /** The run fails with one of `failures`: onError hooks in reverse, then the error event. */
  const failRun = (failures: End[]): Sim => {
    let rewrite: string | undefined;
    let hookFailure: End | undefined;
    for (const m of reversed('onError')) {
      rec(m.name, 'onError');
      const p = m.phases.onError as PhasePlan;
      if (p.on !== 'run') continue;
      if (isFatal(p.special)) {
        hookFailure = { reason: 'error', source: 'middleware', middleware: m.name, message: fatalMessage(m.name, 'onError', p.special) };
        break;
      }
      if (p.special === 'rewrite') rewrite = `rewritten by ${m.name}`;
    }
    sim.ends = failures.map((f) => ({ ...(hookFailure ?? { ...f, original: f.message, message: rewrite ?? f.message }), origin: f }));
    return sim;
  };
  const hookFailure = (m: string, hook: string, kind: Fatal): End => ({
    reason: 'error',
    source: 'middleware',
    middleware: m,
    message: fatalMessage(m, hook, kind),
  });

  // beforeMessageTurn
  let termination: string | undefined;
  let instructions = 'Base.';
  const turnSettings: Record<string, unknown> = {};
  for (const m of withHook('beforeMessageTurn')) {
    rec(m.name, 'beforeMessageTurn', 'T');
    const p = m.phases.beforeMessageTurn as PhasePlan;
    if (fires(p, turn) && isFatal(p.special)) return failRun([hookFailure(m.name, 'beforeMessageTurn', p.special)]);
    if (p.rewrite) {
      instructions += `|${m.name}@T`;
      turnSettings[`T_${m.name}`] = 1;
    }
    if (fires(p, turn) && p.special === 'terminate') termination = `stop:${m.name}:beforeMessageTurn`;
  }

  let endReason: End['reason'] = 'completed';
  let text = '';
  let userText = INPUTS[turn];
  if (termination !== undefined) {
    endReason = 'terminated';
    text = termination;
  } else {
    for (let i = 0; i < c.maxIterations; i++) {
      cur = String(i);
      const fired = new Set<string>();
      let itTermination: string | undefined;
      let skipText: string | undefined;
      let iterationMarks = '';
      const settings: Record<string, unknown> = { ...turnSettings };
      let removedT2 = false;
      for (const m of withHook('beforeIteration')) {
        rec(m.name, 'beforeIteration');
        const p = m.phases.beforeIteration as PhasePlan;
        if (fires(p, i) && isFatal(p.special)) return failRun([hookFailure(m.name, 'beforeIteration', p.special)]);
        if (p.rewrite) {
          iterationMarks += `|${m.name}@${i}`;
          settings[m.name] = i;
          removedT2 = true;
          userText += `+${m.name}@${i}`;
        }
        if (fires(p, i) && p.special === 'terminate') itTermination = `stop:${m.name}:beforeIteration@${i}`;
        if (fires(p, i) && p.special === 'skipModel') skipText = `skipped by ${m.name}@${i}`;
      }
      for (const m of mws) if (m.wrapModel?.kind === 'call') settings[`via_${m.name}`] = true;
      sim.requests.set(i, { instructions: instructions + iterationMarks, settings, tools: removedT2 ? ['t0', 't1'] : ['t0', 't1', 't2'], userText });

      let final = false;
      let calls: CallPlan[] | undefined;
      if (itTermination !== undefined) {
        final = true;
        sim.skipped.add(i);
      } else if (skipText !== undefined) {
        final = true;
        text = skipText;
        sim.skipped.add(i);
      } else {
        const outcome = simulateModel(c, i, rec);
        if (outcome.reachedModel) sim.modelIterations.add(i);
        if (outcome.failure) return failRun([outcome.failure]);
        if (outcome.fallback) {
          final = true;
          text = 'Fallback answer.';
        } else if (c.plan[i].calls) {
          calls = c.plan[i].calls;
          text = '';
        } else {
          final = true;
          text = 'Done.';
        }
      }

      if (calls) {
        let batchTermination: string | undefined;
        let skip: { response?: string } | undefined;
        for (const m of withHook('beforeToolExecution')) {
          rec(m.name, 'beforeToolExecution');
          const p = m.phases.beforeToolExecution as PhasePlan;
          if (fires(p, i) && isFatal(p.special)) return failRun([hookFailure(m.name, 'beforeToolExecution', p.special)]);
          if (fires(p, i) && p.special === 'terminate') batchTermination = `stop:${m.name}:beforeToolExecution@${i}`;
          if (fires(p, i) && p.special === 'skipTools') skip = {};
          if (fires(p, i) && p.special === 'skipToolsResp') skip = { response: `no tools (${m.name}@${i})` };
        }
        if (batchTermination !== undefined) {
          itTermination = batchTermination;
          final = true;
        } else if (skip) {
          if (skip.response !== undefined) {
            final = true;
            text = skip.response;
          }
        } else {
          const batch = simulateBatch(c, i, calls, removedT2, perCall, fired);
          if (batch.failures.length > 0) return failRun(batch.failures);
          if (batch.hang) {
            sim.hang = true;
            return sim;
          }
        }
      }

      for (const m of reversed('afterIteration')) {
        rec(m.name, 'afterIteration');
        const p = m.phases.afterIteration as PhasePlan;
        if (fires(p, i) && isFatal(p.special)) return failRun([hookFailure(m.name, 'afterIteration', p.special)]);
        if (fires(p, i) && p.special === 'terminate') itTermination = `stop:${m.name}:afterIteration@${i}`;
      }
      if (itTermination !== undefined) {
        endReason = 'terminated';
        text = itTermination;
        break;
      }
      if (final) {
        endReason = 'completed';
        break;
      }
      if (i + 1 >= c.maxIterations) endReason = 'max-iterations';
    }
  }

  for (const m of reversed('afterMessageTurn')) {
    rec(m.name, 'afterMessageTurn', 'T');
    const p = m.phases.afterMessageTurn as PhasePlan;
    if (fires(p, turn) && isFatal(p.special)) return failRun([hookFailure(m.name, 'afterMessageTurn', p.special)]);
    if (fires(p, turn) && p.special === 'terminate') {
      endReason = 'terminated';
      text = `stop:${m.name}:afterMessageTurn`;
    }
  }
  sim.ends = [{ reason: endReason, text }];
  return sim;
}

/** The wrapModel chain of iteration `i`: which wrappers are made, and how the call ends. */
function simulateModel(c: Case, i: number, rec: (m: string, hook: string) => void): { failure?: End; fallback?: boolean; reachedModel: boolean } {
  const wrappers = c.middleware
    .filter((m) => m.wrapModel)
    .map((m) => ({ name: m.name, kind: kindAt(m.wrapModel as NonNullable<MwPlan['wrapModel']>, i, WRAP_MODEL_FATAL) }));
  const n = wrappers.length;
  let attempts = 0;
  let reachedModel = false;
  // Built outermost first; a wrapper's operator is applied once the chain inside it is built.
  const build = (k: number): void => {
    if (k === n) return;
    rec(wrappers[k].name, 'wrapModel');
    if (wrappers[k].kind === 'throw') {
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- the simulation's early exit with its failure, caught below
      throw { failure: { reason: 'error', source: 'middleware', middleware: wrappers[k].name, message: `${wrappers[k].name} wrapModel failed` } };
    }
    // Not an operator: named as it is returned, before the wrappers inside it are built.
    if (wrappers[k].kind === 'nonOp') {
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- the simulation's early exit with its failure, caught below
      throw {
        failure: {
          reason: 'error',
          source: 'middleware',
          middleware: wrappers[k].name,
          message: `Middleware '${wrappers[k].name}' wrapModel is not an operator: it returned 42`,
        },
      };
    }
    build(k + 1);
    if (wrappers[k].kind === 'call') build(k + 1);
  };
  try {
    build(0);
  } catch (thrown) {
    return { failure: (thrown as { failure: End }).failure, reachedModel };
  }
  type Out = { ok: true; fallback: boolean } | { ok: false; message: string };
  const run = (k: number, fallbackClient: boolean): Out => {
    if (k === n) {
      if (fallbackClient) return { ok: true, fallback: true };
      reachedModel = true;
      return c.plan[i].error && attempts++ === 0 ? { ok: false, message: 'overloaded' } : { ok: true, fallback: false };
    }
    const { kind, name } = wrappers[k];
    let out: Out;
    switch (kind) {
      case 'errorAsync':
        return { ok: false, message: `${name} wrapModel failed` };
      case 'retry':
        out = run(k + 1, fallbackClient);
        return out.ok ? out : run(k + 1, fallbackClient);
      case 'catchCall':
        out = run(k + 1, fallbackClient);
        if (out.ok) return out;
        build(k + 1);
        return run(k + 1, fallbackClient);
      case 'fallback':
        out = run(k + 1, fallbackClient);
        if (out.ok) return out;
        build(k + 1);
        return run(k + 1, true);
      default:
        return run(k + 1, fallbackClient);
    }
  };
  const out = run(0, false);
  if (!out.ok) return { failure: { reason: 'error', source: 'model', message: out.message }, reachedModel };
  return { fallback: out.fallback, reachedModel };
}

function kindAt<K extends string>(w: { kind: K; at: number }, i: number, atOnly: readonly string[]): K {
  return atOnly.includes(w.kind) && w.at !== i ? ('pass' as K) : w.kind;
}

type Kind = 'value' | 'error' | 'never' | 'empty' | 'junk';

/** One batch of calls: per-call hook records, and the failures the run may end with. */
function simulateBatch(
  c: Case,
  i: number,
  calls: CallPlan[],
  removedT2: boolean,
  perCall: Map<string, string[]>,
  fired: Set<string>,
): { failures: End[]; hang: boolean } {
  const mws = c.middleware;
  const known = removedT2 ? ['t0', 't1'] : ['t0', 't1', 't2'];
  const prepared: Array<{ call: CallPlan; blocked: boolean }> = [];
  for (const call of calls) {
    const records: string[] = [];
    perCall.set(call.callId, records);
    if (!known.includes(call.name)) {
      prepared.push({ call, blocked: true });
      continue;
    }
    let blocked = false;
    for (const m of mws.filter((x) => x.phases.beforeFunction)) {
      const p = m.phases.beforeFunction as PhasePlan;
      const now = p.at === i && !fired.has(`${m.name}.beforeFunction`);
      if (now) fired.add(`${m.name}.beforeFunction`);
      if (now && isFatal(p.special))
        return {
          failures: [{ reason: 'error', source: 'middleware', middleware: m.name, message: fatalMessage(m.name, 'beforeFunction', p.special) }],
          hang: false,
        };
      records.push(`${m.name}.beforeFunction@${i}`);
      if (now && p.special === 'block') blocked = true;
    }
    prepared.push({ call, blocked });
  }

  const failures: End[] = [];
  const sequential = c.toolExecution === 'sequential';
  let hang = false;
  let reachesAfter = false;
  const wrappers = mws
    .filter((m) => m.wrapFunction)
    .map((m) => ({ name: m.name, kind: kindAt(m.wrapFunction as NonNullable<MwPlan['wrapFunction']>, i, WRAP_FUNCTION_AT) }));
  // wrap(fn) is called innermost first: the innermost that throws or is no operator fails the run.
  const broken = [...wrappers].reverse().find((w) => w.kind === 'throw' || w.kind === 'nonOp');
  const executes = prepared.some((x) => !x.blocked);
  if (broken && executes && !sequential) {
    failures.push({
      reason: 'error',
      source: 'middleware',
      middleware: broken.name,
      message: broken.kind === 'throw' ? `${broken.name} wrapFunction failed` : /.+/,
    });
  }
  // One by one, a call starts once the one before has finished (its afterFunction hooks may still
  // be running): a call that never ends or fails as it starts or ends is the last to start. A failing
  // afterFunction hook races with the calls after it, as parallel calls race with each other.
  let stop = false;
  let afterFired = false;
  const fatalAfter = mws.filter((x) => x.phases.afterFunction && x.phases.afterFunction.at === i && isFatal(x.phases.afterFunction.special));
  for (const { call, blocked } of prepared) {
    if (sequential && (stop || hang)) break;
    const records = perCall.get(call.callId) as string[];
    let kind: Kind = 'value';
    // The innermost wrapper whose output completes as no outcome: checked where it leaves that wrapper.
    let blamed: string | undefined;
    if (!blocked && !broken) {
      const layer = (k: number): Kind => {
        const r = sub(k);
        if (k < wrappers.length && (r === 'empty' || r === 'junk')) blamed ??= wrappers[k].name;
        return r;
      };
      const sub = (k: number): Kind => {
        if (k === wrappers.length) return call.k === 'throw' ? 'error' : call.k === 'never' ? 'never' : 'value';
        records.push(`${wrappers[k].name}.wrapFunction@${i}`);
        let r: Kind;
        switch (wrappers[k].kind) {
          case 'errorAsync':
            return 'error';
          case 'retry':
            r = layer(k + 1);
            return r === 'error' ? layer(k + 1) : r;
          case 'catchRecover':
            r = layer(k + 1);
            return r === 'error' ? 'value' : r;
          case 'errBack':
            r = layer(k + 1);
            return r === 'value' || r === 'junk' || r === 'error' ? 'value' : r;
          case 'timeout':
            r = layer(k + 1);
            return r === 'never' ? 'value' : r;
          case 'empty':
            r = layer(k + 1);
            return r === 'error' || r === 'never' ? r : 'empty';
          case 'junk':
            r = layer(k + 1);
            return r === 'error' || r === 'never' || r === 'empty' ? r : 'junk';
          default:
            return layer(k + 1);
        }
      };
      kind = layer(0);
    }
    if (broken && !blocked) {
      stop = true;
      if (sequential)
        failures.push({
          reason: 'error',
          source: 'middleware',
          middleware: broken.name,
          message: broken.kind === 'throw' ? `${broken.name} wrapFunction failed` : /.+/,
        });
      continue;
    }
    if (kind === 'never') {
      hang = true;
      continue;
    }
    if (blamed !== undefined) {
      failures.push({ reason: 'error', source: 'middleware', middleware: blamed, message: new RegExp(`^Middleware '${blamed}' wrapFunction `) });
      stop = true;
      continue;
    }
    if (kind === 'error') {
      let failed = false;
      for (const m of mws.filter((x) => x.phases.onError).reverse()) {
        records.push(`${m.name}.onError@${i}`);
        const p = m.phases.onError as PhasePlan;
        if (p.on === 'tool' && isFatal(p.special)) {
          failures.push({ reason: 'error', source: 'middleware', middleware: m.name, message: fatalMessage(m.name, 'onError', p.special) });
          failed = true;
          stop = true;
          break;
        }
      }
      if (failed) continue;
    }
    reachesAfter = true;
    for (const m of mws.filter((x) => x.phases.afterFunction).reverse()) records.push(`${m.name}.afterFunction@${i}`);
    if (sequential && !afterFired && fatalAfter.length > 0) {
      afterFired = true;
      // reverse order: the last registered of them fails first
      const m = fatalAfter[fatalAfter.length - 1];
      failures.push({
        reason: 'error',
        source: 'middleware',
        middleware: m.name,
        message: fatalMessage(m.name, 'afterFunction', (m.phases.afterFunction as PhasePlan).special as Fatal),
      });
    }
  }
  if (reachesAfter && !sequential) {
    // A failing afterFunction hook fails on the first call that reaches it in this iteration.
    for (const m of mws.filter((x) => x.phases.afterFunction)) {
      const p = m.phases.afterFunction as PhasePlan;
      if (p.at === i && isFatal(p.special))
        failures.push({ reason: 'error', source: 'middleware', middleware: m.name, message: fatalMessage(m.name, 'afterFunction', p.special) });
    }
  }
  return { failures, hang };
}

// ---------------------------------------------------------------------------------------------
// The middleware, the tools and the model, built from the plan
// ---------------------------------------------------------------------------------------------

const RunLog = [0, 1, 2, 3].map((k) => defineState({ key: `fuzz.m${k}.run`, schema: z.array(z.string()), initial: () => [] as string[], scope: 'run' }));
const SessionLog = [0, 1, 2, 3].map((k) =>
  defineState({ key: `fuzz.m${k}.session`, schema: z.array(z.string()), initial: () => [] as string[], scope: 'session' }),
);

interface Shadow {
  run: string[];
  session: string[];
  committedRun: string[];
  committedSession: string[];
}

interface Env {
  ts: TestScheduler;
  turn: number;
  /** The iteration the run is in ('T' before the first). */
  iteration: string;
  main: string[];
  perCall: Map<string, string[]>;
  violations: string[];
  shadows: Shadow[];
  fired: Set<string>;
  /** The onError hooks of a failing run have started (state is back to the last committed). */
  failing: boolean;
  onErrorBroke: boolean;
  cancelledWhileFailing: boolean;
  /** The run's `latest` state is set (an iteration started, or the loop is over). */
  latestSet: boolean;
  afterTurnStarted: boolean;
  notes: number;
  errorsSeenByOnError: string[];
  executions: Array<{ callId: string; kind: ToolKind; finished: boolean; signal: AbortSignal }>;
}

type AnyCtx = {
  state<T>(def: import('../../src/index').StateDef<T>): T;
  updateState<T>(def: import('../../src/index').StateDef<T>, fn: (s: T) => T): AnyCtx;
  emit(e: unknown): void;
  request(e: unknown, o: unknown): Observable<unknown>;
  [k: string]: unknown;
};

function markLastUser(messages: readonly Message[], mark: string): Message[] {
  const at = messages.map((m) => m.role).lastIndexOf('user');
  return messages.map((m, i) => (i === at ? textMessage('user', textOf(m) + mark) : m));
}

function buildMiddleware(mp: MwPlan, k: number, env: Env, fallbackClient: ModelClient): AgentMiddleware {
  const name = mp.name;
  const shadow = () => env.shadows[k];
  const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
  const checkState = (ctx: { state: AnyCtx['state'] }, where: string) => {
    const s = shadow();
    const run = ctx.state(RunLog[k]);
    const session = ctx.state(SessionLog[k]);
    if (!same(run, s.run)) env.violations.push(`${name}.${where}: run state reads ${JSON.stringify(run)}, its writes were ${JSON.stringify(s.run)}`);
    if (!same(session, s.session))
      env.violations.push(`${name}.${where}: session state reads ${JSON.stringify(session)}, its writes were ${JSON.stringify(s.session)}`);
  };

  const phaseHook = (phase: Phase, p: PhasePlan): MonoTypeOperatorFunction<never> => {
    const key = `${name}.${phase}`;
    const turnHook = phase === 'beforeMessageTurn' || phase === 'afterMessageTurn';
    const functionHook = phase === 'beforeFunction' || phase === 'afterFunction';
    /** Whether the special happens now (decided once per call of the hook). */
    const now = (ctx: AnyCtx | undefined): boolean => {
      if (p.special === 'none') return false;
      if (phase === 'onError') return ctx !== undefined && (ctx.source === 'tool' ? 'tool' : 'run') === p.on;
      if (turnHook) return p.at === env.turn;
      if (String(p.at) !== env.iteration) return false;
      if (functionHook) {
        if (env.fired.has(key)) return false;
        env.fired.add(key);
      }
      return true;
    };
    const label = () => `${name}.${phase}@${turnHook ? 'T' : env.iteration}`;
    /** The loop is over once afterMessageTurn starts: the run's `latest` state is what it reached. */
    const enter = () => {
      if (phase === 'afterMessageTurn' && !env.afterTurnStarted && !env.failing) {
        env.afterTurnStarted = true;
        env.latestSet = true;
        commit(env);
      }
    };
    const record = (ctx: AnyCtx, fatal: boolean) => {
      if (functionHook && fatal) return; // on the first call to reach it: not part of a call's sequence
      const callId = ctx.callId as string | undefined;
      if (callId !== undefined && (functionHook || phase === 'onError')) {
        if (!env.perCall.has(callId)) env.perCall.set(callId, []);
        (env.perCall.get(callId) as string[]).push(label());
      } else {
        env.main.push(label());
      }
    };

    /** The synchronous part: record, read back, write, emit, rewrite; returns the context and what to do with it. */
    const step = (given: AnyCtx, fire: boolean): AnyCtx => {
      let ctx = given;
      const toolError = phase === 'onError' && ctx.callId !== undefined;
      const fatal = fire && isFatal(p.special);
      if (phase === 'onError' && !toolError && !env.failing) {
        env.failing = true;
        for (const s of env.shadows) {
          // The state of the last finished iteration; before the first, the turn's start (the session's).
          s.run = [...s.committedRun];
          s.session = [...s.committedSession];
        }
      }
      enter();
      record(ctx, fatal);
      if (phase === 'onError') env.errorsSeenByOnError.push(String((ctx.error as Error)?.message));
      checkState(ctx, phase); // a tool error's onError hooks run in turn with the batch's hooks
      // A hook that breaks has no output: nothing it wrote is kept. When an onError hook breaks,
      // the run ends with the state it had reached, without the onError hooks' writes.
      if (fatal && phase === 'onError' && !toolError) env.onErrorBroke = true;
      if (fatal && p.special === 'throw') throw new Error(`${name} ${phase} failed`);
      if (p.emit) {
        env.notes++;
        ctx.emit({ type: 'mw-note', middleware: name, hook: phase });
      }
      if (p.update && !fatal) {
        const tag = `${phase}@${turnHook ? 'T' : env.iteration}${ctx.callId !== undefined ? `#${String(ctx.callId)}` : ''}`;
        ctx = ctx.updateState(RunLog[k], (s) => [...s, tag]).updateState(SessionLog[k], (s) => [...s, tag]);
        shadow().run.push(tag);
        shadow().session.push(tag);
      }
      if (p.rewrite && phase === 'beforeMessageTurn') {
        const c = ctx as unknown as import('../../src/index').TurnContext;
        ctx = c.with({ instructions: `${c.instructions ?? ''}|${name}@T`, settings: { ...c.settings, [`T_${name}`]: 1 } }) as unknown as AnyCtx;
      }
      if (p.rewrite && phase === 'beforeIteration') {
        const c = ctx as unknown as import('../../src/index').IterationContext;
        ctx = c.with({
          instructions: `${c.instructions ?? ''}|${name}@${c.iteration}`,
          settings: { ...c.settings, [name]: c.iteration },
          tools: c.tools.filter((t) => t.name !== 't2'),
          messages: markLastUser(c.messages, `+${name}@${c.iteration}`),
        }) as unknown as AnyCtx;
      }
      if (fire) {
        const where = turnHook ? '' : `@${env.iteration}`;
        const c = ctx as unknown as Record<string, (...a: unknown[]) => AnyCtx>;
        switch (p.special) {
          case 'terminate':
            ctx = c.terminate(`stop:${name}:${phase}${where}`);
            break;
          case 'skipModel':
            ctx = c.skipModelCall(textMessage('assistant', `skipped by ${name}${where}`));
            break;
          case 'skipTools':
            ctx = c.skipTools();
            break;
          case 'skipToolsResp':
            ctx = c.skipTools(textMessage('assistant', `no tools (${name}${where})`));
            break;
          case 'block':
            ctx = c.block(`blocked by ${name}`);
            break;
          case 'rewrite':
            ctx = phase === 'onError' ? c.with({ error: new Error(`rewritten by ${name}`) }) : c.with({ result: `${String(ctx.result)} +${name}` });
            break;
        }
      }
      return ctx;
    };

    if (p.mode === 'mapContext') return mapContext((ctx: AnyCtx) => step(ctx, now(ctx))) as never;
    if (p.mode === 'map') return map((ctx: AnyCtx) => step(ctx, now(ctx))) as never;
    return ((source: Observable<AnyCtx>) => {
      // throwInHook / nonOp decide before any context is seen (by the iteration the run is in).
      if ((p.special === 'throwInHook' || p.special === 'nonOp') && phase !== 'onError') {
        enter();
        const fire = now(undefined);
        if (fire) {
          if (!functionHook) env.main.push(label());
          if (p.special === 'throwInHook') throw new Error(`${name} ${phase} failed`);
          return 42;
        }
        return source.pipe(map((ctx) => step(ctx, false)));
      }
      return source.pipe(
        concatMap((given) => {
          const fire = now(given);
          const ctx = step(given, fire);
          if (fire && p.special === 'errorAsync')
            return timer(p.delay + 1, env.ts).pipe(mergeMap(() => throwError(() => new Error(`${name} ${phase} failed`))));
          if (fire && p.special === 'emit0') return of(ctx).pipe(filter(() => false));
          if (fire && p.special === 'emit2') return of(ctx, ctx);
          const out = p.delay > 0 ? of(ctx).pipe(delay(p.delay, env.ts)) : of(ctx);
          if (!p.ask) return out;
          return ctx
            .request({ type: 'mw-question', middleware: name, hook: phase }, { timeout: ASK_TIMEOUT, onTimeout: 'no answer' })
            .pipe(concatMap(() => out));
        }),
      );
    }) as never;
  };

  const mw: { -readonly [K in keyof AgentMiddleware]: AgentMiddleware[K] } = { name };
  for (const phase of PHASES) {
    const p = mp.phases[phase];
    if (p) (mw as Record<string, unknown>)[phase] = phaseHook(phase, p);
  }

  if (mp.wrapModel) {
    const w = mp.wrapModel;
    mw.wrapModel = (ctx) => {
      env.main.push(`${name}.wrapModel@${env.iteration}`);
      checkState(ctx, 'wrapModel');
      const kind = kindAt(w, ctx.iteration, WRAP_MODEL_FATAL);
      switch (kind) {
        case 'throw':
          throw new Error(`${name} wrapModel failed`);
        case 'nonOp':
          return 42 as never;
        case 'errorAsync':
          return () => timer(w.delay, ctx.scheduler).pipe(mergeMap(() => throwError(() => new Error(`${name} wrapModel failed`))));
        case 'delay':
          return delay(w.delay, ctx.scheduler);
        case 'retry':
          return retry(1);
        case 'catchCall':
          return catchError(() => ctx.call(ctx.request));
        case 'call':
          return () => ctx.call({ ...ctx.request, settings: { ...ctx.request.settings, [`via_${name}`]: true } });
        case 'fallback':
          return catchError(() => ctx.call(undefined, fallbackClient));
        default:
          return (source) => source;
      }
    };
  }

  if (mp.wrapFunction) {
    const w = mp.wrapFunction;
    mw.wrapFunction = (fn) => {
      const kind = kindAt(w, fn.iteration, WRAP_FUNCTION_AT);
      if (kind === 'throw') throw new Error(`${name} wrapFunction failed`);
      if (kind === 'nonOp') return 42 as never;
      const recordSub = (source: Observable<ToolOutcome>) =>
        defer(() => {
          if (!env.perCall.has(fn.callId)) env.perCall.set(fn.callId, []);
          (env.perCall.get(fn.callId) as string[]).push(`${name}.wrapFunction@${fn.iteration}`);
          return source;
        });
      const op = ((): MonoTypeOperatorFunction<ToolOutcome> => {
        switch (kind) {
          case 'errorAsync':
            return () => timer(w.delay, env.ts).pipe(mergeMap(() => throwError(() => new Error(`${name} wrapFunction failed`))));
          case 'delay':
            return delay(w.delay, env.ts);
          case 'retry':
            return retry(1);
          case 'catchRecover':
            return catchError(() => of({ result: `recovered by ${name}`, isError: false }));
          case 'errBack':
            return (source) =>
              source.pipe(
                map((o) => {
                  if (!o.isError) throw new ToolError(`to error by ${name}`);
                  return o;
                }),
                catchError((e: unknown) => of({ result: `back: ${(e as Error).message}`, isError: false })),
              );
          case 'timeout':
            return timeout({ first: FN_TIMEOUT, scheduler: env.ts, with: () => of({ result: `timed out (${name})`, isError: true }) });
          case 'empty':
            return filter(() => false);
          case 'junk':
            return map(() => 'junk' as unknown as ToolOutcome);
          default:
            return (source) => source;
        }
      })();
      return (source) => recordSub(op(source));
    };
  }
  return mw;
}

function commit(env: Env): void {
  for (const s of env.shadows) {
    s.committedRun = [...s.run];
    s.committedSession = [...s.session];
  }
}

function buildTools(env: Env) {
  return ['t0', 't1', 't2'].map((name) =>
    defineTool({
      name,
      description: `tool ${name}`,
      parameters: z.object({ k: z.enum(['instant', 'delayed', 'throw', 'never']), d: z.number() }),
      execute: ({ k, d }, ctx) => {
        const exec = { callId: ctx.callId, kind: k, finished: false, signal: ctx.signal };
        env.executions.push(exec);
        switch (k) {
          case 'instant':
            exec.finished = true;
            return `${name} done`;
          case 'throw':
            exec.finished = true;
            throw new Error(`${name} failed`);
          case 'delayed':
            return new Observable<string>((subscriber) =>
              env.ts.schedule(() => {
                exec.finished = true;
                subscriber.next(`${name} done after ${d}`);
                subscriber.complete();
              }, d),
            );
          case 'never':
            return new Observable<string>(() => undefined);
        }
      },
    }),
  );
}

/** The iteration a request belongs to: the assistant messages after this turn's user message. */
function iterationOf(request: ModelRequest): number {
  const roles = request.messages.map((m) => m.role);
  return roles.slice(roles.lastIndexOf('user') + 1).filter((r) => r === 'assistant').length;
}

// ---------------------------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------------------------

interface TurnObserved {
  events: Array<{ t: number; e: AgentEvent }>;
  timeline: string[];
  env: Env;
  requests: ModelRequest[];
  completed: boolean;
  observableError: unknown;
  leakedTimers: number[];
  stuck: boolean;
  answers: Array<{ requestId: string; open: boolean }>;
  sessionEnd: string[][];
  snapshotState?: Record<string, { value?: unknown }>;
}

function runTurn(c: Case, turn: number, session: Session | undefined, shadowsIn: Shadow[]): TurnObserved {
  const ts = new TestScheduler((a, b) => expect(a).toEqual(b));
  const personRng = new Rng(c.seed * 31 + turn);
  const env: Env = {
    ts,
    turn,
    iteration: 'T',
    main: [],
    perCall: new Map(),
    violations: [],
    shadows: shadowsIn,
    fired: new Set(),
    failing: false,
    onErrorBroke: false,
    cancelledWhileFailing: false,
    latestSet: false,
    afterTurnStarted: false,
    notes: 0,
    errorsSeenByOnError: [],
    executions: [],
  };
  const sessionAtStart = env.shadows.map((s) => [...s.session]);
  for (const s of env.shadows) {
    s.run = [];
    s.committedRun = [];
    s.committedSession = [...s.session];
  }
  const obs: TurnObserved = {
    events: [],
    timeline: [],
    env,
    requests: [],
    completed: false,
    observableError: undefined,
    leakedTimers: [],
    stuck: false,
    answers: [],
    sessionEnd: [],
  };
  ts.run(() => {
    const own = new Set<unknown>();
    const later = (work: () => void, ms: number) => own.add(ts.schedule(work, ms));
    const attempts = new Map<number, number>();
    const model = scriptedModel(
      [
        (request): import('../../src/testing/index').ScriptedTurn => {
          obs.requests.push({ ...request, messages: [...request.messages] }); // the run's own array grows after the call
          const i = iterationOf(request);
          const n = attempts.get(i) ?? 0;
          attempts.set(i, n + 1);
          const p = c.plan[i];
          if (!p) return { text: 'Out of script.' };
          if (p.error && n === 0) return { error: new ModelError('overloaded', { status: 503, retryable: true }), delay: p.delay };
          return p.calls
            ? { toolCalls: p.calls.map(({ name, callId, k, d }) => ({ name, callId, args: { k, d } })), delay: p.delay }
            : { text: ['Do', 'ne.'], delay: p.delay };
        },
      ],
      { loop: true, scheduler: ts },
    );
    const fallbackClient = scriptedModel(['Fallback answer.'], { loop: true, scheduler: ts });
    const agent = createAgent({
      model,
      instructions: 'Base.',
      tools: buildTools(env),
      middleware: c.middleware.map((mp, k) => buildMiddleware(mp, k, env, fallbackClient)),
      maxIterations: c.maxIterations,
      toolExecution: c.toolExecution,
      scheduler: ts,
    });
    const responses = new Subject<AgentResponse>();
    const controller = new AbortController();
    let ended = false;
    const open = new Set<string>();
    const cancelAt = c.cancelAt[turn];
    if (cancelAt !== undefined)
      later(() => {
        // A cancel while the onError hooks run stops them: the run ends with the state it had reached.
        if (env.failing && !obs.events.some(({ e }) => e.type === 'run-end')) env.onErrorBroke = env.cancelledWhileFailing = true;
        controller.abort();
      }, cancelAt);
    agent.run(INPUTS[turn], { responses, signal: controller.signal, ...(session ? { session } : {}) }).subscribe({
      next: (e) => {
        obs.events.push({ t: ts.now(), e });
        obs.timeline.push(`event:${eventLabel(e)}`);
        if (e.type === 'iteration-start') {
          env.iteration = String(e.iteration);
          env.latestSet = true;
          commit(env);
        }
        if (e.type === 'iteration-end') commit(env);
        if (e.type === 'request-expired') open.delete(e.requestId);
        if (e.type === 'run-end') open.clear();
        const question = custom<MwQuestion>([e], 'mw-question')[0];
        if (question) {
          open.add(question.requestId);
          if (c.answers === 'random' && personRng.chance(0.8)) {
            const send = () => {
              obs.answers.push({ requestId: question.requestId, open: open.has(question.requestId) });
              open.delete(question.requestId);
              // A custom answer, not declared in AgentResponseMap: the runtime passes on any `type`.
              responses.next({ type: 'mw-answer', requestId: question.requestId, ok: true } as unknown as AgentResponse);
            };
            const when = personRng.chance(0.3) ? -1 : personRng.int(0, ASK_TIMEOUT - 1);
            if (when < 0) send();
            else later(send, when);
          }
        }
      },
      error: (error: unknown) => {
        obs.observableError = error ?? new Error('undefined');
        ended = true;
      },
      complete: () => {
        obs.completed = true;
        ended = true;
      },
    });
    let steps = 0;
    while (!ended && ts.actions.length > 0 && steps++ < 100_000) {
      ts.maxFrames = ts.actions[0].delay;
      ts.flush();
    }
    if (!ended) obs.stuck = true;
    obs.leakedTimers = (ts.actions as Array<{ closed: boolean; delay: number | null }>)
      .filter((a) => !a.closed && !own.has(a))
      .map((a) => (a.delay as number) - ts.now());
    ts.maxFrames = 10_000_000;
    ts.flush();
  });

  // What the session holds now, by docs/guarantees.md: everything for a turn that ended normally; what it
  // reached (and the onError hooks wrote) for a failed or cancelled one; nothing of a turn
  // rejected before its first iteration.
  const end = obs.events.find(({ e }) => e.type === 'run-end')?.e as Extract<AgentEvent, { type: 'run-end' }> | undefined;
  obs.sessionEnd = env.shadows.map((s, k) => {
    if (!end) return s.committedSession;
    if (end.reason === 'completed' || end.reason === 'terminated' || end.reason === 'max-iterations') return s.session;
    if (!env.latestSet) return sessionAtStart[k];
    return end.reason === 'error' && env.failing && !env.onErrorBroke ? s.session : s.committedSession;
  });
  for (let k = 0; k < env.shadows.length; k++) env.shadows[k].session = [...obs.sessionEnd[k]];
  return obs;
}

// ---------------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------------

function isPrefix(a: readonly string[], b: readonly string[]): boolean {
  return a.length <= b.length && a.every((x, i) => x === b[i]);
}
const matches = (actual: string, expected: string | RegExp | undefined) =>
  expected === undefined || (typeof expected === 'string' ? actual === expected : expected.test(actual));

function violations(c: Case, turn: number, sim: Sim, obs: TurnObserved): string[] {
  const v: string[] = [...obs.env.violations];
  const events = obs.events.map(({ e }) => e);
  const runEnds = eventsOfType(events, 'run-end');
  const end = runEnds[0];
  const errors = eventsOfType(events, 'error');

  // 1. The run contract.
  if (obs.stuck) v.push('the run never ended although no timer was left');
  if (obs.observableError !== undefined) v.push(`Observable error: ${String(obs.observableError)}`);
  if (events[0]?.type !== 'run-start') v.push(`first event is ${events[0] ? eventLabel(events[0]) : 'missing'}`);
  if (runEnds.length !== 1) v.push(`${runEnds.length} run-end events`);
  else if (events.at(-1) !== end) v.push('run-end is not the last event');
  if (!obs.completed) v.push('the Observable did not complete');
  if (obs.leakedTimers.length > 0) v.push(`${obs.leakedTimers.length} timer(s) still pending after the run (due in ${obs.leakedTimers.join(', ')} ms)`);
  const runId = events[0]?.runId;
  if (events.some((e) => e.runId !== runId)) v.push('an event carries another runId');
  if (errors.length > 1) v.push(`${errors.length} error events`);
  if (end && (end.reason === 'error') !== (errors.length === 1)) v.push(`run-end ${end.reason} with ${errors.length} error event(s)`);
  if (errors[0] && events[events.indexOf(errors[0]) + 1] !== end) v.push('the error event is not followed by run-end');
  const notes = custom<MwNote>(events, 'mw-note').length;
  if (notes !== obs.env.notes) v.push(`${obs.env.notes} mw-note events emitted by hooks, ${notes} seen`);

  // Requests: settled once, before run-end (a failed run closes them with its end).
  for (const q of custom<MwQuestion>(events, 'mw-question')) {
    const expiries = events.filter((e) => e.type === 'request-expired' && e.requestId === q.requestId);
    const answered = obs.answers.filter((a) => a.requestId === q.requestId && a.open).length;
    if (expiries.length + answered > 1) v.push(`request ${q.requestId} settled ${expiries.length + answered} times`);
    if (expiries.length + answered === 0 && end?.reason !== 'error') v.push(`request ${q.requestId} never settled (run ${end?.reason})`);
  }

  // Tool calls and results.
  const calls = new Map<string, string>();
  const results = new Map<string, number>();
  for (const e of events) {
    if (e.type === 'tool-call') {
      if (calls.has(e.callId)) v.push(`tool-call ${e.callId} twice`);
      calls.set(e.callId, e.name);
    }
    if (e.type === 'tool-result') {
      if (calls.get(e.callId) !== e.name) v.push(`tool-result ${e.callId} without its tool-call`);
      results.set(e.callId, (results.get(e.callId) ?? 0) + 1);
    }
  }
  for (const [callId, count] of results) if (count > 1) v.push(`${count} tool-results for ${callId}`);
  const normal = end && ['completed', 'terminated', 'max-iterations'].includes(end.reason);
  if (normal) for (const callId of calls.keys()) if (!results.has(callId)) v.push(`tool-call ${callId} has no tool-result (run ${end.reason})`);
  for (const x of obs.env.executions) {
    if (!x.finished && !x.signal.aborted) v.push(`tool call ${x.callId} (${x.kind}) was left running and its signal not aborted`);
    if (x.finished && x.signal.aborted) v.push(`tool call ${x.callId} finished, yet its signal was aborted`);
  }

  if (!end) return v;
  const cancelled = end.reason === 'cancelled';

  // 2. How the run ends.
  if (cancelled) {
    if (c.cancelAt[turn] === undefined) v.push('cancelled, but nobody cancelled');
  } else {
    if (sim.hang) v.push(`ended ${end.reason}, but a call never finishes and nothing cancelled it`);
    // A cancel while the onError hooks run stops them; the run ends with the error as it was.
    const ends = obs.env.cancelledWhileFailing ? sim.ends.map((x) => x.origin ?? x) : sim.ends;
    const matching = ends.filter(
      (x) =>
        x.reason === end.reason &&
        (x.text === undefined || end.reason === 'error' || x.text === end.text) &&
        (end.reason !== 'terminated' || end.terminationReason === x.text) &&
        (x.reason !== 'error' ||
          (errors[0] && errors[0].source === x.source && errors[0].middleware === x.middleware && matches(errors[0].error.message, x.message))),
    );
    if (matching.length === 0) {
      const got =
        end.reason === 'error' ? `error (${errors[0]?.source}, ${errors[0]?.middleware}: ${errors[0]?.error.message})` : `${end.reason} "${end.text}"`;
      v.push(
        `ended ${got}; the plan says ${ends.map((x) => (x.reason === 'error' ? `error (${x.source}, ${x.middleware}: ${String(x.message)})` : `${x.reason} "${x.text}"`)).join(' or ')}`,
      );
    } else if (end.reason === 'error') {
      // The onError hooks saw the error as it was; a breach's message names the middleware and the hook.
      const original = matching[0].original;
      const first = obs.env.errorsSeenByOnError.at(-1);
      if (original !== undefined && first !== undefined && !obs.env.errorsSeenByOnError.some((m) => matches(m, original) || /^rewritten by /.test(m))) {
        v.push(`the onError hooks never saw the error ${String(original)} (saw ${obs.env.errorsSeenByOnError.join(' | ')})`);
      }
    }
    if (end.reason !== 'terminated' && end.terminationReason !== undefined) v.push('terminationReason on a run that was not terminated');
  }

  // 3. Hook order, as the plan says.
  const alive = !cancelled && !obs.env.cancelledWhileFailing;
  if (alive && !sim.hang ? !same(obs.env.main, sim.main) : !isPrefix(obs.env.main, sim.main)) {
    v.push(`hooks ran\n      ${obs.env.main.join(' ')}\n    the plan says\n      ${sim.main.join(' ')}`);
  }
  const exact = alive && !sim.hang && end.reason !== 'error';
  for (const [callId, seen] of obs.env.perCall) {
    const expected = sim.perCall.get(callId) ?? [];
    if (exact ? !same(seen, expected) : !isPrefix(seen, expected)) v.push(`call ${callId}: hooks ran ${seen.join(' ')}; the plan says ${expected.join(' ')}`);
  }
  if (exact)
    for (const callId of sim.perCall.keys())
      if (!obs.env.perCall.has(callId) && (sim.perCall.get(callId) ?? []).length > 0)
        v.push(`call ${callId}: no hook ran; the plan says ${sim.perCall.get(callId)?.join(' ')}`);

  // 4. What the model was asked: only in iterations that call it, with the rewrites of the hooks.
  const askedIn = new Set<number>();
  for (const request of obs.requests) {
    const i = iterationOf(request);
    askedIn.add(i);
    const expected = sim.requests.get(i);
    if (!sim.modelIterations.has(i) || !expected) {
      v.push(`the model was called in iteration ${i}, which the plan says does not call it`);
      continue;
    }
    if (request.instructions !== expected.instructions)
      v.push(`iteration ${i}: instructions ${JSON.stringify(request.instructions)}, expected ${JSON.stringify(expected.instructions)}`);
    if (!same(sortKeys(request.settings), sortKeys(expected.settings)))
      v.push(`iteration ${i}: settings ${JSON.stringify(request.settings)}, expected ${JSON.stringify(expected.settings)}`);
    if (
      !same(
        request.tools.map((t) => t.name),
        expected.tools,
      )
    )
      v.push(`iteration ${i}: tools ${request.tools.map((t) => t.name).join(',')}, expected ${expected.tools.join(',')}`);
    const users = request.messages.filter((m) => m.role === 'user');
    if (textOf(users.at(-1)) !== expected.userText)
      v.push(`iteration ${i}: user message ${JSON.stringify(textOf(users.at(-1)))}, expected ${JSON.stringify(expected.userText)}`);
  }
  for (const i of sim.skipped) if (askedIn.has(i)) v.push(`iteration ${i} skipped or terminated its model call, yet the model was called`);
  if (exact) for (const i of sim.modelIterations) if (!askedIn.has(i)) v.push(`the model was never called in iteration ${i}`);
  return v;
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
const sortKeys = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));

function describe_(c: Case, turn: number, sim: Sim, obs: TurnObserved): string {
  const mw = c.middleware.map((m) => {
    const phases = Object.entries(m.phases).map(
      ([phase, p]) =>
        `${phase}(${p.mode}${p.delay ? ` ${p.delay}ms` : ''}${p.update ? ' update' : ''}${p.rewrite ? ' with' : ''}${p.ask ? ' ask' : ''}${p.special !== 'none' ? ` ${p.special}@${p.at}${phase === 'onError' ? `/${p.on}` : ''}` : ''})`,
    );
    if (m.wrapModel) phases.push(`wrapModel(${m.wrapModel.kind}@${m.wrapModel.at})`);
    if (m.wrapFunction) phases.push(`wrapFunction(${m.wrapFunction.kind}@${m.wrapFunction.at})`);
    return `    ${m.name}: ${phases.join(' ')}`;
  });
  const plan = c.plan
    .slice(0, c.maxIterations)
    .map(
      (p, i) =>
        `    ${i}: ${p.calls ? p.calls.map((x) => `${x.name}/${x.k}${x.d ? x.d : ''}#${x.callId}`).join(' ') : 'text'}${p.error ? ' (first attempt fails)' : ''}`,
    );
  return [
    `  turn ${turn}, maxIterations ${c.maxIterations}, ${c.toolExecution}, cancel at ${c.cancelAt[turn] ?? 'never'}, turns ${c.turns}${c.turns === 2 ? (c.restore ? ' (restored)' : ' (same session)') : ''}`,
    '  middleware:',
    ...mw,
    '  model:',
    ...plan,
    '  events:',
    ...obs.events.map(
      ({ t, e }) =>
        `    ${t} ${eventLabel(e)}${e.type === 'error' ? ` ${e.source} ${e.middleware ?? ''}: ${e.error.message}` : e.type === 'run-end' ? ` ${JSON.stringify(e.text)}` : e.type === 'tool-result' ? ` ${e.callId} ${JSON.stringify(e.result)}` : ''}`,
    ),
    `  sim ends: ${JSON.stringify(sim.ends)}`,
  ].join('\n');
}

/** Runs every turn of a case; returns its broken invariants. */
function checkCase(c: Case, stats?: Record<string, number>): string[] {
  const out: string[] = [];
  const shadows: Shadow[] = c.middleware.map(() => ({ run: [], session: [], committedRun: [], committedSession: [] }));
  let session: Session | undefined = c.turns === 2 ? createSession({ id: `s${c.seed}` }) : undefined;
  for (let turn = 0; turn < c.turns; turn++) {
    const sim = simulate(c, turn);
    const obs = runTurn(c, turn, session, shadows);
    const broken = violations(c, turn, sim, obs);
    if (stats) {
      const end = eventsOfType(
        obs.events.map(({ e }) => e),
        'run-end',
      )[0];
      const err = eventsOfType(
        obs.events.map(({ e }) => e),
        'error',
      )[0];
      const bump = (k: string) => (stats[k] = (stats[k] ?? 0) + 1);
      bump(`end:${end?.reason}`);
      if (err) bump(`error:${err.source}`);
      for (const h of [...obs.env.main, ...[...obs.env.perCall.values()].flat()]) bump(`hook:${h.split('.')[1].split('@')[0]}`);
    }
    if (session && turn === 0) {
      const snapshot = session.snapshot();
      for (let k = 0; k < c.middleware.length; k++) {
        const stored = (snapshot.state as Record<string, { value?: unknown }>)[`fuzz.m${k}.session`]?.value ?? [];
        if (!same(stored, obs.sessionEnd[k]))
          broken.push(`m${k}: the session snapshot holds ${JSON.stringify(stored)}, the turn left ${JSON.stringify(obs.sessionEnd[k])}`);
        if (`fuzz.m${k}.run` in snapshot.state) broken.push(`m${k}: run-scoped state in the session snapshot`);
      }
      if (c.restore) session = createSession({ snapshot: JSON.parse(JSON.stringify(snapshot)) });
    }
    if (broken.length > 0) {
      out.push(`turn ${turn}:\n  - ${broken.join('\n  - ')}\n${describe_(c, turn, sim, obs)}`);
      break;
    }
  }
  return out;
}

const stats: Record<string, number> = {};
afterAll(() => {
  if (process.env.FUZZ_STATS) console.log(JSON.stringify(stats, null, 1));
});

function checkSeeds(seeds: readonly number[], make: (seed: number) => Case): void {
  const failures: string[] = [];
  for (const seed of seeds) {
    let broken: string[];
    try {
      broken = checkCase(make(seed), process.env.FUZZ_STATS ? stats : undefined);
    } catch (error) {
      broken = [`the case threw ${error instanceof Error ? error.stack : String(error)}`];
    }
    if (broken.length > 0)
      failures.push(`seed ${seed} (replay: FUZZ_SEED=${seed}):\n${failures.length === 0 ? broken.join('\n') : broken[0].split('\n').slice(0, 4).join('\n')}`);
  }
  if (failures.length > 0) throw new Error(`${failures.length} of ${seeds.length} case(s) broke an invariant:\n${failures.join('\n')}`);
}

const { seedsFrom } = fuzzSeeds(100);

describe('hand-written middleware under random plans', () => {
  it.each([
    ['any plan', 10_000, undefined],
    ['no hook fails', 20_000, 0],
    ['hooks fail often', 30_000, 0.12],
  ])('%s (seeds from %i)', (_label, base, fatal) => {
    checkSeeds(seedsFrom(base), (seed) => makeCase(seed, fatal === undefined ? {} : { fatal }));
  });
});

describe('the checks themselves', () => {
  it('see hooks that run in another order than the plan says', () => {
    // The agent is built from the plan with the middleware's hooks in the other order (each name
    // keeps its place, the hooks move), so the hooks run in an order the plan does not say.
    let seed = 20_000;
    while (makeCase(seed, { fatal: 0 }).middleware.length < 3) seed++;
    const c = makeCase(seed, { fatal: 0 });
    const reversed: Case = { ...c, middleware: [...c.middleware].reverse().map((m, k) => ({ ...m, name: c.middleware[k].name })) };
    const shadows: Shadow[] = c.middleware.map(() => ({ run: [], session: [], committedRun: [], committedSession: [] }));
    expect(violations(c, 0, simulate(c, 0), runTurn(reversed, 0, undefined, shadows))).toContainEqual(expect.stringMatching(/^(call \w+: )?hooks ran\n/));
  });
});

// ---------------------------------------------------------------------------------------------
// Found by the random runs: minimal repros
// ---------------------------------------------------------------------------------------------

describe('found by the random runs', () => {
  const ok = defineTool({ name: 'ok', description: 'ok', parameters: z.object({}), execute: () => 'fine' });
  const broken = defineTool({
    name: 'broken',
    description: 'throws',
    parameters: z.object({}),
    execute: () => {
      throw new Error('tool broke');
    },
  });

  // A phase hook or a wrapFunction that is not an operator is reported naming the middleware; a
  // wrapModel that returns something else fails in callModel's `operator(this.chain(...))`, outside
  // the try that names the middleware (src/agent/callModel.ts, ModelCall.chain).
  it('a wrapModel that returns a non-operator fails the run naming the middleware', () => {
    const bad: AgentMiddleware = { name: 'bad', wrapModel: () => 42 as never };
    const events = collectEvents(createAgent({ model: scriptedModel(['hi']), middleware: [bad] }).run('go'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      source: 'middleware',
      middleware: 'bad',
      error: { message: expect.stringContaining("Middleware 'bad' wrapModel") },
    });
  });

  // The outcome check used to run once, outside the outermost wrapper: a pass-through outer wrapper
  // was blamed for what an inner one emitted. Each wrapper's output is checked where it leaves it now.
  it('a wrapFunction that emits something other than an outcome is the one named', () => {
    const outer: AgentMiddleware = { name: 'outer', wrapFunction: () => (source) => source };
    const inner: AgentMiddleware = { name: 'inner', wrapFunction: () => map(() => 'junk' as unknown as ToolOutcome) };
    const model = scriptedModel([{ toolCalls: [{ name: 'ok', args: {} }] }, 'done']);
    const events = collectEvents(createAgent({ model, tools: [ok], middleware: [outer, inner] }).run('go'));
    expect(eventsOfType(events, 'error')[0]).toMatchObject({ source: 'middleware', middleware: 'inner' });
  });

  // The onError hooks of a tool's error used to run over the call's own copy of the state, which
  // was then dropped: what they wrote was lost. They run in turn with the batch's hooks now.
  it("what an onError hook writes for a tool's error is what later hooks read", () => {
    const Errors = defineState({ key: 'repro.errors', schema: z.number(), initial: () => 0 });
    const seen: number[] = [];
    const counter: AgentMiddleware = {
      name: 'counter',
      onError: mapContext((ctx) => ctx.updateState(Errors, (n) => n + 1)),
      afterIteration: tap((ctx) => seen.push(ctx.state(Errors))),
    };
    const model = scriptedModel([{ toolCalls: [{ name: 'broken', args: {} }] }, 'done']);
    collectEvents(createAgent({ model, tools: [broken], middleware: [counter] }).run('go'));
    expect(seen).toEqual([1, 1]);
  });

  // AgentRun.fail used to build the ErrorContext over `latest ?? emptyLoop(agent)`: before the
  // turn's first iteration, onError hooks read the initial value of session-scoped state instead of
  // what the session holds.
  it('onError hooks of a turn rejected in beforeMessageTurn read the session state the session holds', () => {
    const Seen = defineState({ key: 'repro.seen', schema: z.array(z.string()), initial: () => [] as string[], scope: 'session' });
    const session = createSession();
    const writer: AgentMiddleware = { name: 'writer', beforeMessageTurn: mapContext((ctx) => ctx.updateState(Seen, (s) => [...s, 'turn 1'])) };
    collectEvents(createAgent({ model: scriptedModel(['ok']), middleware: [writer] }).run('go', { session }));
    expect(session.snapshot().state['repro.seen']).toEqual({ version: 1, value: ['turn 1'] });
    const read: string[][] = [];
    const rejecter: AgentMiddleware = {
      name: 'rejecter',
      beforeMessageTurn: mapContext<TurnContext>(() => {
        throw new Error('rejected');
      }),
      onError: tap((ctx) => read.push(ctx.state(Seen))),
    };
    collectEvents(createAgent({ model: scriptedModel(['ok']), middleware: [rejecter] }).run('again', { session }));
    expect(read).toEqual([['turn 1']]);
  });
});
