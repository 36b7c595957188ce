import { z } from 'zod';
import { createAgent, defineTool } from '../../src/index';
import { toolTimeout } from '../../operators/index';
import { scriptedModel } from '../../src/testing/index';

const tick = (ms = 5) => new Promise((resolve) => setTimeout(resolve, ms));

/** A tool that awaits `gate` (fetching a token, say) before it first reads `ctx.signal`. */
function lateReader() {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const seen: { aborted?: boolean; reason?: string } = {};
  const tool = defineTool({
    name: 'late',
    description: 'Awaits, then reads its signal',
    parameters: z.object({}),
    execute: async (_args, ctx) => {
      await gate;
      seen.aborted = ctx.signal.aborted;
      seen.reason = (ctx.signal.reason as Error | undefined)?.message;
      return 'done';
    },
  });
  return { tool, seen, release: () => release() };
}

describe('ctx.signal of a tool call', () => {
  it('is already aborted when first read after the run was cancelled', async () => {
    const { tool, seen, release } = lateReader();
    const handle = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'late', args: {} }] }]), tools: [tool] }).start('go');
    await tick();
    handle.cancel();
    release();
    await tick();
    expect(seen).toEqual({ aborted: true, reason: "Tool 'late' was cancelled" });
  });

  it('is already aborted when first read after toolTimeout gave up on the call', async () => {
    const { tool, seen, release } = lateReader();
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'late', args: {} }] }, 'ok']), tools: [tool], middleware: [toolTimeout({ ms: 5 })] });
    expect((await agent.invoke('go')).text).toBe('ok');
    release();
    await tick();
    expect(seen.aborted).toBe(true);
  });
});
