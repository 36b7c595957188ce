import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { ToolListChangedNotificationSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { concatMap, from, lastValueFrom, map, of, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, ofType, type AgentEvent, type AgentMiddleware } from 'rx-agent';
import { mcpTools, McpToolError, type McpClient, type McpTools } from 'rx-agent/mcp';
import { permissions, toolTimeout } from 'rx-agent/operators';
import { eventLabels, eventsOfType, scriptedModel, type ScriptedTurn } from 'rx-agent/testing';

const FIXTURE = join(__dirname, 'fixtures', 'mcpServer.mjs');
const ALL_TOOLS = ['echo', 'add', 'describe_media', 'weather', 'explode', 'protocol_error', 'slow', 'add_tool', 'log'];

interface Connection {
  client: Client;
  close(): Promise<void>;
}

async function connectStdio(): Promise<Connection> {
  const client = new Client({ name: 'spec', version: '1.0.0' });
  await client.connect(new StdioClientTransport({ command: process.execPath, args: [FIXTURE, 'stdio'], stderr: 'inherit' }));
  return { client, close: () => client.close() };
}

async function connectHttp(): Promise<Connection> {
  const child: ChildProcess = spawn(process.execPath, [FIXTURE, 'http'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = (await Promise.race([
    once(child.stdout!, 'data'),
    once(child, 'exit').then(([code]) => Promise.reject(new Error(`the MCP HTTP fixture exited with ${String(code)} before listening`))),
  ])) as [Buffer];
  const port = /listening (\d+)/.exec(line.toString())?.[1];
  if (!port) throw new Error(`the MCP HTTP fixture said ${line.toString()}`);
  const client = new Client({ name: 'spec', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
  return {
    client,
    close: async () => {
      await client.close();
      const exited = once(child, 'exit');
      child.kill();
      await exited;
    },
  };
}

const run = (agent: ReturnType<typeof createAgent>, input = 'go'): Promise<AgentEvent[]> => lastValueFrom(agent.run(input).pipe(toArray()));
/** The calls' results, in the model's order (the events come as the calls finish). */
const results = (events: AgentEvent[]) => {
  const order = eventsOfType(events, 'tool-call').map((call) => call.callId);
  return eventsOfType(events, 'tool-result')
    .sort((a, b) => order.indexOf(a.callId) - order.indexOf(b.callId))
    .map(({ name, result, isError }) => ({ name, result, isError }));
};
const serverLog = async (client: Client) => {
  const { content } = (await client.callTool({ name: 'log' })) as { content: Array<{ text: string }> };
  return JSON.parse(content[0].text) as { calls: string[]; cancelled: string[] };
};

describe.each([
  ['stdio (a child process)', connectStdio],
  ['streamable HTTP (loopback)', connectHttp],
])('mcpTools over %s', (_transport, connect) => {
  let connection: Connection;
  let client: Client;

  beforeEach(async () => {
    connection = await connect();
    client = connection.client;
  });
  afterEach(() => connection.close());

  it('lists every page of tools; the model sees each inputSchema as its JSON Schema', async () => {
    const source = mcpTools(client);
    const tools = await source.list();
    expect(tools.map((t) => t.name)).toEqual(ALL_TOOLS); // three pages of three
    const echo = tools[0];
    expect(echo.spec).toEqual({
      name: 'echo',
      description: 'Echoes a text',
      parameters: { type: 'object', properties: { text: { type: 'string', description: 'What to echo' } }, required: ['text'] },
    });
    expect(echo.idempotent).toBe(true); // readOnlyHint
    expect(tools[1].spec.description).toBe('Adds two numbers'); // no description: its title
    expect(tools[1].idempotent).toBe(false);
    expect(await source.list()).toBe(tools); // kept

    const model = scriptedModel(['Hi.']);
    await run(createAgent({ model, middleware: [source] }));
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(ALL_TOOLS);
    expect(model.requests[0].tools[0]).toBe(echo.spec);
  });

  it('include and exclude, by names or by predicate, beside the agent’s own tools', async () => {
    const own = defineTool({ name: 'own', description: 'Mine', parameters: z.object({}), execute: () => 'mine' });
    const model = scriptedModel(['a', 'b']);
    const byName = mcpTools(client, { include: ['echo', 'add', 'slow'], exclude: ['slow'] });
    await run(createAgent({ model, tools: [own], middleware: [byName] }));
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(['own', 'echo', 'add']);
    const byPredicate = mcpTools(client, { exclude: (tool) => tool.name.includes('_') });
    expect((await byPredicate.list()).map((t) => t.name)).toEqual(['echo', 'add', 'weather', 'explode', 'slow', 'log']);
  });

  it('calls tools: text as is, structured content, other content described', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'echo', args: { text: 'hi' }, callId: 'c1' },
          { name: 'add', args: { a: 2, b: 3 }, callId: 'c2' },
          { name: 'describe_media', args: {}, callId: 'c3' },
        ],
      },
      'Done.',
    ]);
    const events = await run(createAgent({ model, middleware: [mcpTools(client)] }));
    expect(results(events)).toEqual([
      { name: 'echo', result: 'echo: hi', isError: false },
      { name: 'add', result: { sum: 5 }, isError: false },
      {
        name: 'describe_media',
        result:
          'Here is the chart.\n[image: image/png]\n[resource link: file:///report.pdf (report)]\n[resource: file:///notes.txt]\nBuy milk.\n[resource: file:///logo.png, image/png]',
        isError: false,
      },
    ]);
    expect(events[events.length - 1]).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Done.' });
    // What the model read back.
    const toolMessage = model.requests[1].messages.find((m) => m.role === 'tool');
    expect(toolMessage?.content.map((p) => (p.type === 'tool-result' ? p.result : undefined))).toEqual(['echo: hi', { sum: 5 }, expect.any(String)]);
  });

  it('an isError result, a throwing tool, a JSON-RPC error and bad arguments are error results the model reads; the run goes on', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'weather', args: { city: 'Atlantis' } },
          { name: 'explode', args: {} },
          { name: 'protocol_error', args: {} },
          { name: 'echo', args: { text: 42 } },
        ],
      },
      'Sorry.',
    ]);
    const events = await run(createAgent({ model, middleware: [mcpTools(client)] }));
    const [atlantis, explode, protocol, badArgs] = results(events);
    expect(atlantis).toEqual({ name: 'weather', result: 'No such city: Atlantis', isError: true });
    expect(explode).toEqual({ name: 'explode', result: 'kaboom', isError: true });
    expect(protocol).toEqual({ name: 'protocol_error', result: 'Error: MCP error -32603: database unavailable', isError: true });
    // Checked by the server against its own schema.
    expect(badArgs.isError).toBe(true);
    expect(badArgs.result).toMatch(/Input validation error: Invalid arguments for tool echo/);
    expect(events[events.length - 1]).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Sorry.' });
    expect((await serverLog(client)).calls).toEqual(['weather', 'explode', 'protocol_error', 'echo']);
  });

  it('a call that takes longer than timeoutMs is an error result, and the server is told to stop', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', args: { ms: 10_000 } }] }, 'Too slow.']);
    const started = Date.now();
    const events = await run(createAgent({ model, middleware: [mcpTools(client, { timeoutMs: 500 })] }));
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(results(events)).toEqual([{ name: 'slow', result: "Tool 'slow' timed out after 500 ms", isError: true }]);
    await waitFor(async () => (await serverLog(client)).cancelled.includes('slow'));
  });

  it('cancelling the run aborts the call on the server', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', args: { ms: 10_000 } }] }, 'never']);
    const handle = createAgent({ model, middleware: [mcpTools(client)] }).start('go');
    const events: AgentEvent[] = [];
    const ended = new Promise<void>((resolve) =>
      handle.events$.subscribe({
        next: (event) => {
          events.push(event);
          if (event.type === 'tool-progress') handle.cancel(); // the server's progress notification: it is running the call
        },
        complete: resolve,
      }),
    );
    await ended;
    expect(events[events.length - 1]).toMatchObject({ type: 'run-end', reason: 'cancelled' });
    expect(eventsOfType(events, 'tool-progress').map((e) => e.value)).toEqual([{ progress: 1, total: 2, message: 'started' }]);
    expect(eventsOfType(events, 'tool-result')).toEqual([]);
    await waitFor(async () => (await serverLog(client)).cancelled.includes('slow'));
  });

  it.each([
    ['allowed', true, [{ name: 'echo', result: 'echo: secret', isError: false }], ['echo']],
    ['denied', false, [{ name: 'echo', result: "Permission denied for 'echo': denied by user", isError: true }], []],
  ])('needsApproval: a call %s through permissions()', async (_what, approved, expected, calls) => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'secret' } }] }, 'ok']);
    const agent = createAgent({ model, middleware: [mcpTools(client, { needsApproval: ['echo'] }), permissions()] });
    const handle = agent.start('go');
    const events: AgentEvent[] = [];
    const ended = new Promise<void>((resolve) =>
      handle.events$.subscribe({
        next: (event) => {
          events.push(event);
          if (event.type === 'permission-request') {
            expect(event).toMatchObject({ toolName: 'echo', args: { text: 'secret' }, description: 'Echoes a text' });
            handle.respond({ type: 'permission-response', requestId: event.requestId, approved });
          }
        },
        complete: resolve,
      }),
    );
    await ended;
    expect(results(events)).toEqual(expected);
    expect((await serverLog(client)).calls).toEqual(calls);
  });

  it('lists again after notifications/tools/list_changed: a tool added mid-run is offered from the next model call', async () => {
    // A handler set before mcpTools still runs; here it holds the next iteration until the
    // notification came (over HTTP it travels on another connection than the call's answer).
    let notified!: () => void;
    const changed = new Promise<void>((resolve) => (notified = resolve));
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => notified());
    const waitForNotification: AgentMiddleware = {
      name: 'waitForNotification',
      beforeIteration: concatMap((ctx) => (ctx.iteration === 1 ? from(changed).pipe(map(() => ctx)) : of(ctx))),
    };
    const model = scriptedModel([
      { toolCalls: [{ name: 'add_tool', args: { name: 'greet' } }] },
      { toolCalls: [{ name: 'greet', args: { who: 'Ada' } }] },
      'Greeted.',
    ]);
    const source = mcpTools(client);
    const events = await run(createAgent({ model, middleware: [waitForNotification, source] }));
    expect(results(events)).toEqual([
      { name: 'add_tool', result: 'added greet', isError: false },
      { name: 'greet', result: 'greet, Ada!', isError: false },
    ]);
    expect(model.requests[0].tools.map((t) => t.name)).not.toContain('greet');
    expect(model.requests[1].tools.map((t) => t.name)).toEqual([...ALL_TOOLS, 'greet']);
    expect((await source.list()).map((t) => t.name)).toContain('greet');
  });
});

