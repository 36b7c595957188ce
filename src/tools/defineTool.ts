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
  const { name, description, parameters, execute, needsApproval, idempotent } = definition;
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
  if (idempotent !== undefined && typeof idempotent !== 'boolean') {
    throw new TypeError(`defineTool: tool '${name}': 'idempotent' must be a boolean`);
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
    idempotent: idempotent === true,
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
  const refused = findPlainValue(parameters, '', false, new Set());
  if (refused && refused.path !== '') {
    // (A top-level one is refused by the caller: the arguments must be an object.)
    const { path, type } = refused;
    throw new TypeError(
      `defineTool: tool '${name}': argument '${path}' is a z.${type}(), and no JSON value is one: use z.coerce.${type}() (sent as ${type === 'date' ? 'an ISO 8601 string' : 'a string of digits'})`,
    );
  }
  const schema = z.toJSONSchema(parameters, {
    target: 'draft-7',
    io: 'input',
    unrepresentable: 'any',
    override: ({ zodSchema, jsonSchema }) => {
      const { type, coerce } = zodSchema._zod.def as { type: string; coerce?: boolean };
      if (coerce && type === 'date') Object.assign(jsonSchema, { type: 'string', format: 'date-time' });
      else if (coerce && type === 'bigint') Object.assign(jsonSchema, { type: 'string', pattern: '^-?[0-9]+$' });
    },
  }) as Record<string, unknown>;
  delete schema.$schema;
  return schema;
}

/** The parts of a zod definition the walk below reads. */
interface WalkedDef {
  type: string;
  coerce?: boolean;
  innerType?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  catchall?: z.ZodType;
  element?: z.ZodType;
  valueType?: z.ZodType;
  items?: z.ZodType[];
  rest?: z.ZodType | null;
  left?: z.ZodType;
  right?: z.ZodType;
  in?: z.ZodType;
  getter?: () => z.ZodType;
}

/**
 * The first plain date or bigint a call must fill, with its argument path (`trip.legs[].at`,
 * `log.*`, `span[1]`). Every use of a schema object is walked, so one used twice is judged at
 * each place (zod's JSON Schema `override` sees it once). `excused`: a wrapper at this very path
 * lets a call leave it out.
 */
function findPlainValue(schema: z.ZodType, path: string, excused: boolean, walking: Set<z.ZodType>): { path: string; type: string } | undefined {
  if (walking.has(schema)) return undefined; // a recursive z.lazy(): its first pass covers it
  const def = schema._zod.def as WalkedDef;
  const at = (key: string) => (path === '' ? key : `${path}.${key}`);
  walking.add(schema);
  try {
    switch (def.type) {
      case 'date':
      case 'bigint':
        return def.coerce || excused ? undefined : { path, type: def.type };
      case 'optional':
      case 'nullable':
      case 'default':
      case 'prefault':
      case 'catch':
        return findPlainValue(def.innerType!, path, true, walking);
      case 'nonoptional':
      case 'readonly':
        return findPlainValue(def.innerType!, path, excused, walking);
      case 'object': {
        for (const key of Object.keys(def.shape!)) {
          const found = findPlainValue(def.shape![key], at(key), false, walking);
          if (found) return found;
        }
        return def.catchall ? findPlainValue(def.catchall, at('*'), false, walking) : undefined;
      }
      case 'array':
        return findPlainValue(def.element!, `${path}[]`, false, walking);
      case 'record':
        return findPlainValue(def.valueType!, at('*'), false, walking);
      case 'tuple': {
        const items = def.items!;
        for (let i = 0; i < items.length; i++) {
          const found = findPlainValue(items[i], `${path}[${i}]`, false, walking);
          if (found) return found;
        }
        return def.rest ? findPlainValue(def.rest, `${path}[]`, false, walking) : undefined;
      }
      case 'intersection':
        return findPlainValue(def.left!, path, excused, walking) ?? findPlainValue(def.right!, path, excused, walking);
      case 'pipe':
        // A preprocess (a transform first) may make a date of anything: nothing under it is refused.
        return def.in!._zod.def.type === 'transform' ? undefined : findPlainValue(def.in!, path, excused, walking);
      case 'lazy':
        // zod's own cached inner schema: a getter may build a new one on every call.
        return findPlainValue((schema._zod as { innerType?: z.ZodType }).innerType ?? def.getter!(), path, excused, walking);
      default:
        // A union (a call may choose another member), and every type that holds no argument.
        return undefined;
    }
  } finally {
    walking.delete(schema);
  }
}
