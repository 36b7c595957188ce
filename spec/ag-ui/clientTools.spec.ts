import { EventType, HttpAgent, type AbstractAgent, type BaseEvent, type Tool as AgUiTool } from '@ag-ui/client';
import { createAgent, defineClientTool } from '../../src/index';
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
});