describe('mcpTools in process (InMemoryTransport)', () => {
  let server: McpServer;
  let client: Client;
  /** What the client sent the server. */
  let sent: JSONRPCMessage[];
  let aborted: string[];

  beforeEach(async () => {
    server = new McpServer({ name: 'in-process', version: '1.0.0' });
    aborted = [];
    server.registerTool('echo', { description: 'Echoes a text', inputSchema: { text: z.string() } }, async ({ text }) => ({
      content: [{ type: 'text', text: `echo: ${text}` }],
    }));
    server.registerTool('fail', { description: 'Fails' }, async () => ({ content: [{ type: 'text', text: 'no' }], isError: true }));
    server.registerTool('wait', { description: 'Waits until cancelled' }, (extra) => {
      return new Promise((resolve) =>
        extra.signal.addEventListener('abort', () => {
          aborted.push('wait');
          resolve({ content: [] });
        }),
      );
    });
    const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
    sent = [];
    const send = clientTransport.send.bind(clientTransport);
    clientTransport.send = (message, options) => (sent.push(message), send(message, options));
    await server.connect(serverTransport);
    client = new Client({ name: 'spec', version: '1.0.0' });
    await client.connect(clientTransport);
  });
  afterEach(async () => {
    await client.close();
    await server.close();
  });

  const cancellations = () => sent.filter((message) => 'method' in message && message.method === 'notifications/cancelled');

  it('cancels only a call still running (here cut short by toolTimeout), not one the server answered', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'echo', args: { text: 'hi' } },
          { name: 'fail', args: {} },
          { name: 'echo', args: { text: 1 } },
        ],
      },
      { toolCalls: [{ name: 'wait', args: {} }] },
      'Done.',
    ]);
    const events = await run(createAgent({ model, middleware: [mcpTools(client), toolTimeout({ ms: 200, tools: ['wait'] })] }));
    expect(results(events).map(({ name, isError }) => [name, isError])).toEqual([
      ['echo', false],
      ['fail', true],
      ['echo', true],
      ['wait', true],
    ]);
    expect(results(events)[3].result).toBe("Tool 'wait' timed out after 200 ms");
    expect(events[events.length - 1]).toMatchObject({ type: 'run-end', reason: 'completed' });
    await waitFor(() => Promise.resolve(aborted.length > 0));
    const waitCall = sent.find((message) => 'method' in message && message.method === 'tools/call' && message.params?.name === 'wait');
    expect(cancellations()).toEqual([expect.objectContaining({ params: expect.objectContaining({ requestId: (waitCall as { id: number }).id }) })]);
  });

  it('a closed client: the listing fails the run naming mcpTools, a call is an error result; each run ends', async () => {
    const source = mcpTools(client);
    const listed = mcpTools(client);
    await listed.list();
    await client.close();
    const unlisted = await run(createAgent({ model: scriptedModel(['never']), middleware: [source] }));
    expect(eventsOfType(unlisted, 'error')).toEqual([
      expect.objectContaining({ source: 'middleware', middleware: 'mcpTools', error: expect.objectContaining({ message: 'Not connected' }) }),
    ]);
    expect(unlisted[unlisted.length - 1]).toMatchObject({ type: 'run-end', reason: 'error' });
    const called = await run(createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'hi' } }] }, 'Gone.']), middleware: [listed] }));
    expect(results(called)).toEqual([{ name: 'echo', result: 'Error: Not connected', isError: true }]);
    expect(called[called.length - 1]).toMatchObject({ type: 'run-end', reason: 'completed', text: 'Gone.' });
  });
});

