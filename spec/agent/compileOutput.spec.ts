import { z } from 'zod';
import { checkOutput, compileOutput, outputRetryText } from '../../src/agent/compileOutput';

describe('compileOutput', () => {
  it('closes every object (additionalProperties: false) unless the schema says otherwise', () => {
    const { format } = compileOutput(
      z.object({ a: z.object({ b: z.array(z.object({ c: z.string() })) }), loose: z.looseObject({ x: z.string() }), map: z.record(z.string(), z.number()) }),
      1,
      'createAgent',
    );
    type Node = { additionalProperties?: unknown; properties: Record<string, Node>; items: Node };
    const schema = format.schema as unknown as Node;
    expect(schema.additionalProperties).toBe(false);
    expect(schema.properties.a.additionalProperties).toBe(false);
    expect(schema.properties.a.properties.b.items.additionalProperties).toBe(false);
    expect(schema.properties.loose.additionalProperties).toEqual({});
    expect(schema.properties.map.additionalProperties).toEqual({ type: 'number' });
    expect(format.strict).toBe(false);
  });

  it.each([
    ['every field required, nested objects and arrays', z.object({ a: z.string(), b: z.array(z.object({ c: z.number().nullable() })) }), true],
    ['a union of objects', z.object({ u: z.union([z.object({ a: z.string() }), z.object({ b: z.number() })]) }), true],
    ['an enum and a literal', z.object({ e: z.enum(['x', 'y']), l: z.literal(3) }), true],
    ['an optional field', z.object({ a: z.string().optional() }), false],
    ['an optional field deep down', z.object({ a: z.array(z.object({ b: z.string().optional() })) }), false],
    ['a record', z.object({ r: z.record(z.string(), z.string()) }), false],
    ['a loose object', z.looseObject({ a: z.string() }), false],
    ['a default (not required in the input)', z.object({ a: z.string().default('x') }), false],
    [
      'a discriminated union (sent as anyOf)',
      z.object({ v: z.discriminatedUnion('k', [z.object({ k: z.literal('a'), a: z.string() }), z.object({ k: z.literal('b') })]) }),
      true,
    ],
    ['a tuple (one schema per item)', z.object({ t: z.tuple([z.string(), z.number()]) }), false],
    ['an array of unique items (uniqueItems)', z.object({ s: z.array(z.string()).meta({ uniqueItems: true }) }), false],
  ])('strict mode: %s -> %s', (_, schema, strict) => {
    expect(compileOutput(schema, 0, 'createAgent').format.strict).toBe(strict);
  });

  it('sends a discriminated union as anyOf, the form strict mode takes', () => {
    const { format } = compileOutput(z.object({ v: z.discriminatedUnion('k', [z.object({ k: z.literal('a') }), z.object({ k: z.literal('b') })]) }), 0, 'run');
    const v = (format.schema as { properties: { v: Record<string, unknown> } }).properties.v;
    expect(v.oneOf).toBeUndefined();
    expect(v.anyOf).toEqual([
      { type: 'object', properties: { k: { type: 'string', const: 'a' } }, required: ['k'], additionalProperties: false },
      { type: 'object', properties: { k: { type: 'string', const: 'b' } }, required: ['k'], additionalProperties: false },
    ]);
  });

  it("names the format by the schema's title when it is a valid name, and keeps its description", () => {
    expect(compileOutput(z.object({}).meta({ title: 'weather_report' }), 1, 'run').format).toMatchObject({ name: 'weather_report' });
    expect(compileOutput(z.object({}).meta({ title: 'Weather report!' }), 1, 'run').format).toMatchObject({ name: 'final_answer' });
    expect(compileOutput(z.object({}).describe('The plan'), 1, 'run').format).toEqual({
      name: 'final_answer',
      description: 'The plan',
      schema: { type: 'object', properties: {}, additionalProperties: false },
      strict: true,
    });
  });

  it('refuses what is not a z.object() schema, and bad retries, naming the caller', () => {
    expect(() => compileOutput(z.string(), 1, 'run')).toThrow("run: 'output' must be a z.object() schema");
    expect(() => compileOutput(z.object({}), '2', 'run')).toThrow('run: \'outputRetries\' must be an integer >= 0, got "2"');
    expect(() => compileOutput(undefined, 1, 'createAgent')).toThrow("createAgent: 'output' must be a zod schema (e.g. z.object({ ... })), got undefined");
  });
});

describe('checkOutput', () => {
  const output = compileOutput(z.object({ n: z.number().refine((n) => n > 0, 'must be positive') }), 1, 'createAgent');

  it('parses, then checks with the schema', () => {
    expect(checkOutput(output, '{"n": 2}')).toEqual({ ok: true, value: { n: 2 } });
    expect(checkOutput(output, '{"n": -1}')).toMatchObject({ ok: false, problem: '✖ must be positive;   → at n', issues: [{ path: ['n'] }] });
    expect(checkOutput(output, '')).toMatchObject({
      ok: false,
      problem: expect.stringMatching(/^not valid JSON \(Unexpected end of JSON input\)$/),
      issues: [],
    });
  });

  it('a refinement that throws is a failure the model reads, not a crash', () => {
    const throwing = compileOutput(
      z.object({ n: z.number() }).refine(() => {
        throw new Error('refinement broke');
      }),
      1,
      'createAgent',
    );
    expect(checkOutput(throwing, '{"n":1}')).toEqual({ ok: false, problem: 'refinement broke', issues: [] });
  });

  it('the retry text', () => {
    expect(outputRetryText('not valid JSON (x)')).toBe('Invalid output: not valid JSON (x). Answer again with only the JSON that fits the output schema.');
  });
});
