import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool } from '../../src/index';
import { eventsOfType, scriptedModel } from '../../src/testing/index';

const noop = () => 1;

describe('defineTool', () => {
  it('checks its definition', () => {
    expect(() => defineTool({ name: 'bad name', description: '', parameters: z.object({}), execute: () => 1 })).toThrow(/invalid tool name/);
    expect(() => defineTool({ name: 'x', description: '', parameters: {} as never, execute: () => 1 })).toThrow(/needs a zod schema/);
    // A permissions policy would read 'always' as "no approval needed": refused, not run unasked.
    expect(() => defineTool({ name: 'x', description: '', parameters: z.object({}), execute: () => 1, needsApproval: 'always' as never })).toThrow(
      "defineTool: tool 'x': 'needsApproval' must be a boolean or a function (args) => boolean",
    );
    expect(() => defineTool({ name: 'x', description: 42 as never, parameters: z.object({}), execute: () => 1 })).toThrow("'description' must be a string");
  });

  it('wants an object schema: function calling takes named arguments', () => {
    expect(() => defineTool({ name: 'x', description: 'x', parameters: z.string(), execute: (s) => s })).toThrow(
      new TypeError("defineTool: tool 'x' needs a z.object() as 'parameters'"),
    );
    expect(() => defineTool({ name: 'x', description: 'x', parameters: z.date(), execute: (s) => s })).toThrow(
      new TypeError("defineTool: tool 'x' needs a z.object() as 'parameters'"),
    );
  });

  it("sends the schema's input side as draft-7 JSON Schema, without $schema", () => {
    const tool = defineTool({
      name: 'book',
      description: 'Books a room',
      parameters: z.object({
        room: z.string().describe('Room id'),
        nights: z.number().int().default(1),
        note: z
          .string()
          .transform((s) => s.trim())
          .optional(),
      }),
      execute: noop,
    });
    expect(tool.spec).toEqual({
      name: 'book',
      description: 'Books a room',
      parameters: {
        type: 'object',
        properties: {
          room: { type: 'string', description: 'Room id' },
          nights: { type: 'integer', default: 1, minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
          note: { type: 'string' },
        },
        required: ['room'],
      },
    });
  });

  it('sends z.coerce.date() as an ISO 8601 string and z.coerce.bigint() as digits, which they accept', () => {
    const tool = defineTool({
      name: 'remind',
      description: 'Sets a reminder',
      parameters: z.object({ at: z.coerce.date(), times: z.array(z.coerce.date()).optional(), id: z.coerce.bigint() }),
      execute: noop,
    });
    const { properties } = tool.spec.parameters as { properties: Record<string, unknown> };
    expect(properties).toEqual({
      at: { type: 'string', format: 'date-time' },
      times: { type: 'array', items: { type: 'string', format: 'date-time' } },
      id: { type: 'string', pattern: '^-?[0-9]+$' },
    });
    const parsed = tool.parameters.parse({ at: '2026-11-23T09:30:00Z', id: '-12345678901234567890' });
    expect(parsed.at).toEqual(new Date(Date.UTC(2026, 10, 23, 9, 30)));
    expect(parsed.id).toBe(-12345678901234567890n);
  });

  it.each([
    [z.object({ when: z.date() }), "argument 'when' is a z.date(), and no JSON value is one: use z.coerce.date() (sent as an ISO 8601 string)"],
    [z.object({ trip: z.object({ legs: z.array(z.object({ at: z.date() })) }).optional() }), "argument 'trip.legs[].at' is a z.date()"],
    [z.object({ id: z.bigint() }), "argument 'id' is a z.bigint(), and no JSON value is one: use z.coerce.bigint() (sent as a string of digits)"],
    [z.object({ log: z.record(z.string(), z.date()) }), "argument 'log.*' is a z.date()"],
    [z.object({}).catchall(z.date()), "argument '*' is a z.date()"],
    [z.object({ span: z.tuple([z.string(), z.date()]) }), "argument 'span[1]' is a z.date()"],
    // One schema object used twice is judged at each use (zod's JSON Schema walk sees it once).
    [((d) => z.object({ a: d.optional(), b: d }))(z.date()), "argument 'b' is a z.date()"],
    [((d) => z.object({ a: d.optional(), b: z.array(d.nullable()), c: z.tuple([d]) }))(z.date()), "argument 'c[0]' is a z.date()"],
    [z.object({ at: z.string() }).and(z.object({ when: z.date() })), "argument 'when' is a z.date()"],
  ])('refuses a z.date() or z.bigint() that a call must fill, since no JSON value is one (%#)', (parameters, message) => {
    expect(() => defineTool({ name: 'x', description: 'x', parameters, execute: noop })).toThrow(`defineTool: tool 'x': ${message}`);
  });

  const DEFAULT_DATE = { default: '1970-01-01T00:00:00.000Z' };
  it.each([
    ['optional', z.object({ w: z.date().optional() }), {}, { w: {} }],
    ['nullable', z.object({ w: z.date().nullable() }), { w: null }, { w: { anyOf: [{}, { type: 'null' }] } }],
    ['defaulted', z.object({ w: z.date().default(new Date(0)) }), {}, { w: DEFAULT_DATE }],
    ['prefaulted', z.object({ w: z.date().prefault(() => new Date(0)) }), {}, { w: DEFAULT_DATE }],
    ['caught', z.object({ w: z.date().catch(() => new Date(0)) }), {}, { w: DEFAULT_DATE }],
    ['in a union', z.object({ w: z.union([z.string(), z.date()]) }), { w: 'soon' }, { w: { anyOf: [{ type: 'string' }, {}] } }],
    ['after a preprocess', z.object({ w: z.preprocess((v) => new Date(v as string), z.date()) }), { w: '2026-11-23T00:00:00Z' }, { w: {} }],
    [
      'in preprocessed arguments',
      z.preprocess((v) => ({ at: new Date(String((v as { at: string }).at)) }), z.object({ at: z.date() })),
      { at: '2026-11-23' },
      { at: {} },
    ],
    [
      'inside a preprocessed object',
      z.object({ w: z.preprocess((v) => ({ d: new Date(String((v as { d: string }).d)) }), z.object({ d: z.date() })) }),
      { w: { d: '2026-11-23' } },
      { w: { type: 'object', properties: { d: {} }, required: ['d'] } },
    ],
  ])('accepts a plain date a call can satisfy (%s), sent as any value', (_label, parameters, args, sent) => {
    const tool = defineTool({ name: 'x', description: 'x', parameters: parameters as z.ZodObject, execute: noop });
    expect((tool.spec.parameters as { properties: unknown }).properties).toEqual(sent);
    expect(tool.parameters.safeParse(args).success).toBe(true); // and such a call passes the schema
  });

  it('walks a recursive schema once per level: a plain date in it is refused, a coerced one accepted', () => {
    type Node = { at: Date; kids: Node[] };
    const Plain: z.ZodType<Node> = z.object({ at: z.date(), kids: z.lazy(() => z.array(Plain)) });
    expect(() => defineTool({ name: 'x', description: 'x', parameters: Plain, execute: noop })).toThrow("argument 'at' is a z.date()");
    const Coerced: z.ZodType<Node> = z.object({ at: z.coerce.date(), kids: z.lazy(() => z.array(Coerced)) });
    const tool = defineTool({ name: 'x', description: 'x', parameters: Coerced, execute: noop });
    expect(tool.parameters.parse({ at: '2026-11-26T00:00:00Z', kids: [{ at: '2026-11-27T00:00:00Z', kids: [] }] }).kids[0].at).toEqual(
      new Date('2026-11-27T00:00:00Z'),
    );
  });

  it('sends what JSON Schema cannot describe otherwise (z.custom) as any value, checked when the call comes', async () => {
    const tool = defineTool({ name: 'x', description: 'x', parameters: z.object({ blob: z.custom<Uint8Array>((v) => typeof v === 'string') }), execute: noop });
    expect((tool.spec.parameters as { properties: unknown }).properties).toEqual({ blob: {} });
    const model = scriptedModel([{ toolCalls: [{ name: 'x', args: { blob: 42 } }] }, 'done']);
    const events = await lastValueFrom(
      createAgent({ model, tools: [tool] })
        .run('go')
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'tool-result')[0]).toMatchObject({ isError: true, result: expect.stringMatching(/^Invalid arguments for tool 'x'/) });
  });

  it('a z.coerce.date() argument reaches execute as a Date in a run', async () => {
    const seen: unknown[] = [];
    const remind = defineTool({
      name: 'remind',
      description: 'Sets a reminder',
      parameters: z.object({ at: z.coerce.date() }),
      execute: ({ at }) => (seen.push(at), 'ok'),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'remind', args: { at: '2026-11-23T09:30:00.000Z' } }] }, 'set']);
    const events = await lastValueFrom(
      createAgent({ model, tools: [remind] })
        .run('remind me')
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'tool-result')[0]).toMatchObject({ name: 'remind', result: 'ok' });
    expect(seen).toEqual([new Date('2026-11-23T09:30:00.000Z')]);
  });
});
