import { lastValueFrom, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, ToolError } from 'rx-agent';
import { McpToolError } from 'rx-agent/mcp';
import { eventsOfType, scriptedModel } from 'rx-agent/testing';

describe('McpToolError', () => {
  it('is a ToolError carrying the server result; the model reads its message as is', async () => {
    const result = { content: [{ type: 'text', text: 'No such city' }], isError: true };
    const error = new McpToolError('No such city', result);
    expect(error).toBeInstanceOf(ToolError);
    expect(error).toMatchObject({ name: 'McpToolError', message: 'No such city', result });

    const failing = defineTool({
      name: 'weather',
      description: '',
      parameters: z.object({}),
      execute: () => {
        throw error;
      },
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'weather', args: {} }] }, 'ok']);
    const events = await lastValueFrom(
      createAgent({ model, tools: [failing] })
        .run('go')
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'tool-result')).toEqual([expect.objectContaining({ result: 'No such city', isError: true })]);
  });
});
