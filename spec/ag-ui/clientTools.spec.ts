import { EventType, HttpAgent, type AbstractAgent, type BaseEvent, type Tool as AgUiTool } from '@ag-ui/client';
import { z } from 'zod';
import { createAgent, defineClientTool, defineTool } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';
import { AgUiAgent, agUiHandler } from '../../src/ag-ui/index';
import { serveFetch } from '../support/fetchServer';
import { schemaFailures } from './agUiKit';

// The client's own tools (RunAgentInput.tools, a CopilotKit frontend action): the model is offered
// them; a call is streamed to the client and left to it; its ToolMessage answers it on the next run.

const pickColor: AgUiTool = {
  name: 'pick_color',
  description: 'Asks the user to pick a color',
  parameters: { type: 'object', properties: { palette: { type: 'string' } }, required: ['palette'] },
};

function colorAgent() {
  const model = scriptedModel([
    { text: 'Let me ask you.', toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] },
    (request) => `You picked ${String((request.messages.at(-1)?.content[0] as { result?: unknown }).result)}.`,
  ]);
  return { agent: createAgent({ model }), model };
}

/** Runs the two turns of a client tool's call: the call, then the client's result. */
async function clientToolConversation(ui: AbstractAgent, model: ReturnType<typeof colorAgent>['model']) {
  ui.messages.push({ id: 'u1', role: 'user', content: 'Pick a banner color' });
  const seen: BaseEvent[] = [];
  const onEvent = ({ event }: { event: BaseEvent }) => void seen.push(event);

  await ui.runAgent({ runId: 'run-1', tools: [pickColor] }, { onEvent });
  expect(schemaFailures(seen)).toEqual([]);
  // The model was offered the client's tool, its schema as the client sent it.
  expect(model.requests[0].tools).toEqual([pickColor]);
  const types = seen.map((e) => e.type);
  expect(types).toEqual(expect.arrayContaining([EventType.TOOL_CALL_START, EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END]));
  expect(types).not.toContain(EventType.TOOL_CALL_RESULT);
  expect(seen.at(-1)).toMatchObject({ type: EventType.RUN_FINISHED, runId: 'run-1' });
  expect(seen.find((e) => e.type === EventType.TOOL_CALL_START)).toMatchObject({ toolCallId: 'c1', toolCallName: 'pick_color' });
  expect(ui.messages.at(-1)).toMatchObject({ role: 'assistant', toolCalls: [{ id: 'c1', function: { name: 'pick_color', arguments: '{"palette":"warm"}' } }] });

  // The client runs the tool and answers with a ToolMessage; the next run continues the conversation.
  ui.messages.push({ id: 'r1', role: 'tool', toolCallId: 'c1', content: 'teal' });
  seen.length = 0;
  const second = await ui.runAgent({ runId: 'run-2', tools: [pickColor] }, { onEvent });
  expect(schemaFailures(seen)).toEqual([]);
  expect(second.newMessages).toEqual([{ id: expect.stringMatching(/^msg_/), role: 'assistant', content: 'You picked teal.' }]);
  expect(model.requests[1].messages).toMatchObject([
    { role: 'user', content: [{ type: 'text', text: 'Pick a banner color' }] },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Let me ask you.' },
        { type: 'tool-call', callId: 'c1', name: 'pick_color', args: { palette: 'warm' } },
      ],
    },
    { id: 'r1', role: 'tool', content: [{ type: 'tool-result', callId: 'c1', name: 'pick_color', result: 'teal' }] },
  ]);
}

