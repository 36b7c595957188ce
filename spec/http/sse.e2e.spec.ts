import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable, pipeline } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { Observable, defer, finalize, from, lastValueFrom, switchMap, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent } from '../../src/index';
import { decodeSSE, sseHeaders, toSSEStream } from '../../src/http/sse';
import { eventLabel, scriptedModel } from '../../src/testing/index';
import { weatherAgent, weatherLabels } from '../support/weatherAgent';

/** A resolvable promise. */
function signal<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

const answeringAgent = () => weatherAgent('in Zürich 🌞.\n\nEnjoy!');

/** Serves a run's event stream the way a Node server would: a web stream piped into the response. */
function serve(res: ServerResponse, events$: Observable<AgentEvent>): void {
  res.writeHead(200, sseHeaders);
  // pipeline destroys the source when the client goes away, which cancels the web stream.
  pipeline(Readable.fromWeb(toSSEStream(events$) as unknown as NodeReadableStream<Uint8Array>), res, () => {});
}

describe('SSE end to end over HTTP (node:http server, fetch client)', () => {
  let server: Server;
  let baseUrl: string;
  let handler: (req: IncomingMessage, res: ServerResponse) => void;

  beforeEach(async () => {
    server = createServer((req, res) => handler(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterEach(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve, reject) => server.close((e) => (e ? reject(e) : resolve())));
  });

  it('the client decodes the same event sequence the run produced', async () => {
    const expected = await lastValueFrom(answeringAgent().run('Weather in Zürich?', { runId: 'run-1' }).pipe(toArray()));
    expect(expected.map(eventLabel)).toEqual(weatherLabels('in Zürich 🌞.\n\nEnjoy!'));

    handler = (req, res) => serve(res, answeringAgent().run('Weather in Zürich?', { runId: 'run-1' }));
    const response = await fetch(`${baseUrl}/chat`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const received = await lastValueFrom(decodeSSE(response.body!).pipe(toArray()));
    // The two runs made their own message ids; the rest is the same.
    const withoutMessageIds = (events: unknown[]) => JSON.parse(JSON.stringify(events, (key, v: unknown) => (key === 'messageId' ? undefined : v))) as unknown;
    expect(withoutMessageIds(received)).toEqual(withoutMessageIds(expected));
    expect(received.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', text: 'It is 21°C in Zürich 🌞.\n\nEnjoy!' });
  });

  it('unsubscribing on the client aborts the request, and the server unsubscribes from the run', async () => {
    const toolAborted = signal();
    const runUnsubscribed = signal();
    const responseClosed = signal();
    const hang = defineTool({
      name: 'hang',
      description: 'Never finishes',
      parameters: z.object({}),
      execute: (_args, ctx) => {
        ctx.signal.addEventListener('abort', () => toolAborted.resolve());
        return new Observable<never>(() => {}); // never emits, never completes
      },
    });
    const agent = createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'hang', args: {} }] }]), tools: [hang] });
    handler = (_req, res) => {
      res.on('close', () => responseClosed.resolve());
      serve(res, agent.run('go').pipe(finalize(() => runUnsubscribed.resolve())));
    };

    const response = await fetch(baseUrl);
    const seen: string[] = [];
    const gotToolCall = signal();
    const errors: unknown[] = [];
    const subscription = decodeSSE(response.body!).subscribe({
      next: (event) => {
        seen.push(eventLabel(event));
        if (event.type === 'tool-call') gotToolCall.resolve();
      },
      error: (e) => errors.push(e),
    });
    await gotToolCall.promise;
    subscription.unsubscribe();

    await Promise.all([responseClosed.promise, runUnsubscribed.promise, toolAborted.promise]);
    expect(seen).toEqual(['run-start', 'iteration-start', 'tool-input-start', 'tool-input-delta', 'tool-input-delta', 'tool-call:hang']);
    expect(errors).toEqual([]);
  });

  it('the documented repeatable request (defer + fetch with an AbortController) is aborted by an unsubscribe before the response came', async () => {
    const requestArrived = signal();
    const requestClosed = signal();
    handler = (req, res) => {
      requestArrived.resolve();
      res.on('close', () => requestClosed.resolve()); // no response yet: the client leaves first
    };
    const url = baseUrl;
    // As in docs/guide/streaming-to-a-ui.md:
    const events$ = defer(() => {
      const abort = new AbortController();
      return from(fetch(url, { signal: abort.signal })).pipe(
        switchMap((res) => decodeSSE(res.body!)),
        finalize(() => abort.abort()),
      );
    });
    const errors: unknown[] = [];
    const subscription = events$.subscribe({ error: (e) => errors.push(e) });
    await requestArrived.promise;
    subscription.unsubscribe();
    await requestClosed.promise; // the server sees the client go (it would run the turn for nobody otherwise)
    expect(errors).toEqual([]);
  });
});
