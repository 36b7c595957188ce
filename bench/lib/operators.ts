/**
 * The five built-in operators every workload runs with (iterationLogging with a silent logger,
 * modelRetry, modelTimeout, piiRedaction on output, costBudget), and permissions for S3.
 *
 * Each is picked up by FILE (`operators/<name>.ts`) when it exists. Until a colleague's file
 * lands, a clearly-labelled STAND-IN with the same hook shape is used, and the report says so.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Observable, concatMap, map, of, retry, timeout, timer, type MonoTypeOperatorFunction } from 'rxjs';
import { z } from 'zod';
import { defineState, type AgentMiddleware, type Message, type ModelUpdate } from '../../src/index';
import { createStreamRedactor, redactText, resolvePiiConfig } from '../../operators/internal/pii';

const operatorsDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'operators');

export interface LoadedOperator {
  readonly name: string;
  /** 'real' = operators/<name>.ts; 'stand-in' = this file's substitute. */
  readonly source: 'real' | 'stand-in';
  readonly middleware: AgentMiddleware;
}

/** The `operators/<name>.ts` module's factory, or undefined when the file does not exist (yet). */
async function loadFactory(name: string): Promise<((options?: any) => AgentMiddleware) | undefined> {
  // bench/profile/build.mjs bundles the operator files that exist and registers them here first.
  const registry = (globalThis as { __rxAgentBenchOperators?: Record<string, any> }).__rxAgentBenchOperators;
  if (registry) return registry[name];
  const file = join(operatorsDir, `${name}.ts`);
  if (!existsSync(file)) return undefined;
  const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  const factory = mod[name];
  if (typeof factory !== 'function') throw new Error(`operators/${name}.ts exists but exports no function '${name}'`);
  return factory as (options?: any) => AgentMiddleware;
}

const silentLogger = { info(_line: string) {}, debug(_line: string) {}, trace(_line: string) {} };

/** Pricing given to costBudget: large budget, so it records cost every call and never terminates. */
export const COST_OPTIONS = { maxCost: 1e9, pricing: { inputPerToken: 1e-6, outputPerToken: 2e-6 } };
export const PII_OPTIONS = { applyToOutput: true };

/** The five operators of S1/S2/S3/abort, in registration order. */
export async function loadFiveOperators(): Promise<LoadedOperator[]> {
  const specs: Array<[string, unknown, () => AgentMiddleware]> = [
    ['iterationLogging', { logger: silentLogger }, () => standInIterationLogging()],
    ['modelRetry', {}, () => standInModelRetry()],
    ['modelTimeout', {}, () => standInModelTimeout()],
    ['piiRedaction', PII_OPTIONS, () => standInPiiRedaction()],
    ['costBudget', COST_OPTIONS, () => standInCostBudget(COST_OPTIONS)],
  ];
  const out: LoadedOperator[] = [];
  for (const [name, options, standIn] of specs) {
    const factory = await loadFactory(name);
    out.push(
      factory
        ? { name, source: 'real', middleware: factory(options) }
        : { name, source: 'stand-in', middleware: standIn() },
    );
  }
  return out;
}

/** permissions() from operators/permissions.ts, or a stand-in beforeFunction that asks with ctx.request. */
export async function loadPermissions(): Promise<LoadedOperator> {
  const factory = await loadFactory('permissions');
  if (factory) return { name: 'permissions', source: 'real', middleware: factory({}) };
  return { name: 'permissions', source: 'stand-in', middleware: standInPermissions() };
}

// ------------------------------------------------------------------------------------------------
// STAND-INS — used only while operators/<name>.ts does not exist. Same hook shapes as the spec in
// ../shared/OPERATORS.md; deliberately lean so that they do not flatter or penalise the runtime.
// ------------------------------------------------------------------------------------------------

/** STAND-IN iterationLogging (info level: beforeIteration/afterIteration, run-scoped start time). */
function standInIterationLogging(): AgentMiddleware {
  const Start = defineState({ key: 'bench.standIn.iterationLogging.start', schema: z.object({ t: z.number().nullable() }), initial: () => ({ t: null }) });
  return {
    name: 'iterationLogging (STAND-IN)',
    beforeIteration: map((ctx) => {
      silentLogger.info(`Iteration ${ctx.iteration} starting (run ${ctx.runId})`);
      return ctx.updateState(Start, () => ({ t: ctx.scheduler.now() }));
    }),
    afterIteration: map((ctx) => {
      silentLogger.info(`Iteration ${ctx.iteration} completed in ${ctx.scheduler.now() - (ctx.state(Start).t ?? 0)}ms`);
      return ctx.updateState(Start, () => ({ t: null }));
    }),
  };
}

