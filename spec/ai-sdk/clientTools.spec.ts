import { DefaultChatTransport, lastAssistantMessageIsCompleteWithToolCalls } from 'ai';
import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineClientTool, defineTool } from '../../src/index';
import { aiSdkHandler, toUIMessageStream } from '../../src/ai-sdk/index';
import { scriptedModel } from '../../src/testing/index';
import { serveFetch } from '../support/fetchServer';
import { PlainChat, settled } from '../support/plainChat';

// A client tool defined on the server agent reaches the AI SDK's chat as a tool call its UI
// answers (onToolCall + addToolOutput); the resent messages' output is the call's result.

const pickColor = defineClientTool({ name: 'pick_color', description: 'Asks the user to pick a color', parameters: z.object({ palette: z.string() }) });
const weather = defineTool({
  name: 'get_weather',
  description: 'Weather',
  parameters: z.object({ city: z.string() }),
  execute: ({ city }) => `${city}: sunny`,
});

describe('AI SDK client tools', () => {
  let server: Awaited<ReturnType<typeof serveFetch>> | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('the call reaches onToolCall without an output; addToolOutput and the resend give the model its result', async () => {
    const model = scriptedModel([
      {
        text: 'Checking.',
        toolCalls: [
          { name: 'get_weather', args: { city: 'Nice' }, callId: 's1' },
          { name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' },
        ],
      },
      'A teal banner for sunny Nice.',
    ]);
    server = await serveFetch(aiSdkHandler(createAgent({ model, tools: [weather, pickColor] })));
    const asked: unknown[] = [];
    const chat: PlainChat = new PlainChat({
      transport: new DefaultChatTransport({ api: server.url }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
      onToolCall: ({ toolCall }) => {
        asked.push({ name: toolCall.toolName, input: toolCall.input });
        // Not awaited, as the AI SDK asks inside onToolCall.
        if (toolCall.toolName === 'pick_color') void chat.addToolOutput({ tool: 'pick_color', toolCallId: toolCall.toolCallId, output: 'teal' });
      },
    });
    await chat.sendMessage({ text: 'A banner for Nice' });
    await settled(chat);
    await new Promise((r) => setTimeout(r, 50));
    await settled(chat);

    expect(chat.error).toBeUndefined();
    // onToolCall sees every call the client gets; only the client tool's has no output from the server.
    expect(asked).toContainEqual({ name: 'pick_color', input: { palette: 'warm' } });
    expect(model.calls).toBe(2);
    expect(model.requests[0].tools.map((t) => t.name)).toEqual(['get_weather', 'pick_color']);
    expect(model.requests[1].messages).toMatchObject([
      { role: 'user' },
      { role: 'assistant', content: [{ type: 'text', text: 'Checking.' }, { callId: 's1' }, { callId: 'c1', name: 'pick_color', args: { palette: 'warm' } }] },
      {
        role: 'tool',
        content: [
          { type: 'tool-result', callId: 's1', result: 'Nice: sunny' },
          { type: 'tool-result', callId: 'c1', name: 'pick_color', result: 'teal' },
        ],
      },
    ]);
    const parts = chat.messages.at(-1)?.parts ?? [];
    expect(parts.filter((p) => p.type === 'tool-pick_color')).toEqual([expect.objectContaining({ state: 'output-available', output: 'teal' })]);
    expect(parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text)).toEqual(['Checking.', 'A teal banner for sunny Nice.']);
  });

  it("the stream gives the client's call no output and finishes with finishReason tool-calls", async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'pick_color', args: { palette: 'warm' }, callId: 'c1' }] }]);
    const agent = createAgent({ model, tools: [pickColor] });
    const chunks = await lastValueFrom(agent.run('Pick').pipe(toUIMessageStream(), toArray()));
    const types = chunks.map((c) => c.type);
    expect(types).toContain('tool-input-available');
    expect(types.filter((t) => t.startsWith('tool-output'))).toEqual([]);
    expect(chunks.at(-1)).toEqual({ type: 'finish', finishReason: 'tool-calls' });
  });
});
