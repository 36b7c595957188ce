import { z } from 'zod';
import { inputJsonSchema } from '../../src/tools/inputJsonSchema';

describe('inputJsonSchema', () => {
  it("is the schema's input side as draft-7 JSON Schema, without $schema", () => {
    expect(inputJsonSchema(z.object({ city: z.string(), days: z.number().default(1) }), 'w', 'field')).toEqual({
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'number', default: 1 } },
      required: ['city'],
    });
  });

  it('sends coerced dates and bigints as the strings they accept', () => {
    expect(inputJsonSchema(z.object({ at: z.coerce.date(), n: z.coerce.bigint() }), 'w', 'field').properties).toEqual({
      at: { type: 'string', format: 'date-time' },
      n: { type: 'string', pattern: '^-?[0-9]+$' },
    });
  });

  it('refuses a plain date the model must fill, naming the caller, the noun and the path', () => {
    expect(() => inputJsonSchema(z.object({ trip: z.object({ legs: z.array(z.object({ at: z.date() })) }) }), "createAgent: 'output'", 'field')).toThrow(
      "createAgent: 'output': field 'trip.legs[].at' is a z.date(), and no JSON value is one: use z.coerce.date() (sent as an ISO 8601 string)",
    );
    expect(inputJsonSchema(z.object({ at: z.date().optional() }), 'w', 'field').properties).toEqual({ at: {} });
  });
});
