// The specs of an agent on a durable store in one process (suspend, answer, resume, cancel,
// events and runs.get by id, with hostile ids and texts, the errors of unknown and finished
// runs), run by each store's own spec file against its server.
import { randomUUID } from 'node:crypto';
import { lastValueFrom, toArray, type Observable } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineClientTool, defineTool, type AgentEvent, type AgentStore, type Message, type ModelRequest } from '../../src/index';
import { permissions } from '../../operators/permissions';
import { scriptedModel } from '../../src/testing/index';
import { unpairedToolCalls } from './durableRuns';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));

/** An agent on `store` whose model calls `pay` (approval needed) once, then answers with what it read. */
function payingAgent(store: AgentStore) {
  const ran: string[] = [];
  const pay = defineTool({
    name: 'pay',
    description: 'Pays',
    parameters: z.object({ memo: z.string() }),
    needsApproval: true,
    execute: ({ memo }) => {
      ran.push(memo);
      return `paid: ${memo}`;
    },
  });
  const answered = (request: ModelRequest) => request.messages.some((m) => m.content.some((part) => part.type === 'tool-result'));
  const model = scriptedModel(
    [
      (request) => {
        if (answered(request)) return 'Done.';
        const input = request.messages.find((m) => m.role === 'user')?.content.find((part) => part.type === 'text');
        return { toolCalls: [{ name: 'pay', args: { memo: (input as { text: string }).text }, callId: 'c1' }] };
      },
    ],
    { loop: true },
  );
  const agent = createAgent({ model, tools: [pay], middleware: [permissions()], store, onRequest: 'suspend' });
  return { agent, ran };
}

/** Run ids that a store must keep as they are, whatever its server does with quotes, NULs or size. */
export const HOSTILE_RUN_IDS: readonly (readonly [string, string])[] = [
  ['quotes and braces', `run "x" 'y' {z}`],
  ['NUL, newlines and a lone surrogate', 'run\u0000\n\r\uD800'],
  ['1 MB', `run-${'m'.repeat(1 << 20)}`],
];

/**
 * Describes "an agent on <name>": `store()` gives a store on the spec file's server (a new one per
 * agent, as two processes would have), `hostileIds` the run ids to try beside the usual ones.
 */