describe('mcpTools and notifications/tools/list_changed (in process)', () => {
  const closing: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const close of closing.splice(0)) await close();
  });

  /** A server of one tool, `echo`, connected to `client` in process. */
  async function serve(client = new Client({ name: 'spec', version: '1.0.0' })): Promise<{ client: Client; server: McpServer }> {
    const server = new McpServer({ name: 'in-process', version: '1.0.0' });
    server.registerTool('echo', { description: 'Echoes a text', inputSchema: { text: z.string() } }, async ({ text }) => ({
      content: [{ type: 'text', text }],
    }));
    const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
    closing.push(async () => {
      await client.close();
      await server.close();
    });
    await server.connect(serverTransport);
    await client.connect(clientTransport);
    return { client, server };
  }
  /** A tool registered on a connected server: the server sends notifications/tools/list_changed. */
  const addTool = (server: McpServer, name: string) => server.registerTool(name, { description: name }, async () => ({ content: [] }));
  const names = async (source: McpTools) => (await source.list()).map((t) => t.name);
  const signal = () => {
    let fire!: () => void;
    const fired = new Promise<void>((resolve) => (fire = resolve));
    return { fire, fired };
  };

  it('a Client with the listChanged option, connected after mcpTools: lists again, and its onChanged still runs', async () => {
    const refreshed: Array<string[] | null> = [];
    const { fire, fired } = signal();
    const client = new Client(
      { name: 'spec', version: '1.0.0' },
      {
        listChanged: {
          tools: {
            debounceMs: 0,
            onChanged: (_error, tools) => {
              refreshed.push(tools && tools.map((t) => t.name));
              fire();
            },
          },
        },
      },
    );
    const source = mcpTools(client); // before connect(), which sets the option's handler
    const { server } = await serve(client);
    expect(await names(source)).toEqual(['echo']);
    addTool(server, 'late');
    await fired;
    expect(await names(source)).toEqual(['echo', 'late']);
    expect(refreshed).toEqual([['echo', 'late']]);
  });

  it('a handler set on the client after mcpTools still runs, and the list is read again', async () => {
    const { client, server } = await serve();
    const source = mcpTools(client);
    expect(await names(source)).toEqual(['echo']);
    const seen: string[] = [];
    let notified = signal();
    client.setNotificationHandler(ToolListChangedNotificationSchema, (notification) => {
      seen.push(notification.method);
      notified.fire();
    });
    addTool(server, 'late');
    await notified.fired;
    expect(await names(source)).toEqual(['echo', 'late']);
    notified = signal();
    addTool(server, 'later');
    await notified.fired;
    expect(await names(source)).toEqual(['echo', 'late', 'later']);
    expect(seen).toEqual(['notifications/tools/list_changed', 'notifications/tools/list_changed']);
  });

  it('one handler per client however many mcpTools share it: each lists again; the handler set before runs once', async () => {
    const { client, server } = await serve();
    const before: string[] = [];
    const { fire, fired } = signal();
    client.setNotificationHandler(ToolListChangedNotificationSchema, (notification) => {
      before.push(notification.method);
      fire();
    });
    const install = jest.spyOn(client, 'setNotificationHandler');
    const sets = [mcpTools(client), mcpTools(client, { exclude: ['late'] }), mcpTools(client)];
    for (const set of sets) expect(await names(set)).toEqual(['echo']);
    expect(install).toHaveBeenCalledTimes(1);
    addTool(server, 'late');
    await fired;
    expect(await Promise.all(sets.map(names))).toEqual([['echo', 'late'], ['echo'], ['echo', 'late']]);
    expect(before).toEqual(['notifications/tools/list_changed']);
    expect(install).toHaveBeenCalledTimes(1);
  });

  it('a tool set the program drops is garbage collected: the client holds it only weakly; one it keeps still lists again', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const { client, server } = await serve();
    const { fire, fired } = signal();
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => fire());
    const kept = mcpTools(client);
    expect(await names(kept)).toEqual(['echo']);
    const dropped = await (async () => new WeakRef(await mcpTools(client).list()))();
    for (let i = 0; i < 10 && dropped.deref() !== undefined; i++) {
      await new Promise((resolve) => setImmediate(resolve)); // a WeakRef's target is kept until the job that made it ends
      gc();
    }
    expect(dropped.deref()).toBeUndefined();
    addTool(server, 'late');
    await fired;
    expect(await names(kept)).toEqual(['echo', 'late']);
  });
});

