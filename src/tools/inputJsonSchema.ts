import { z } from 'zod';

/**
 * The JSON Schema of what a model must write to satisfy `schema` (its input side): a tool's
 * arguments, a structured answer. JSON holds no Date or BigInt: `z.coerce.date()` and
 * `z.coerce.bigint()` are sent as the strings they accept (an ISO 8601 date-time, a string of
 * digits). A plain `z.date()` or `z.bigint()` that the model must fill (not optional, nullable,
 * defaulted or caught, not in a union, not after a `z.preprocess`) can never be satisfied: a
 * TypeError names it (`${where}: ${noun} 'path' is a z.date()…`). Anything else JSON Schema cannot
 * describe (such a date where it is excused, `z.custom()`) is sent as `{}`: any value, checked by
 * the schema when the answer comes. A top-level plain date is left to the caller, which needs an
 * object anyway. A discriminated union is sent as `anyOf` (its branches exclude each other).
 *
 * @example
 * inputJsonSchema(z.object({ city: z.string() }), "defineTool: tool 'weather'", 'argument');
 * // { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }
 */
export function inputJsonSchema(schema: z.ZodType, where: string, noun: string): Record<string, unknown> {
  const refused = findPlainValue(schema, '', false, new Set());
  if (refused && refused.path !== '') {
    const { path, type } = refused;
    throw new TypeError(
      `${where}: ${noun} '${path}' is a z.${type}(), and no JSON value is one: use z.coerce.${type}() (sent as ${type === 'date' ? 'an ISO 8601 string' : 'a string of digits'})`,
    );
  }
  const json = z.toJSONSchema(schema, {
    target: 'draft-7',
    io: 'input',
    unrepresentable: 'any',
    override: ({ zodSchema, jsonSchema }) => {
      const { type, coerce, discriminator } = zodSchema._zod.def as { type: string; coerce?: boolean; discriminator?: string };
      if (coerce && type === 'date') Object.assign(jsonSchema, { type: 'string', format: 'date-time' });
      else if (coerce && type === 'bigint') Object.assign(jsonSchema, { type: 'string', pattern: '^-?[0-9]+$' });
      else if (type === 'union' && discriminator !== undefined && Array.isArray(jsonSchema.oneOf) && jsonSchema.anyOf === undefined) {
        // Its branches exclude each other (by the discriminator): `anyOf` says the same, and is
        // what OpenAI's strict mode takes (as the openai SDK's zod helper writes it).
        jsonSchema.anyOf = jsonSchema.oneOf;
        delete jsonSchema.oneOf;
      }
    },
  }) as Record<string, unknown>;
  delete json.$schema;
  return json;
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
