import type { Observable } from 'rxjs';
import { z } from 'zod';
import type { ToolSpec } from '../model/types';

/** What a tool's `execute` receives besides its arguments. */
export interface ToolExecutionContext {
  /** Fires when the run is cancelled or a timeout policy gives up on the call. */
  readonly signal: AbortSignal;
  readonly callId: string;
  readonly runId: string;
  readonly iteration: number;
}

/** Whether a call needs a person's approval: a flag, or a predicate over the arguments. */
export type NeedsApproval<A> = boolean | ((args: A) => boolean);

/**
 * A tool the model may call.
 */
export interface Tool<A = any, R = unknown> {
  readonly name: string;
  readonly description: string;
  readonly parameters: z.ZodType<A>;
  readonly needsApproval?: NeedsApproval<A>;
  execute(args: A, ctx: ToolExecutionContext): R | Promise<R> | Observable<R>;
  /** The spec the model sees; its JSON Schema is computed once. */
  readonly spec: ToolSpec;
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
  execute(args: z.output<S>, ctx: ToolExecutionContext): R | Promise<R> | Observable<R>;
}

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * Defines a tool whose arguments are checked by a zod schema. `execute` may return a value,
 * a Promise or an Observable, and should stop its work when `ctx.signal` aborts.
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
  const { name, description, parameters, execute, needsApproval } = definition;
  if (typeof name !== 'string' || !TOOL_NAME.test(name)) {
    throw new TypeError(`defineTool: invalid tool name ${JSON.stringify(name)} (1-64 letters, digits, '_' or '-')`);
  }
  if (!(parameters instanceof z.ZodType)) {
    throw new TypeError(`defineTool: tool '${name}' needs a zod schema as 'parameters'`);
  }
  if (typeof execute !== 'function') throw new TypeError(`defineTool: tool '${name}' needs an 'execute' function`);
  if (description !== undefined && typeof description !== 'string') {
    throw new TypeError(`defineTool: tool '${name}': 'description' must be a string`);
  }
  if (needsApproval !== undefined && typeof needsApproval !== 'boolean' && typeof needsApproval !== 'function') {
    // A permissions policy reads anything else as "no approval needed": refuse it rather than run unasked.
    throw new TypeError(`defineTool: tool '${name}': 'needsApproval' must be a boolean or a function (args) => boolean`);
  }
  const jsonSchema = argumentsSchema(name, parameters);
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
    execute,
    spec,
  });
}

/**
 * The JSON Schema of a tool's arguments, as the model sees them (the schema's input side). JSON
 * holds no Date or BigInt: `z.coerce.date()` and `z.coerce.bigint()` are sent as the strings they
 * accept (an ISO 8601 date-time, a string of digits), and a `z.date()` or `z.bigint()` that would
 * refuse every call is a TypeError naming the argument. Anything else JSON Schema cannot describe
 * (`z.custom()`, say) is sent as `{}`: any value, checked by the schema when the call comes.
 */
function argumentsSchema(name: string, parameters: z.ZodType): Record<string, unknown> {
  let refused: string | undefined;
  const schema = z.toJSONSchema(parameters, {
    target: 'draft-7',
    io: 'input',
    unrepresentable: 'any',
    override: ({ zodSchema, jsonSchema, path }) => {
      const { type, coerce } = zodSchema._zod.def as { type: string; coerce?: boolean };
      if (type !== 'date' && type !== 'bigint') return;
      if (!coerce) {
        // (A top-level one is refused below: the arguments must be an object.)
        if (path.length > 0) refused ??= `argument '${argumentPath(path)}' is a z.${type}(), which JSON cannot hold: use z.coerce.${type}() (sent as ${type === 'date' ? 'an ISO 8601 string' : 'a string of digits'})`;
      } else if (type === 'date') {
        Object.assign(jsonSchema, { type: 'string', format: 'date-time' });
      } else {
        Object.assign(jsonSchema, { type: 'string', pattern: '^-?[0-9]+$' });
      }
    },
  }) as Record<string, unknown>;
  if (refused !== undefined) throw new TypeError(`defineTool: tool '${name}': ${refused}`);
  delete schema.$schema;
  return schema;
}

/** `['properties', 'trip', 'properties', 'dates', 'items']` as `trip.dates[]`. */
function argumentPath(path: readonly (string | number)[]): string {
  let text = '';
  for (let i = 0; i < path.length; i++) {
    if (path[i] === 'properties' && i + 1 < path.length) text += (text === '' ? '' : '.') + String(path[++i]);
    else if (path[i] === 'items') text += '[]';
  }
  return text;
}
