import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineClientTool, defineTool, memoryStore, type AgentEvent, type Message, type ModelRequest } from '../../src/index';
import { eventsOfType, scriptedModel } from '../../src/testing/index';
import { CLIENT_CALL_NOT_RUN } from '../../src/agent/clientCalls';
import { permissions } from '../../operators/permissions';
import { toolCallLimit } from '../../operators/toolCallLimit';

// Client tools: the model may call them, the run leaves their calls to the client and ends; the
// next run's input carries their results.

const pickColor = defineClientTool({
  name: 'pick_color',
  description: 'Asks the user to pick a color',
  parameters: { type: 'object', properties: { palette: { type: 'string' } }, required: ['palette'] },
});
const weather = defineTool({ name: 'get_weather', description: 'Weather', parameters: z.object({ city: z.string() }), execute: ({ city }) => `${city}: 21°C` });

const run = (events$: ReturnType<ReturnType<typeof createAgent>['run']>) => lastValueFrom(events$.pipe(toArray()));
const runEnd = (events: AgentEvent[]) => eventsOfType(events, 'run-end')[0];
const resultOf = (callId: string, result: unknown): Message => ({
  role: 'tool',
  content: [{ type: 'tool-result', callId, name: 'pick_color', result }],
});

/** Every tool call of a request's history has exactly one result after it, and every result a call before it. */
function pairedHistory(request: ModelRequest): boolean {
  const open = new Set<string>();
  for (const message of request.messages) {
    for (const part of message.content) {
      if (part.type === 'tool-call') open.add(part.callId);
      if (part.type === 'tool-result' && !open.delete(part.callId)) return false;
    }
    if (message.role !== 'tool' && message.role !== 'assistant' && open.size > 0) return false;
  }
  return open.size === 0;
}

describe('client tools', () => {
  it('a call of a client tool ends the run completed with clientCalls, and no tool-result', async () => {
    const model = scriptedModel([{ text: 'Let me ask.', toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }]);
    const agent = createAgent({ model, tools: [pickColor] });
    const events = await run(agent.run('Pick a banner color'));
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(['pick_color']);
    expect(model.requests[0].tools[0].parameters).toBe(pickColor.spec.parameters);
    expect(eventsOfType(events, 'tool-call')).toEqual([expect.objectContaining({ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } })]);
    expect(eventsOfType(events, 'tool-input-start')).toHaveLength(1);
    expect(eventsOfType(events, 'tool-result')).toEqual([]);
    expect(runEnd(events)).toMatchObject({
      reason: 'completed',
      text: 'Let me ask.',
      clientCalls: [{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }],
    });
    expect(model.calls).toBe(1);
  });

  it('invoke() resolves with the same clientCalls; a run without client calls has none', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'cool' }, callId: 'c1' }] }, 'Done.']);
    const agent = createAgent({ model, tools: [pickColor] });
    const session = createSession();
    const first = await agent.invoke('Pick', { session });
    expect(first.clientCalls).toEqual([{ callId: 'c1', name: 'pick_color', args: { palette: 'cool' } }]);
    expect(first.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    const second = await agent.invoke(resultOf('c1', 'teal'), { session });
    expect(second).toMatchObject({ reason: 'completed', text: 'Done.' });
    expect(second).not.toHaveProperty('clientCalls');
  });

  it('a mixed batch runs the server call and leaves the client call', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'get_weather', args: { city: 'Paris' }, callId: 's1' },
          { name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' },
        ],
      },
      'A warm teal for a sunny Paris.',
    ]);
    const agent = createAgent({ model, tools: [weather, pickColor] });
    const session = createSession();
    const events = await run(agent.run('Banner for Paris', { session }));
    expect(eventsOfType(events, 'tool-call').map((e) => e.callId)).toEqual(['s1', 'c1']);
    expect(eventsOfType(events, 'tool-result')).toEqual([expect.objectContaining({ callId: 's1', result: 'Paris: 21°C' })]);
    expect(runEnd(events)).toMatchObject({ reason: 'completed', clientCalls: [{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }] });
    expect(model.calls).toBe(1);

    // The next run's input answers the client's call: the model sees every call with its result.
    const next = await run(agent.run(resultOf('c1', 'teal'), { session }));
    expect(runEnd(next)).toMatchObject({ reason: 'completed', text: 'A warm teal for a sunny Paris.' });
    expect(runEnd(next)).not.toHaveProperty('clientCalls');
    const request = model.requests[1];
    expect(pairedHistory(request)).toBe(true);
    expect(request.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'tool']);
    expect(request.messages[3].content).toEqual([{ type: 'tool-result', callId: 'c1', name: 'pick_color', result: 'teal' }]);
  });

  it('the results may come with the whole conversation as input (no session)', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }, 'Teal it is.']);
    const agent = createAgent({ model, tools: [pickColor] });
    const first = await agent.invoke('Pick');
    const second = await agent.invoke([...first.messages, resultOf('c1', 'teal')]);
    expect(second.text).toBe('Teal it is.');
    expect(pairedHistory(model.requests[1])).toBe(true);
  });

  it('a client call whose arguments fail its zod schema gets an error result the model reads: the run goes on', async () => {
    const checked = defineClientTool({ name: 'pick_color', description: 'Asks the user', parameters: z.object({ palette: z.string() }) });
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { shade: 1 }, callId: 'c1' }] }, 'Sorry.']);
    const agent = createAgent({ model, tools: [checked] });
    const events = await run(agent.run('Pick'));
    expect(eventsOfType(events, 'tool-result')).toEqual([expect.objectContaining({ callId: 'c1', isError: true })]);
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'Sorry.' });
    expect(runEnd(events)).not.toHaveProperty('clientCalls');
  });

  it('refuses a tool result for a call the conversation does not have, naming the call id', async () => {
    const model = scriptedModel(['never asked']);
    const agent = createAgent({ model, tools: [pickColor] });
    const events = await run(agent.run(resultOf('c404', 'teal'), { session: createSession() }));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(eventsOfType(events, 'error')[0]).toMatchObject({ source: 'run' });
    expect(eventsOfType(events, 'error')[0].error.message).toBe(
      "Invalid run input: the tool result for call 'c404' answers no open call: 'c404' is not a tool call of the conversation",
    );
    expect(runEnd(events).reason).toBe('error');
    expect(model.calls).toBe(0);
  });

  it('refuses a second result for a call that has one already', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }, 'ok', 'again']);
    const agent = createAgent({ model, tools: [pickColor] });
    const session = createSession();
    await agent.invoke('Pick', { session });
    await agent.invoke(resultOf('c1', 'teal'), { session });
    const events = await run(agent.run(resultOf('c1', 'red'), { session }));
    expect(eventsOfType(events, 'error')[0].error.message).toContain("'c1' has a result already");
    expect(runEnd(events).reason).toBe('error');
  });
});

