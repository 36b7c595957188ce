/**
 * The resume workload's agent, and its child process (`node --import tsx` this file with
 * `{ url, prefix, runId }` as JSON): the child starts a run whose model calls `pay`, prints
 * TOOL-STARTED once the call has started, and waits there to be killed.
 */
import { z } from 'zod';
import { createAgent, defineTool, type AgentStore, type ModelRequest } from '../../src/index';
import { redisStore } from '../../src/redis/index';
import { scriptedModel } from '../../src/testing/index';

/** `hang`: the tool never returns (the child); `finish`: it returns at once. */
export function resumeAgent(store: AgentStore, mode: 'hang' | 'finish') {
  const pay = defineTool({
    name: 'pay',
    description: 'Pays an invoice',
    parameters: z.object({ invoice: z.string() }),
    execute: () => {
      if (mode === 'finish') return { paid: true };
      process.stdout.write('TOOL-STARTED\n');
      return new Promise<never>(() => undefined);
    },
  });
  const answered = (request: ModelRequest) => request.messages.some((m) => m.content.some((part) => part.type === 'tool-result'));
  const model = scriptedModel([(request) => (answered(request) ? 'Done.' : { toolCalls: [{ name: 'pay', args: { invoice: 'INV-7' } }] })], { loop: true });
  return createAgent({ model, tools: [pay], store, leaseMs: 60_000 });
}

if (process.argv[1]?.endsWith('redisResumeChild.ts')) {
  const { url, prefix, runId } = JSON.parse(process.argv[2] ?? '{}') as { url: string; prefix: string; runId: string };
  // Imported here: the bench bundles this file, and loading ioredis slows string methods (see redis.ts).
  void import('ioredis').then(({ default: Redis }) => {
    const client = new Redis(url);
    resumeAgent(redisStore({ client, prefix, retainMs: 0 }), 'hang')
      .run('Pay INV-7', { runId })
      .subscribe();
  });
}