/** STAND-IN modelRetry (wrapModel: rxjs retry). */
function standInModelRetry(): AgentMiddleware {
  return { name: 'modelRetry (STAND-IN)', wrapModel: (ctx) => retry({ count: 2, delay: () => timer(1000, ctx.scheduler) }) };
}

/** STAND-IN modelTimeout (wrapModel: rxjs timeout, first and each 30 s). */
function standInModelTimeout(): AgentMiddleware {
  return { name: 'modelTimeout (STAND-IN)', wrapModel: (ctx) => timeout({ first: 30000, each: 30000, scheduler: ctx.scheduler }) };
}

/**
 * STAND-IN piiRedaction({ applyToOutput: true }) — input (default on): the turn's user messages
 * through redactText in beforeMessageTurn; output: wrapModel runs each text delta through the
 * stream redactor of operators/internal/pii.ts (the engine the real operator is built on).
 */
function standInPiiRedaction(): AgentMiddleware {
  const config = resolvePiiConfig({});
  const redactOutput: MonoTypeOperatorFunction<ModelUpdate> = (source) =>
    new Observable<ModelUpdate>((subscriber) => {
      const redactor = createStreamRedactor(config);
      return source.subscribe({
        next(update) {
          if (update.type === 'text-delta') {
            const text = redactor.push(update.text);
            if (text === update.text) subscriber.next(update);
            else if (text !== '') subscriber.next({ type: 'text-delta', text });
            return;
          }
          if (update.type === 'finish') {
            const rest = redactor.flush();
            if (rest !== '') subscriber.next({ type: 'text-delta', text: rest });
          }
          subscriber.next(update);
        },
        error: (e) => subscriber.error(e),
        complete: () => subscriber.complete(),
      });
    });
  return {
    name: 'piiRedaction (STAND-IN)',
    beforeMessageTurn: map((ctx) => {
      let changed = false;
      const input = ctx.input.map((m: Message): Message => {
        if (m.role !== 'user') return m;
        const content = m.content.map((p) => {
          if (p.type !== 'text') return p;
          const r = redactText(p.text, config);
          if (r.text === p.text) return p;
          changed = true;
          return { ...p, text: r.text };
        });
        return changed ? { ...m, content } : m;
      });
      return changed ? ctx.with({ input }) : ctx;
    }),
    wrapModel: () => redactOutput,
  };
}

/** STAND-IN costBudget: cost-recorded after each model call, terminates when over budget. */
function standInCostBudget(options: typeof COST_OPTIONS): AgentMiddleware {
  const Spent = defineState({ key: 'bench.standIn.costBudget.spent', schema: z.object({ total: z.number() }), initial: () => ({ total: 0 }) });
  const { inputPerToken, outputPerToken } = options.pricing;
  return {
    name: 'costBudget (STAND-IN)',
    beforeIteration: map((ctx) => {
      const spent = ctx.state(Spent).total;
      return spent >= options.maxCost ? ctx.terminate(`Budget exhausted: $${spent.toFixed(4)} / $${options.maxCost.toFixed(4)}`) : ctx;
    }),
    afterIteration: map((ctx) => {
      if (ctx.modelCallSkipped) return ctx;
      const inputTokens = ctx.usage?.inputTokens ?? 0;
      const outputTokens = ctx.usage?.outputTokens ?? 0;
      const cost = inputTokens * inputPerToken + outputTokens * outputPerToken;
      const totalCost = ctx.state(Spent).total + cost;
      ctx.emit({ type: 'cost-recorded', inputTokens, outputTokens, cost, totalCost });
      return ctx.updateState(Spent, () => ({ total: totalCost }));
    }),
  };
}

/** STAND-IN permissions: beforeFunction asks with ctx.request for tools with needsApproval. */
function standInPermissions(): AgentMiddleware {
  return {
    name: 'permissions (STAND-IN)',
    beforeFunction: concatMap((ctx) =>
      ctx.tool.needsApproval !== true
        ? of(ctx)
        : ctx
            .request({ type: 'permission-request', callId: ctx.callId, toolName: ctx.toolName, args: ctx.args })
            .pipe(map((r) => ((r as { approved?: unknown }).approved === true ? ctx : ctx.block('denied', { isError: true })))),
    ),
  };
}