describe('RunOptions.tools', () => {
  it("adds tools for one run: the model is offered the agent's and these", async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }, 'plain']);
    const agent = createAgent({ model, tools: [weather] });
    const events = await run(agent.run('Pick', { tools: [pickColor] }));
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(['get_weather', 'pick_color']);
    expect(runEnd(events).clientCalls).toEqual([{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }]);
    await run(agent.run('Again'));
    expect(model.requests[1].tools.map((t) => t.name)).toEqual(['get_weather']);
  });

  it("a name the agent's tools have already ends the run with an error naming it", async () => {
    const model = scriptedModel(['never']);
    const agent = createAgent({ model, tools: [weather] });
    const clash = defineClientTool({ name: 'get_weather', parameters: { type: 'object' } });
    const events = await run(agent.run('Hi', { tools: [clash] }));
    expect(events.map((e) => e.type)).toEqual(['run-start', 'error', 'run-end']);
    expect(eventsOfType(events, 'error')[0].error.message).toBe(
      "run: 'tools' has a tool named 'get_weather', as the agent (or one of its middleware) has already",
    );
    expect(runEnd(events).reason).toBe('error');
    expect(model.calls).toBe(0);
  });

  it('two tools of one name in the list end the run with an error naming it', async () => {
    const agent = createAgent({ model: scriptedModel(['never']) });
    const events = await run(agent.run('Hi', { tools: [pickColor, pickColor] }));
    expect(eventsOfType(events, 'error')[0].error.message).toBe("run: 'tools' has two tools named 'pick_color'");
    expect(runEnd(events).reason).toBe('error');
  });

  it('refuses what is not a list of tools, and a server tool for a journaled run', async () => {
    const agent = createAgent({ model: scriptedModel(['never']) });
    const notList = await run(agent.run('Hi', { tools: pickColor as never }));
    expect(eventsOfType(notList, 'error')[0].error.message).toMatch(/^run: 'tools' must be an array of tools/);
    const notTool = await run(agent.run('Hi', { tools: [{ name: 'x' }] as never }));
    expect(eventsOfType(notTool, 'error')[0].error.message).toBe(
      "run: 'tools' at position 0 is not a tool; make tools with defineTool() or defineClientTool()",
    );
    const journaled = createAgent({ model: scriptedModel(['never']), store: memoryStore() });
    const server = await run(journaled.run('Hi', { tools: [weather] }));
    expect(eventsOfType(server, 'error')[0].error.message).toContain("takes client tools only (defineClientTool): a resume could not run 'get_weather'");
    expect(runEnd(server).reason).toBe('error');
  });
});