/** Polls `check` (a few ms apart) until it holds, for what the server does after answering. */
async function waitFor(check: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('the server never did it');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A client of a few tools, answering at once or never: for what needs no server. */
function fakeClient(
  tools: object[],
  call: McpClient['callTool'] = () => new Promise(() => {}),
): McpClient & { handlers: Map<string, (n: unknown) => unknown> } {
  const handlers = new Map<string, (n: unknown) => unknown>();
  return {
    handlers,
    listTools: () => Promise.resolve({ tools }),
    callTool: call,
    setNotificationHandler: (schema: { shape: { method: { value: string } } }, handler: (n: unknown) => unknown) =>
      handlers.set(schema.shape.method.value, handler),
  };
}

const tool = (name: string) => ({ name, inputSchema: { type: 'object', properties: {} } });

describe('mcpTools without a server', () => {
  it('times a call out on the given scheduler (virtual time)', async () => {
    const testScheduler = new TestScheduler((a, e) => expect(a).toEqual(e));
    const source = mcpTools(fakeClient([tool('hang')]), { timeoutMs: 50, scheduler: testScheduler });
    await source.list(); // listed before the marble test: no Promise in its path
    testScheduler.run(({ expectObservable }) => {
      const turns: ScriptedTurn[] = [{ toolCalls: [{ name: 'hang', args: {}, callId: 'c1' }] }, 'late'];
      const agent = () => createAgent({ model: scriptedModel(turns, { scheduler: testScheduler }), scheduler: testScheduler, middleware: [source] });
      // The call starts at frame 0 and times out at 50: its error result, then the next iteration.
      expectObservable(agent().run('go').pipe(eventLabels())).toBe('(abcdef) 42ms (ghijkl|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-input-start',
        d: 'tool-input-delta',
        e: 'tool-input-delta',
        f: 'tool-call:hang',
        g: 'tool-result:hang',
        h: 'iteration-end',
        i: 'iteration-start',
        j: 'text-delta:late',
        k: 'iteration-end',
        l: 'run-end:completed',
      });
      const outcome = agent()
        .run('go')
        .pipe(
          ofType('tool-result'),
          map(({ result, isError }) => ({ result, isError })),
        );
      expectObservable(outcome).toBe('50ms (a|)', { a: { result: "Tool 'hang' timed out after 50 ms", isError: true } });
    });
  });

  it('a name another tool of the run has fails the run, naming it', async () => {
    const own = defineTool({ name: 'echo', description: '', parameters: z.object({}), execute: () => '' });
    const events = await run(createAgent({ model: scriptedModel(['x']), tools: [own], middleware: [mcpTools(fakeClient([tool('echo')]))] }));
    const [error] = eventsOfType(events, 'error');
    expect(error.error.message).toBe("mcpTools: the MCP tool 'echo' has the name of another tool of the run; leave one out with 'include' or 'exclude'");
    expect(events[events.length - 1]).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('a server whose tools/list gives a page cursor again fails the listing, naming it, instead of listing for ever', async () => {
    const client = fakeClient([]);
    client.listTools = (params) => Promise.resolve(params?.cursor === undefined ? { tools: [tool('a')], nextCursor: 'p2' } : { tools: [], nextCursor: 'p2' });
    const events = await run(createAgent({ model: scriptedModel(['x']), middleware: [mcpTools(client)] }));
    expect(eventsOfType(events, 'error')[0].error.message).toBe("mcpTools: tools/list gave the page cursor 'p2' twice (the listing would never end)");
    expect(events[events.length - 1]).toMatchObject({ type: 'run-end', reason: 'error' });
  });

  it('a listing that fails fails the run; the next run lists again', async () => {
    let fail = true;
    const client = fakeClient([tool('t')]);
    client.listTools = () => (fail ? Promise.reject(new Error('server gone')) : Promise.resolve({ tools: [tool('t')] }));
    const source: McpTools = mcpTools(client);
    const model = scriptedModel(['a', 'b'], {});
    const first = await run(createAgent({ model, middleware: [source] }));
    expect(eventsOfType(first, 'error')[0].error.message).toBe('server gone');
    fail = false;
    const second = await run(createAgent({ model, middleware: [source] }));
    expect(second[second.length - 1]).toMatchObject({ type: 'run-end', reason: 'completed' });
    expect(model.requests[model.requests.length - 1].tools.map((t) => t.name)).toEqual(['t']);
  });

  it('list_changed: lists again, and the handler set before still runs', async () => {
    const client = fakeClient([tool('a')]);
    const before: unknown[] = [];
    const internal = new Map([['notifications/tools/list_changed', (n: unknown) => before.push(n)]]);
    Object.assign(client, { _notificationHandlers: internal });
    let listings = 0;
    const listTools = client.listTools.bind(client);
    client.listTools = (...args) => (listings++, listTools(...args));
    const source = mcpTools(client);
    await source.list();
    await source.list();
    expect(listings).toBe(1);
    const notification = { method: 'notifications/tools/list_changed' };
    await client.handlers.get('notifications/tools/list_changed')!(notification);
    expect(before).toEqual([notification]);
    await source.list();
    expect(listings).toBe(2);
  });

  it('needsApproval as a predicate sees the tool and the arguments; isError results are McpToolErrors', async () => {
    const seen: unknown[] = [];
    const client = fakeClient([tool('a')], () => Promise.resolve({ content: [{ type: 'text', text: 'bad' }], isError: true }));
    const [a] = await mcpTools(client, { needsApproval: (info, args) => (seen.push([info.name, args]), args.risky === true) }).list();
    expect(typeof a.needsApproval === 'function' && a.needsApproval({ risky: true })).toBe(true);
    expect(seen).toEqual([['a', { risky: true }]]);
    const failure = await lastValueFrom(
      a.execute({}, { signal: new AbortController().signal, callId: 'c', runId: 'r', iteration: 0, progress: () => {} }) as never,
    ).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(McpToolError);
    expect(failure).toMatchObject({ message: 'bad', result: { isError: true } });
  });

  it('checks its options, naming the one that is wrong', () => {
    const client = fakeClient([]);
    expect(() => mcpTools({} as McpClient)).toThrow(/^mcpTools: 'client' must be a connected MCP Client \(with listTools and callTool\)/);
    expect(() => mcpTools(client, { include: 'echo' as never })).toThrow(
      'mcpTools: \'include\' must be an array of tool names or a predicate (tool) => boolean, got "echo"',
    );
    expect(() => mcpTools(client, { exclude: [1] as never })).toThrow(/mcpTools: 'exclude' must be an array of tool names/);
    expect(() => mcpTools(client, { needsApproval: 'yes' as never })).toThrow(
      /mcpTools: 'needsApproval' must be a boolean, an array of tool names or a predicate/,
    );
    expect(() => mcpTools(client, { timeoutMs: 0 })).toThrow(/mcpTools: 'timeoutMs' must be a number of milliseconds/);
    expect(() => mcpTools(client, { scheduler: {} as never })).toThrow(/mcpTools: 'scheduler' must be an rxjs SchedulerLike/);
    expect(() => mcpTools(client, null as never)).toThrow(new TypeError('mcpTools: options must be an object, got null'));
    expect(() => mcpTools(client, ['echo'] as never)).toThrow(new TypeError('mcpTools: options must be an object, got ["echo"]'));
    expect(() => mcpTools(client, { includes: ['echo'], timeout: 5 } as never)).toThrow(
      new TypeError("mcpTools: unknown option(s) 'includes', 'timeout' (known: include, exclude, needsApproval, timeoutMs, scheduler)"),
    );
    const middleware: AgentMiddleware = mcpTools(client);
    expect(middleware.name).toBe('mcpTools');
  });
});