describe('AG-UI client tools', () => {
  let server: Awaited<ReturnType<typeof serveFetch>> | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('agUiHandler with the real HttpAgent: the call goes to the client without a result, its ToolMessage answers it', async () => {
    const { agent, model } = colorAgent();
    server = await serveFetch(agUiHandler(agent));
    await clientToolConversation(new HttpAgent({ url: server.url, threadId: 't1' }), model);
  });

  it('AgUiAgent, in process: the same', async () => {
    const { agent, model } = colorAgent();
    await clientToolConversation(new AgUiAgent(agent, { threadId: 't2' }), model);
  });

  it("runOptions' own tools replace the client's", async () => {
    const model = scriptedModel(['Hi']);
    const own = defineClientTool({ name: 'own', parameters: { type: 'object', properties: {} } });
    const ui = new AgUiAgent(createAgent({ model }), { runOptions: () => ({ tools: [own] }) });
    ui.messages.push({ id: 'u1', role: 'user', content: 'Hi' });
    await ui.runAgent({ tools: [pickColor] });
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(['own']);
  });

  it('a malformed client tool is a 400 naming it', async () => {
    const { agent } = colorAgent();
    server = await serveFetch(agUiHandler(agent));
    const body = {
      threadId: 't',
      runId: 'r',
      messages: [{ id: 'u1', role: 'user', content: 'Hi' }],
      tools: [{ name: 'bad name', description: '', parameters: {} }],
    };
    const response = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(response.status).toBe(400);
    expect(await response.text()).toContain('RunAgentInput: tool at position 0: defineClientTool: invalid tool name \\"bad name\\"');
  });

  it('two client tools of one name are a 400 naming both; a tool with the empty schema takes no arguments', async () => {
    const { agent } = colorAgent();
    server = await serveFetch(agUiHandler(agent));
    const post = (tools: unknown[]) =>
      fetch(server!.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ threadId: 't', runId: `r-${tools.length}`, messages: [{ id: 'u1', role: 'user', content: 'Hi' }], tools }),
      });
    const twice = await post([{ name: 'ping', description: '', parameters: {} }, pickColor, { name: 'ping', description: '' }]);
    expect(twice.status).toBe(400);
    expect(await twice.text()).toContain("RunAgentInput: the tools at positions 0 and 2 are both named 'ping'");
    const once = await post([{ name: 'ping', description: '', parameters: {} }]);
    expect(once.status).toBe(200);
    await once.text();
  });

  it("a client tool named as one of the agent's tools is a 400 naming it (AgUiAgent: runAgent() rejects); nothing runs", async () => {
    const model = scriptedModel(['Hi']);
    const serverTool = defineTool({ name: 'pick_color', description: 'Picks on the server', parameters: z.object({}), execute: () => 'red' });
    const agent = createAgent({ model, tools: [serverTool] });
    const response = await agUiHandler(agent)(inputRequest({ tools: [{ name: 'ping', description: '' }, pickColor] }));
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: "RunAgentInput: the tool at position 1 is named 'pick_color', as a tool of the agent is; give it another name",
    });
    const ui = new AgUiAgent(agent);
    ui.messages.push({ id: 'u1', role: 'user', content: 'Hi' });
    const quiet = jest.spyOn(console, 'error').mockImplementation(() => undefined); // AbstractAgent logs a run that fails
    try {
      await expect(ui.runAgent({ tools: [pickColor] })).rejects.toThrow("the tool at position 0 is named 'pick_color', as a tool of the agent is");
    } finally {
      quiet.mockRestore();
    }
    expect(model.calls).toBe(0);
  });

  it("'tools' that is not an array is a 400 showing what was sent", async () => {
    const { agent, model } = colorAgent();
    const response = await agUiHandler(agent)(inputRequest({ tools: { name: 'pick_color' } }));
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({ error: 'RunAgentInput: \'tools\' must be an array of tools, got {"name":"pick_color"}' });
    expect(model.calls).toBe(0);
  });

  it('malformed tools the run would not use are no 400: runOptions gives tools of its own, or the input resumes a run', async () => {
    const model = scriptedModel(['Hi']);
    const own = defineClientTool({ name: 'own', parameters: { type: 'object', properties: {} } });
    const asked: unknown[] = [];
    const handle = agUiHandler(createAgent({ model }), { runOptions: (input) => (asked.push(input.tools), { tools: [own] }) });
    const replaced = await handle(inputRequest({ tools: 'pick_color' }));
    expect(replaced.status).toBe(200);
    expect(await replaced.text()).toContain('"type":"RUN_FINISHED"');
    expect(asked).toEqual(['pick_color']);
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(['own']);

    // A resume continues its run with the tools that run has: the input's are not read.
    const resume = [{ interruptId: 'nope', status: 'resolved', payload: { approved: true } }];
    const resumed = await agUiHandler(createAgent({ model }))(inputRequest({ messages: [], resume, tools: [{ name: 'bad name' }] }));
    expect([resumed.status, ((await resumed.json()) as { error: string }).error]).toEqual([
      409,
      expect.stringMatching(/^No run waits for an answer to 'nope'/),
    ]);
  });

  it('a client tool sent without parameters takes no arguments: its call goes to the client, its ToolMessage answers it', async () => {
    const ping: AgUiTool = { name: 'ping_user', description: 'Pings the user' };
    const model = scriptedModel([
      { toolCalls: [{ name: 'ping_user', args: {}, callId: 'p1' }] },
      (request) => `The user said ${String((request.messages.at(-1)?.content[0] as { result?: unknown }).result)}.`,
    ]);
    server = await serveFetch(agUiHandler(createAgent({ model })));
    const ui = new HttpAgent({ url: server.url, threadId: 'ping' });
    ui.messages.push({ id: 'u1', role: 'user', content: 'Ping me' });
    const seen: BaseEvent[] = [];
    await ui.runAgent({ runId: 'ping-1', tools: [ping] }, { onEvent: ({ event }) => void seen.push(event) });
    expect(schemaFailures(seen)).toEqual([]);
    expect(model.requests[0].tools).toEqual([{ name: 'ping_user', description: 'Pings the user', parameters: { type: 'object', properties: {} } }]);
    expect(seen.map((e) => e.type)).not.toContain(EventType.TOOL_CALL_RESULT);
    expect(seen.at(-1)).toMatchObject({ type: EventType.RUN_FINISHED, outcome: { type: 'success' } });
    expect(ui.messages.at(-1)).toMatchObject({ role: 'assistant', toolCalls: [{ id: 'p1', function: { name: 'ping_user', arguments: '{}' } }] });

    ui.messages.push({ id: 'r1', role: 'tool', toolCallId: 'p1', content: 'pong' });
    const second = await ui.runAgent({ runId: 'ping-2', tools: [ping] });
    expect(second.newMessages).toEqual([{ id: expect.stringMatching(/^msg_/), role: 'assistant', content: 'The user said pong.' }]);
    expect(model.requests[1].messages.at(-1)).toMatchObject({
      role: 'tool',
      content: [{ type: 'tool-result', callId: 'p1', name: 'ping_user', result: 'pong' }],
    });
  });

  it('AgUiAgent given malformed tools: runAgent() rejects with the error naming the tool, as HttpAgent does on the 400; nothing runs', async () => {
    const { agent, model } = colorAgent();
    const ui = new AgUiAgent(agent);
    ui.messages.push({ id: 'u1', role: 'user', content: 'Hi' });
    const seen: BaseEvent[] = [];
    const failed: Error[] = [];
    const quiet = jest.spyOn(console, 'error').mockImplementation(() => undefined); // AbstractAgent logs a run that fails
    try {
      const running = ui.runAgent(
        { tools: [pickColor, { name: 'bad name', description: '', parameters: {} }] },
        { onEvent: ({ event }) => void seen.push(event), onRunFailed: ({ error }) => void failed.push(error) },
      );
      await expect(running).rejects.toThrow('RunAgentInput: tool at position 1: defineClientTool: invalid tool name "bad name"');
      await expect(ui.runAgent({ tools: 'pick_color' as never })).rejects.toThrow(`RunAgentInput: 'tools' must be an array of tools, got "pick_color"`);
    } finally {
      quiet.mockRestore();
    }
    expect(failed.map((e) => e.name)).toEqual(['RunAgentInputError']);
    expect(seen).toEqual([]);
    expect(model.calls).toBe(0);
    expect(ui.messages).toEqual([{ id: 'u1', role: 'user', content: 'Hi' }]);
  });
});

/** A POST of a RunAgentInput (a user's 'Hi', but for `fields`) to a handler. */
function inputRequest(fields: Record<string, unknown>): Request {
  const body = { threadId: 't', runId: 'r', messages: [{ id: 'u1', role: 'user', content: 'Hi' }], ...fields };
  return new Request('http://x/', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}
