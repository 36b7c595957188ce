import { z } from 'zod';
import { defineTool, type Tool } from '../../src/index';

/**
 * A tool without arguments that keeps the AbortSignal it was given and returns what `result()`
 * returns (a value, a Promise or an Observable): for specs about cancelling a tool.
 */
export function signalTool(name: string, result: () => unknown): { tool: Tool; signal: () => AbortSignal | undefined } {
  let signal: AbortSignal | undefined;
  const tool = defineTool({
    name,
    description: name,
    parameters: z.object({}),
    execute: (_args, ctx) => {
      signal = ctx.signal;
      return result();
    },
  });
  return { tool, signal: () => signal };
}