export function describeAgentOnStore(name: string, store: () => AgentStore, hostileIds: readonly (readonly [string, string])[] = HOSTILE_RUN_IDS): void {
  describe(`an agent on ${name}`, () => {
    it.each([...hostileIds])(
      'suspends, is answered, resumed and followed by id: an id with %s',
      async (_, id) => {
        const text = `pay "this" \u0000 ${'t'.repeat(1 << 20)} \uDC00 🦊`;
        const sessionId = `session ${id}`;
        const a = payingAgent(store());
        const first = await collect(a.agent.run(text, { runId: id, sessionId }));
        const end = first.at(-1) as Extract<AgentEvent, { type: 'run-end' }>;
        expect(end).toMatchObject({ type: 'run-end', reason: 'suspended' });
        const requestId = (first.find((e) => e.type === 'permission-request') as Extract<AgentEvent, { type: 'permission-request' }>).requestId;

        const b = payingAgent(store());
        expect(await b.agent.runs.get(id)).toMatchObject({
          runId: id,
          status: 'suspended',
          sessionId,
          pendingRequests: [expect.objectContaining({ requestId })],
        });
        expect(await b.agent.respond(id, { type: 'permission-response', requestId, approved: true })).toBe(true);
        const resumed = await collect(b.agent.resume(id));
        expect(resumed[0]).toMatchObject({ type: 'run-start', runId: id, resumed: true });
        expect(resumed.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Done.' });
        expect(b.ran).toEqual([text]);
        expect(a.ran).toEqual([]);

        // Both parts of the run, as streamed, from the store.
        expect(await collect(b.agent.events(id))).toEqual(first);
        const lastSeq = first.at(-1)?.seq as number;
        expect(await collect(b.agent.events(id, { after: lastSeq }))).toEqual(resumed);

        const session = await store().load(sessionId);
        const messages = session?.messages as readonly Message[];
        expect(messages[0]).toMatchObject({ role: 'user', content: [{ type: 'text', text }] });
        expect(unpairedToolCalls(messages)).toEqual([]);
        expect(await b.agent.cancel(id)).toBe(false); // finished
      },
      60_000,
    );

    it('cancels a suspended run from another agent: it ends cancelled, its history valid', async () => {
      const a = payingAgent(store());
      const first = await collect(a.agent.run('pay me', { runId: 'to-cancel', sessionId: 'session-to-cancel' }));
      expect(first.at(-1)).toMatchObject({ reason: 'suspended' });
      const b = payingAgent(store());
      expect(await b.agent.cancel('to-cancel')).toBe(true);
      expect(await b.agent.runs.get('to-cancel')).toMatchObject({ status: 'finished', reason: 'cancelled' });
      const resumed = await collect(b.agent.resume('to-cancel'));
      expect(resumed.find((e) => e.type === 'error')).toMatchObject({ error: { name: 'RunFinishedError' } });
      expect(a.ran).toEqual([]);
      expect(b.ran).toEqual([]);
      const session = await store().load('session-to-cancel');
      expect(unpairedToolCalls(session?.messages ?? [])).toEqual([]);
    });

    it('tells another agent which calls a finished run left to the client', async () => {
      const pickColor = defineClientTool({ name: 'pick_color', description: 'Asks the user', parameters: z.object({ palette: z.string() }) });
      const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'pc1' }] }]);
      const runId = `client-calls-${randomUUID()}`;
      const events = await collect(createAgent({ model, tools: [pickColor], store: store() }).run('pick', { runId }));
      const end = events.at(-1) as Extract<AgentEvent, { type: 'run-end' }>;
      expect(end).toMatchObject({ reason: 'completed', clientCalls: [{ callId: 'pc1', name: 'pick_color', args: { palette: 'warm' } }] });
      const other = createAgent({ model: scriptedModel([]), tools: [pickColor], store: store() });
      expect(await other.runs.get(runId)).toMatchObject({ status: 'finished', reason: 'completed', clientCalls: end.clientCalls });
    });

    it("lets another agent follow an answer's text while it streams, not once it is over", async () => {
      // Eight deltas 25 ms apart (real time: the store is a server); what waited 20 ms is written.
      const model = scriptedModel([{ text: ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'], delay: 25 }]);
      const runner = createAgent({ model, store: store(), journalFlushMs: 20 });
      const follower = createAgent({ model: scriptedModel([]), store: store() });
      const runId = `streaming-${randomUUID()}`;
      let streamed = 0;
      const followed = new Promise<Array<{ text: string; streamedThen: number }>>((resolve, reject) => {
        runner.run('hi', { runId }).subscribe((event) => {
          if (event.type === 'text-delta') streamed++;
          if (event.type !== 'run-start') return;
          // The start is in the store once run-start comes: follow from here.
          const texts: Array<{ text: string; streamedThen: number }> = [];
          follower.events(runId).subscribe({
            next: (followedEvent) => {
              if (followedEvent.type === 'text-delta') texts.push({ text: followedEvent.text, streamedThen: streamed });
            },
            error: reject,
            complete: () => resolve(texts),
          });
        });
      });
      const texts = await followed;
      expect(texts.map((entry) => entry.text).join('')).toBe('abcdefgh');
      // The first text reached the follower while the model was still streaming the rest.
      expect(texts[0].streamedThen).toBeLessThan(8);
    });

    it('says clearly what is wrong with an unknown run id', async () => {
      const { agent } = payingAgent(store());
      const resumed = await collect(agent.resume('no-such-run'));
      expect(resumed.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
      expect(resumed[1]).toMatchObject({ error: { name: 'RunNotFoundError', message: expect.stringContaining("No run 'no-such-run' in the store") } });
      await expect(collect(agent.events('no-such-run'))).rejects.toMatchObject({ name: 'RunNotFoundError' });
      await expect(agent.respond('no-such-run', { type: 'permission-response', requestId: 'q', approved: true })).rejects.toMatchObject({
        name: 'RunNotFoundError',
      });
      await expect(agent.cancel('no-such-run')).rejects.toMatchObject({ name: 'RunNotFoundError' });
      expect(await agent.runs.get('no-such-run')).toBeUndefined();
    });
  });
}
