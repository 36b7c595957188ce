import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type AgentStore } from '../../src/index';
import { permissions } from '../../operators/index';
import { toNodeHandler } from '../../src/http/toNodeHandler';
import { scriptedModel } from '../../src/testing/index';

/** A node:http server on a loopback port; `intercept` may take a request before the handler. */
export async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const server: Server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/** A fetch-style handler served through toNodeHandler on a loopback port. */
export function serveRuns(handler: (request: Request) => Promise<Response>) {
  return listen(toNodeHandler(handler));
}

/**
 * An agent with a store and a booking tool that needs approval. "book …" makes the model call the
 * tool, then answer from its result; anything else is a text answer. Each model update comes
 * `delayMs` after the previous one (real time), so that a stream can be cut mid-run.
 */
export function bookingAgent(store: AgentStore, options: { delayMs?: number; onRequest?: 'wait' | 'suspend'; booked?: string[]; leaseMs?: number } = {}) {
  const delay = options.delayMs ?? 5;
  const booked = options.booked ?? [];
  const bookTable = defineTool({
    name: 'book_table',
    description: 'Books a table',
    parameters: z.object({ people: z.number() }),
    needsApproval: true,
    execute: ({ people }) => (booked.push(`table for ${people}`), `Booked for ${people}.`),
  });
  const model = scriptedModel(
    [
      (request) => {
        const last = request.messages.at(-1)!;
        const part = last.content[0];
        if (part.type === 'tool-result') return { text: ['The ', 'answer: ', String(part.result)], delay };
        const said = part.type === 'text' ? part.text : '';
        if (said.startsWith('book')) return { text: ['Booking ', 'now.'], toolCalls: [{ name: 'book_table', args: { people: 2 } }], delay };
        return { text: ['You ', 'said: ', said, '.'], delay };
      },
    ],
    { loop: true },
  );
  return createAgent({
    model,
    tools: [bookTable],
    middleware: [permissions()],
    store,
    ...(options.onRequest ? { onRequest: options.onRequest } : {}),
    ...(options.leaseMs ? { leaseMs: options.leaseMs } : {}),
  });
}

/** One SSE frame as sent: its fields. */
export interface Frame {
  readonly event: string;
  readonly id: string | undefined;
  readonly data: AgentEvent;
}

/** Parses a whole SSE body into frames (comments skipped). */
export function frames(text: string): Frame[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '' && !block.startsWith(':'))
    .map((block) => {
      const fields = new Map(block.split('\n').map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 2)] as const));
      return { event: fields.get('event')!, id: fields.get('id'), data: JSON.parse(fields.get('data')!) as AgentEvent };
    });
}

/** Reads an SSE response until `until` holds for a frame (then aborts it), or to its end. */
export async function readFrames(response: Response, until?: (frame: Frame, all: Frame[]) => boolean, abort?: AbortController): Promise<Frame[]> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const out: Frame[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    const end = text.lastIndexOf('\n\n');
    if (end < 0) continue;
    for (const frame of frames(text.slice(0, end + 2))) {
      out.push(frame);
      if (until?.(frame, out)) {
        abort?.abort();
        await reader.cancel().catch(() => undefined);
        return out;
      }
    }
    text = text.slice(end + 2);
  }
  return out;
}

/** Labels: `type`, with the tool's name or the end's reason. */
export const label = (event: AgentEvent): string =>
  event.type === 'tool-call' || event.type === 'tool-result'
    ? `${event.type}:${event.name}`
    : event.type === 'run-end'
      ? `run-end:${event.reason}`
      : event.type === 'text-delta'
        ? `text:${event.text}`
        : event.type;
