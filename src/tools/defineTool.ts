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
 * accept (an ISO 8601 date-time, a string of digits). A plain `z.date()` or `z.bigint()` that a
 * call must fill (not optional, nullable, defaulted or caught, not in a union, not after a
 * `z.preprocess`) can never be satisfied: a TypeError names it. Anything else JSON Schema cannot
 * describe (such a date where it is excused, `z.custom()`) is sent as `{}`: any value, checked
 * by the schema when the call comes.
 */
function argumentsSchema(name: string, parameters: z.ZodType): Record<string, unknown> {
  const plain: { path: string; type: string }[] = [];
  // Where a plain date is excused: wrapped in what a call can satisfy without one (at the date's
  // own path), or under a preprocess that may make one (a pipe has the path of what it leads to).
  const wrapped = new Set<string>();
  const preprocessed: string[] = [];
  const schema = z.toJSONSchema(parameters, {
    target: 'draft-7',
    io: 'input',
    unrepresentable: 'any',
    override: ({ zodSchema, jsonSchema, path }) => {
      const def = zodSchema._zod.def as { type: string; coerce?: boolean; in?: z.ZodType };
      const { type } = def;
      if (type === 'optional' || type === 'nullable' || type === 'default' || type === 'prefault' || type === 'catch') {
        wrapped.add(path.join('/'));
      } else if (type === 'pipe' && def.in?._zod.def.type === 'transform') {
        preprocessed.push(path.join('/'));
      } else if (type === 'date' || type === 'bigint') {
        if (def.coerce) Object.assign(jsonSchema, type === 'date' ? { type: 'string', format: 'date-time' } : { type: 'string', pattern: '^-?[0-9]+$' });
        else if (!path.some((key) => key === 'anyOf' || key === 'oneOf')) plain.push({ path: path.join('/'), type });
      }
    },
  }) as Record<string, unknown>;
  // A top-level one is refused below: the arguments must be an object.
  const refused = plain.find(({ path }) => path !== '' && !wrapped.has(path) && !preprocessed.some((at) => at === '' || path === at || path.startsWith(`${at}/`)));
  if (refused) {
    const { path, type } = refused;
    throw new TypeError(
      `defineTool: tool '${name}': argument '${argumentPath(path.split('/'))}' is a z.${type}(), and no JSON value is one: use z.coerce.${type}() (sent as ${type === 'date' ? 'an ISO 8601 string' : 'a string of digits'})`,
    );
  }
  delete schema.$schema;
  return schema;
}

/** A JSON Schema path as an argument's: `properties/trip/properties/legs/items` as `trip.legs[]`. */
function argumentPath(path: readonly string[]): string {
  let text = '';
  for (let i = 0; i < path.length; i++) {
    const key = path[i];
    if (key === 'properties' && i + 1 < path.length) text += (text === '' ? '' : '.') + path[++i];
    else if (key === 'additionalProperties') text += text === '' ? '*' : '.*';
    else if (key === 'items') text += /^\d+$/.test(path[i + 1] ?? '') ? `[${path[++i]}]` : '[]';
  }
  return text;
}
