import { z } from 'zod';
import type { OutputFormat } from '../model/types';
import { inputJsonSchema } from '../tools/inputJsonSchema';
import { zodIssues } from '../internal/zodIssues';
import { errorMessage } from '../internal/errorMessage';
import { show } from '../internal/show';

/** A run's structured output: the schema that judges the answer, what the model is told, the retries left to it. */
export interface CompiledOutput {
  readonly schema: z.ZodType;
  readonly format: OutputFormat;
  readonly retries: number;
}

/** What an answer was judged to be. */
export type OutputVerdict =
  { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly problem: string; readonly issues: readonly z.core.$ZodIssue[] };

const NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * Checks an `output` schema and its `outputRetries` (`where` names the caller in errors) and makes
 * the JSON Schema the model is told. Objects without `additionalProperties` get `false` (zod's
 * `z.object()` drops unknown keys, so the model is asked for none), which lets a schema whose every
 * property is required be sent in OpenAI's strict mode.
 */
export function compileOutput(schema: unknown, retries: unknown, where: string): CompiledOutput {
  if (!(schema instanceof z.ZodType)) throw new TypeError(`${where}: 'output' must be a zod schema (e.g. z.object({ ... })), got ${show(schema)}`);
  if (!(typeof retries === 'number' && Number.isInteger(retries) && retries >= 0)) {
    throw new TypeError(`${where}: 'outputRetries' must be an integer >= 0, got ${show(retries)}`);
  }
  const json = inputJsonSchema(schema, `${where}: 'output'`, 'field');
  if (json.type !== 'object') {
    // Structured output APIs (response_format, a tool's parameters) take an object at the top.
    throw new TypeError(`${where}: 'output' must be a z.object() schema (wrap a list or a value in one, e.g. z.object({ items: z.array(...) }))`);
  }
  const { title, description, ...rest } = json;
  const body = closeObjects(rest) as Record<string, unknown>;
  const name = typeof title === 'string' && NAME.test(title) ? title : 'final_answer';
  const format: OutputFormat =
    typeof description === 'string' ? { name, description, schema: body, strict: isStrict(body) } : { name, schema: body, strict: isStrict(body) };
  return { schema, format, retries };
}

/**
 * Judges a final answer: JSON, then the schema. A failure's `problem` is what the model reads
 * (`not valid JSON (…)`, or zod's issues on one line).
 */
export function checkOutput(output: CompiledOutput, text: string): OutputVerdict {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    return { ok: false, problem: `not valid JSON (${errorMessage(error)})`, issues: [] };
  }
  let parsed: ReturnType<z.ZodType['safeParse']>;
  try {
    parsed = output.schema.safeParse(json);
  } catch (error) {
    // A refinement or transform that throws (or is asynchronous): the model reads why.
    return { ok: false, problem: errorMessage(error), issues: [] };
  }
  return parsed.success ? { ok: true, value: parsed.data } : { ok: false, problem: zodIssues(parsed.error), issues: parsed.error.issues };
}

/** What the model reads after an answer that failed. */
export function outputRetryText(problem: string): string {
  return `Invalid output: ${problem}. Answer again with only the JSON that fits the output schema.`;
}

/** A copy of a JSON Schema whose object schemas say `additionalProperties: false` unless they say otherwise. */
function closeObjects(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(closeObjects);
  if (node === null || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    // `properties` and `$defs` map names to schemas; a schema's other keys hold schemas or plain values.
    out[key] = key === 'properties' || key === '$defs' || key === 'definitions' ? mapValues(value, closeObjects) : closeObjects(value);
  }
  if (out.type === 'object' && out.properties !== undefined && !('additionalProperties' in out)) out.additionalProperties = false;
  return out;
}

function mapValues(value: unknown, fn: (v: unknown) => unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) out[key] = fn(v);
  return out;
}

/**
 * What OpenAI's strict mode refuses (the keywords the openai SDK's own strict conversion refuses,
 * and `oneOf`, which the API does not take: a discriminated union is sent as `anyOf`).
 */
const NOT_STRICT_KEYWORDS = [
  'oneOf',
  'allOf',
  'not',
  'if',
  'then',
  'else',
  'additionalItems',
  'prefixItems',
  'contains',
  'minContains',
  'maxContains',
  'uniqueItems',
  'unevaluatedItems',
  'unevaluatedProperties',
  'patternProperties',
  'propertyNames',
  'minProperties',
  'maxProperties',
  'dependencies',
  'dependentRequired',
  'dependentSchemas',
  'contentEncoding',
  'contentMediaType',
  'contentSchema',
];

/**
 * OpenAI's strict mode: every object lists all its properties as required and allows no others
 * (a record, a loose object or an optional field is not strict), an array has one schema for all
 * its items (a tuple is not strict), and none of {@link NOT_STRICT_KEYWORDS} appears.
 */
function isStrict(node: unknown): boolean {
  if (Array.isArray(node)) return node.every(isStrict);
  if (node === null || typeof node !== 'object') return true;
  const schema = node as Record<string, unknown>;
  if (NOT_STRICT_KEYWORDS.some((key) => schema[key] !== undefined)) return false;
  if (schema.type === 'array' && (schema.items === undefined || Array.isArray(schema.items))) return false;
  if (schema.type === 'object' || schema.properties !== undefined) {
    if (schema.additionalProperties !== false) return false;
    const properties = (schema.properties ?? {}) as Record<string, unknown>;
    const required = Array.isArray(schema.required) ? (schema.required as unknown[]) : [];
    if (!Object.keys(properties).every((key) => required.includes(key))) return false;
    if (!Object.values(properties).every(isStrict)) return false;
  }
  for (const key of ['items', 'anyOf', '$defs', 'definitions']) {
    const child = schema[key];
    if (child === undefined) continue;
    const children = key === '$defs' || key === 'definitions' ? Object.values(child as object) : child;
    if (!isStrict(children)) return false;
  }
  return true;
}
