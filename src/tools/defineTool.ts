import type { Observable } from 'rxjs';
import { z } from 'zod';
import type { ToolSpec } from '../model/types';
import { inputJsonSchema } from './inputJsonSchema';

/** What a tool's `execute` receives besides its arguments. */
export interface ToolExecutionContext {
  /** Fires when the run is cancelled or a timeout policy gives up on the call. */
  readonly signal: AbortSignal;
  readonly callId: string;
  readonly runId: string;
  readonly iteration: number;
  /**
   * Reports progress to the run's events as `tool-progress { iteration, callId, value }` (a UI shows
   * it while the call runs). Ignored once the call settled.
   *
   * @example
   * execute: async ({ urls }, ctx) => { for (const [i, url] of urls.entries()) { ctx.progress({ done: i, of: urls.length }); await fetch(url); } }
   */
  progress(this: void, value: unknown): void;
}

/** Whether a call needs a person's approval: a flag, or a predicate over the arguments. */
export type NeedsApproval<A> = boolean | ((args: A) => boolean);

/**
 * A tool the model may call.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a list of tools mixes argument types, and execute takes its own: only any lets a Tool<{ city: string }> stand for a Tool
export interface Tool<A = any, R = unknown> {
  readonly name: string;
  readonly description: string;
  readonly parameters: z.ZodType<A>;
  readonly needsApproval?: NeedsApproval<A>;
  /** Safe to run again with the same arguments: a durable run caught mid-call re-runs it on resume. */
  readonly idempotent?: boolean;
  execute(args: A, ctx: ToolExecutionContext): R | Promise<R> | Observable<R>;
  /** The spec the model sees; its JSON Schema is computed once. */
  readonly spec: ToolSpec;
  /**
   * The client runs its calls (a tool made with `defineClientTool`): the run never calls `execute`,
   * it ends instead, listing the calls in `run-end.clientCalls`.
   */
  readonly client?: true;
}

/** What {@link defineTool} takes. */
export interface ToolDefinition<S extends z.ZodType, R> {
  name: string;
  description: string;
  parameters: S;
  /**
   * Ask a person before a call runs (`true`, or a predicate of the arguments). Enforced by the
   * `permissions()` middleware of `rx-agent/operators`: an agent without it runs the tool unasked.
   */
  needsApproval?: NeedsApproval<z.output<S>>;
  /**
   * Running the call again with the same arguments is safe (a read, an upsert by key). A durable run
   * interrupted while the call ran (its process died) runs it again on resume only then; otherwise
   * the model reads `Tool '<name>' was interrupted; its outcome is unknown.` (default false).
   */
  idempotent?: boolean;
  /** Runs a call. The tool calls it detached from the definition: `this` is not the definition. */
  execute(this: void, args: z.output<S>, ctx: ToolExecutionContext): R | Promise<R> | Observable<R>;
}

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * @internal Checks a tool's name (what model APIs take: 1-64 letters, digits, `_` or `-`) and its
 * optional description, for the factory `owner` that defines it.
 *
 * @example
 * checkToolNaming('defineClientTool', 'pick color', undefined); // TypeError: defineClientTool: invalid tool name "pick color" (…)
 */
export function checkToolNaming(owner: string, name: unknown, description: unknown): asserts name is string {
  if (typeof name !== 'string' || !TOOL_NAME.test(name)) {
    throw new TypeError(`${owner}: invalid tool name ${JSON.stringify(name)} (1-64 letters, digits, '_' or '-')`);
  }
  if (description !== undefined && typeof description !== 'string') {
    throw new TypeError(`${owner}: tool '${name}': 'description' must be a string`);
  }
}

/**
 * Defines a tool whose arguments are checked by a zod schema. `execute` may return a value,
 * a Promise or an Observable, and should stop its work when `ctx.signal` aborts. The model reads
 * the result as JSON (a string as it is): one JSON cannot hold (a `BigInt`, a cycle) becomes the
 * error result `The tool result could not be sent: …`.
 *
 * @example
 * const weather = defineTool({
 *   name: 'get_weather',
 *   description: 'Current weather for a city',
 *   parameters: z.object({ city: z.string() }),
 *   execute: async ({ city }) => ({ city, celsius: 21 }),
 * });
 */
export function defineTool<S extends z.ZodType, R>(definition: ToolDefinition<S, R>): Tool<z.output<S>, R> {
  if (!definition || typeof definition !== 'object') throw new TypeError('defineTool: expected a definition object');
  const { name, description, parameters, execute, needsApproval, idempotent } = definition;
  checkToolNaming('defineTool', name, description);
  if (!(parameters instanceof z.ZodType)) {
    throw new TypeError(`defineTool: tool '${name}' needs a zod schema as 'parameters'`);
  }
  if (typeof execute !== 'function') throw new TypeError(`defineTool: tool '${name}' needs an 'execute' function`);
  if (needsApproval !== undefined && typeof needsApproval !== 'boolean' && typeof needsApproval !== 'function') {
    // A permissions policy reads anything else as "no approval needed": refuse it rather than run unasked.
    throw new TypeError(`defineTool: tool '${name}': 'needsApproval' must be a boolean or a function (args) => boolean`);
  }
  if (idempotent !== undefined && typeof idempotent !== 'boolean') {
    throw new TypeError(`defineTool: tool '${name}': 'idempotent' must be a boolean`);
  }
  const jsonSchema = inputJsonSchema(parameters, `defineTool: tool '${name}'`, 'argument');
  if (jsonSchema.type !== 'object') {
    // The model's function-calling APIs take an object of named arguments, nothing else.
    throw new TypeError(`defineTool: tool '${name}' needs a z.object() as 'parameters'`);
  }
  const spec: ToolSpec = Object.freeze({ name, description: description ?? '', parameters: jsonSchema });
  return Object.freeze({
    name,
    description: description ?? '',
    parameters: parameters as unknown as z.ZodType<z.output<S>>,
    needsApproval,
    idempotent: idempotent === true,
    execute,
    spec,
  });
}