describe('client tools under the policies of a batch, and a client that never answers', () => {
  it('a permission policy that denies a client tool is applied: the call gets the denial and is not left to the client', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }, 'Fine, no color.']);
    const agent = createAgent({ model, tools: [pickColor], middleware: [permissions({ tools: { pick_color: 'deny' } })] });
    const events = await run(agent.run('Pick'));
    expect(eventsOfType(events, 'tool-result')).toEqual([expect.objectContaining({ callId: 'c1', isError: true, denied: true })]);
    expect(runEnd(events)).toMatchObject({ reason: 'completed', text: 'Fine, no color.' });
    expect(runEnd(events).clientCalls).toBeUndefined();
    expect(pairedHistory(model.requests[1])).toBe(true);
  });

  it('a call limit that blocks a client call answers it with the blocked result; the allowed one goes to the client', async () => {
    const calls = [
      { name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' },
      { name: 'pick_color', args: { palette: 'cool' }, callId: 'c2' },
    ];
    const model = scriptedModel([{ toolCalls: calls }]);
    const agent = createAgent({ model, tools: [pickColor], middleware: [toolCallLimit({ toolName: 'pick_color', runLimit: 1 })] });
    const events = await run(agent.run('Pick'));
    expect(eventsOfType(events, 'tool-result')).toEqual([expect.objectContaining({ callId: 'c2', isError: true })]);
    expect(runEnd(events).clientCalls).toEqual([{ callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }]);
  });

  it('a call the next run brings no result for gets an error result, so the session can go on', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' },
          { name: 'pick_color', args: { palette: 'cool' }, callId: 'c2' },
        ],
      },
      'Fine.',
      'Hello again.',
    ]);
    const agent = createAgent({ model, tools: [pickColor] });
    const session = createSession();
    await run(agent.run('Pick', { session }));
    // Only c1 answered, with a new message: c2 is closed with an error result.
    const second = await run(agent.run([resultOf('c1', 'red'), { role: 'user', content: [{ type: 'text', text: 'Never mind the other' }] }], { session }));
    expect(runEnd(second).reason).toBe('completed');
    const request = model.requests[1];
    expect(pairedHistory(request)).toBe(true);
    const results = request.messages.flatMap((m) => m.content.filter((part) => part.type === 'tool-result'));
    expect(results).toEqual([
      expect.objectContaining({ callId: 'c2', result: CLIENT_CALL_NOT_RUN, isError: true }),
      expect.objectContaining({ callId: 'c1', result: 'red' }),
    ]);
    // The session holds a valid history from then on.
    await run(agent.run('Hi', { session }));
    expect(pairedHistory(model.requests[2])).toBe(true);
  });

  it('a sub-agent that calls a client tool fails its call: no one would run it', async () => {
    const child = createAgent({
      name: 'painter',
      model: scriptedModel([{ text: 'Let me ask.', toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'k1' }] }]),
      tools: [pickColor],
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'painter', args: { input: 'paint' }, callId: 'p1' }] }, 'It failed.']);
    const parent = createAgent({ model, tools: [child.asTool({ name: 'painter', description: 'Paints' })] });
    const events = await run(parent.run('Paint'));
    expect(eventsOfType(events, 'tool-result')[0]).toMatchObject({ callId: 'p1', isError: true });
    expect(String(eventsOfType(events, 'tool-result')[0].result)).toContain("called a tool its client runs ('pick_color')");
  });

  it('a turn that ends on client calls has no structured output', async () => {
    const model = scriptedModel([{ text: '{"color":"x"}', toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }]);
    const agent = createAgent({ model, tools: [pickColor], output: z.object({ color: z.string() }) });
    const events = await run(agent.run('Pick'));
    expect(runEnd(events).clientCalls).toHaveLength(1);
    expect(runEnd(events)).not.toHaveProperty('output');
  });
});
