import { EventSchemas } from '@ag-ui/core/schemas';
import { z } from 'zod';
import { createAgent, defineTool, type AgentStore } from '../../src/index';
import { permissions } from '../../operators/index';
import { scriptedModel } from '../../src/testing/index';

/** Every event checked with @ag-ui/core's own schema; the issues of those that fail. */
export function schemaFailures(events: readonly unknown[]): string[] {
  const failures: string[] = [];
  for (const event of events) {
    const parsed = EventSchemas.safeParse(event);
    if (!parsed.success) failures.push(`${JSON.stringify(event)}: ${parsed.error.message}`);
  }
  return failures;
}

/**
 * A restaurant agent: it reasons, says so, asks to book (needs approval), then confirms.
 * `another(store?)` is the same agent made again over the same model and tools, on the same store
 * (or on `store`, another connection to it): what a second server of the same app runs.
 */
export function bookingAgent(options: { store?: AgentStore; permissionTimeout?: number } = {}) {
  const booked: string[] = [];
  const book = defineTool({
    name: 'book_table',
    description: 'Books a table',
    parameters: z.object({ time: z.string() }),
    needsApproval: true,
    execute: async ({ time }, ctx) => {
      ctx.progress({ step: 'calling the restaurant' });
      booked.push(time);
      return { booked: time };
    },
  });
  const model = scriptedModel([
    { reasoning: 'They want 7pm.', text: 'Booking.', toolCalls: [{ name: 'book_table', args: { time: '19:00' }, callId: 'c1' }] },
    'Booked for 19:00.',
    'You are welcome.',
  ]);
  const middleware = [permissions(options.permissionTimeout === undefined ? {} : { timeout: options.permissionTimeout })];
  const another = (store = options.store) => createAgent({ name: 'booker', model, tools: [book], middleware, store });
  return { agent: another(), booked, model, another };
}
