import { z } from 'zod';
import { defineClientTool, defineTool } from '../../src/index';
import { isTool } from '../../src/tools/isTool';

describe('isTool', () => {
  const server = defineTool({ name: 'now', description: 'The time', parameters: z.object({}), execute: () => 1 });
  const client = defineClientTool({ name: 'pick_color', description: 'Asks the user', parameters: z.object({}) });

  it('takes tools of defineTool and defineClientTool', () => {
    expect(isTool(server)).toBe(true);
    expect(isTool(client)).toBe(true);
  });

  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a string', 'now'],
    ['a function', () => 1],
    ['a spec without execute', { name: 'now', spec: server.spec }],
    ['a tool without its spec', { ...server, spec: undefined }],
    ['a tool whose name is not a string', { ...server, name: 3 }],
  ])('refuses %s', (_what, value) => {
    expect(isTool(value)).toBe(false);
  });
});
