import { z } from 'zod';
import type { ToolSpec } from '../model/types';
import { checkToolNaming, type Tool } from './defineTool';
import { inputJsonSchema } from './inputJsonSchema';
import { show } from '../internal/show';

/** What {@link defineClientTool} takes: a tool's name, description and arguments, without `execute`. */
export interface ClientToolDefinition<S extends z.ZodType = z.ZodType> {
  name: string;
  description?: string;
  /**
   * The arguments: a `z.object()` schema, or a JSON Schema object (`{ type: 'object', … }`) as an
   * AG-UI client sends it.
   */
  parameters: S | Readonly<Record<string, unknown>>;
}

/**
 * Defines a tool the client runs (a UI's own action): the model may call it, but the run does not
 * execute the call. The run ends instead (`run-end` reason `completed`) and lists the call in
 * `run-end.clientCalls`; the client runs it and sends its result as the next run's input (a `tool`
 * message whose `tool-result` part has the call's `callId`).
 *
 * `parameters` is a `z.object()` schema, whose check a call's arguments must pass (else the model
 * reads the error result, as for any tool, and the call is not left to the client), or a JSON
 * Schema object, given to the model as it is, whose calls only have to be an object of named
 * values: the client, which owns that schema, checks them (as the AI SDK leaves a JSON Schema
 * tool's input unchecked without a validator of its own).
 *
 * @example
 * const pickColor = defineClientTool({
 *   name: 'pick_color',
 *   description: 'Asks the user to pick a color',
 *   parameters: { type: 'object', properties: { palette: { type: 'string' } }, required: ['palette'] },
 * });
 * const agent = createAgent({ model, tools: [pickColor] });
 */
export function defineClientTool<S extends z.ZodType>(definition: ClientToolDefinition<S>): Tool<z.output<S>, never> {
  if (!definition || typeof definition !== 'object') throw new TypeError('defineClientTool: expected a definition object');
  const { name, description, parameters } = definition;
  checkToolNaming('defineClientTool', name, description);
  if ('execute' in definition) {
    throw new TypeError(`defineClientTool: tool '${name}' has an 'execute' function: the client runs its calls (use defineTool for a tool the run executes)`);
  }
  const { schema, jsonSchema } = argumentsOf(name, parameters);
  const spec: ToolSpec = Object.freeze({ name, description: description ?? '', parameters: jsonSchema });
  return Object.freeze({
    name,
    description: description ?? '',
    parameters: schema as z.ZodType<z.output<S>>,
    idempotent: false,
    client: true as const,
    execute: (): never => {
      throw new Error(`Tool '${name}' is run by the client: the run leaves its calls to it (run-end.clientCalls)`);
    },
    spec,
  });
}

/** The schema that checks a call's arguments, and the JSON Schema the model sees. */
function argumentsOf(name: string, parameters: unknown): { schema: z.ZodType; jsonSchema: Record<string, unknown> } {
  if (parameters instanceof z.ZodType) {
    const jsonSchema = inputJsonSchema(parameters, `defineClientTool: tool '${name}'`, 'argument');
    if (jsonSchema.type !== 'object') throw new TypeError(`defineClientTool: tool '${name}' needs a z.object() as 'parameters'`);
    return { schema: parameters, jsonSchema };
  }
  if (parameters === null || typeof parameters !== 'object' || Array.isArray(parameters)) {
    throw new TypeError(`defineClientTool: tool '${name}' needs a zod schema or a JSON Schema object as 'parameters', got ${show(parameters)}`);
  }
  const jsonSchema = parameters as Record<string, unknown>;
  if (jsonSchema.type !== 'object') {
    // The model's function-calling APIs take an object of named arguments, nothing else.
    throw new TypeError(`defineClientTool: tool '${name}': 'parameters' must be a JSON Schema of type 'object', got type ${show(jsonSchema.type)}`);
  }
  // Not checked here: the client owns the schema and checks its calls itself, and a conversion to
  // zod misreads some schemas (a `pattern` with `\p{L}` is compiled without the `u` flag, OpenAPI's
  // `nullable` is not read), which would refuse calls the client takes.
  return { schema: ANY_ARGUMENTS, jsonSchema };
}

/** The arguments of a call whose tool has a JSON Schema: any object of named values. */
const ANY_ARGUMENTS = z.record(z.string(), z.unknown());
