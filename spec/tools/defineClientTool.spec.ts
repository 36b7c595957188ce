import * as E from 'fp-ts/lib/Either.js';
import { z } from 'zod';
import { createAgent, defineClientTool, defineTool } from '../../src/index';
import { parseArguments } from '../../src/tools/parseArguments';
import { scriptedModel } from '../../src/testing/index';

const colorSchema = { type: 'object', properties: { palette: { type: 'string' } }, required: ['palette'] };

describe('defineClientTool', () => {
  it('with a zod schema: a client tool whose spec is the schema as JSON Schema', () => {
    const tool = defineClientTool({ name: 'pick_color', description: 'Asks the user', parameters: z.object({ palette: z.string() }) });
    expect(tool.client).toBe(true);
    expect(tool.spec).toEqual({
      name: 'pick_color',
      description: 'Asks the user',
      parameters: expect.objectContaining({ type: 'object', properties: { palette: { type: 'string' } }, required: ['palette'] }),
    });
    expect(E.isRight(parseArguments(tool, { palette: 'warm' }))).toBe(true);
    expect(parseArguments(tool, { palette: 3 })).toEqual(E.left(expect.stringContaining("Invalid arguments for tool 'pick_color'")));
  });

  it('with a JSON Schema: the model is given it as it is, and any object of arguments goes to the client, which owns the schema', () => {
    const tool = defineClientTool({ name: 'pick_color', description: 'Asks the user', parameters: colorSchema });
    expect(tool.spec.parameters).toBe(colorSchema);
    expect(E.isRight(parseArguments(tool, { palette: 'warm' }))).toBe(true);
    expect(E.isRight(parseArguments(tool, {}))).toBe(true);
    // What a conversion to zod would misread: a Unicode property escape, OpenAPI's nullable.
    const named = defineClientTool({
      name: 'name_it',
      parameters: { type: 'object', properties: { name: { type: 'string', pattern: '^\\p{L}+$' }, note: { type: 'string', nullable: true } } },
    });
    expect(E.isRight(parseArguments(named, { name: 'été', note: null }))).toBe(true);
    expect(E.isLeft(parseArguments(named, ['not', 'an', 'object']))).toBe(true);
  });

  it('a JSON Schema zod cannot convert: the model still gets it', () => {
    const odd = { type: 'object', properties: { a: { $ref: '#/definitions/missing' } } };
    const tool = defineClientTool({ name: 'odd', parameters: odd });
    expect(tool.spec).toEqual({ name: 'odd', description: '', parameters: odd });
    expect(E.isRight(parseArguments(tool, { a: 1 }))).toBe(true);
  });

  it('is a tool an agent takes, whose execute is never meant to run', () => {
    const tool = defineClientTool({ name: 'pick_color', parameters: colorSchema });
    expect(() => createAgent({ model: scriptedModel([]), tools: [tool] })).not.toThrow();
    expect(() => tool.execute({}, {} as never)).toThrow("Tool 'pick_color' is run by the client");
  });

  it('refuses bad definitions, naming what is wrong', () => {
    expect(() => defineClientTool(null as never)).toThrow(new TypeError('defineClientTool: expected a definition object'));
    expect(() => defineClientTool({ name: 'bad name', parameters: colorSchema })).toThrow(
      new TypeError(`defineClientTool: invalid tool name "bad name" (1-64 letters, digits, '_' or '-')`),
    );
    expect(() => defineClientTool({ name: 'x', description: 3 as never, parameters: colorSchema })).toThrow(
      new TypeError("defineClientTool: tool 'x': 'description' must be a string"),
    );
    expect(() => defineClientTool({ name: 'x', parameters: 'object' as never })).toThrow(
      new TypeError(`defineClientTool: tool 'x' needs a zod schema or a JSON Schema object as 'parameters', got "object"`),
    );
    expect(() => defineClientTool({ name: 'x', parameters: { type: 'string' } })).toThrow(
      new TypeError(`defineClientTool: tool 'x': 'parameters' must be a JSON Schema of type 'object', got type "string"`),
    );
    expect(() => defineClientTool({ name: 'x', parameters: z.string() })).toThrow(
      new TypeError("defineClientTool: tool 'x' needs a z.object() as 'parameters'"),
    );
    const server = { name: 'x', description: '', parameters: z.object({}), execute: () => 1 };
    expect(() => defineClientTool(server)).toThrow(/defineClientTool: tool 'x' has an 'execute' function/);
    expect(() => defineTool(server)).not.toThrow();
  });
});
