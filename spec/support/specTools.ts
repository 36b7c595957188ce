import { z } from 'zod';
import { defineTool } from '../../src/index';

/** A tool that needs a person's approval (permissions()) and pays `n`. */
export const payTool = defineTool({
  name: 'pay',
  description: 'Pays',
  parameters: z.object({ n: z.number() }),
  needsApproval: true,
  execute: ({ n }) => `paid ${n}`,
});

/**
 * A tool whose progress and result JSON cannot hold: progress `{ n: 5n }`, then a cyclic object,
 * then the result `{ what, n: 10n }`.
 */
export function unencodableCountTool() {
  const cycle: Record<string, unknown> = { name: 'loop' };
  cycle.self = cycle;
  return defineTool({
    name: 'count',
    description: 'Counts',
    parameters: z.object({ what: z.string() }),
    execute: ({ what }, ctx) => {
      ctx.progress({ n: 5n });
      ctx.progress(cycle);
      return { what, n: 10n };
    },
  });
}
