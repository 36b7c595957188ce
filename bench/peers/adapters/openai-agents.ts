/**
 * OpenAI Agents SDK (`@openai/agents`, core in `@openai/agents-core`) on its real streaming path:
 * `run(agent, input, { stream: true })`, iterating the StreamedRunResult and counting
 * `raw_model_stream_event`s whose data is an `output_text_delta`.
 *
 * Fake model: a custom `Model` whose `getStreamedResponse` is an async generator yielding the
 * same normalized StreamEvents that OpenAIResponsesModel yields after parsing the Responses SSE
 * stream: `response_started`, `output_text_delta` × n (text turn), then `response_done` carrying the
 * full output items (an assistant `message` with the whole text, or one `function_call`) and usage.
 * (The real model additionally forwards every raw SSE event as a `model` event; the fake doesn't,
 * which only makes the SDK's job easier.) Tracing is disabled (it would export to the network).
 */
import { Agent, run, setTracingDisabled, tool, type Model, type ModelRequest, type ModelResponse, type StreamEvent } from '@openai/agents';
import { z } from 'zod';
import type { Peer } from '../lib/peer.ts';
import { decide, readRequest, type Last } from '../lib/scenario.ts';

setTracingDisabled(true);

type Item = Record<string, any>;

function textOfItem(item: Item): string {
  const c = item.content;
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((p: Item) => (typeof p.text === 'string' ? p.text : '')).join('');
  return '';
}

function lastOf(request: ModelRequest): { first: string; last: Last } {
  if (typeof request.input === 'string') return { first: request.input, last: { kind: 'user' } };
  const items = request.input as Item[];
  const firstUser = items.find((it) => it.role === 'user');
  if (!firstUser) throw new Error('fake model: no user item');
  const first = textOfItem(firstUser);
  const lastItem = items[items.length - 1]!;
  if (lastItem.role === 'user') return { first, last: { kind: 'user' } };
  if (lastItem.type === 'function_call_result') {
    const out = lastItem.output;
    const result = typeof out === 'string' ? out : out?.type === 'text' ? out.text : out;
    return { first, last: { kind: 'tool', name: lastItem.name, result } };
  }
  throw new Error(`fake model: unexpected last item ${JSON.stringify(lastItem).slice(0, 200)}`);
}

let seq = 0;
export class FakeStreamingModel implements Model {
  async getResponse(): Promise<ModelResponse> {
    throw new Error('fake model: only getStreamedResponse is benchmarked');
  }

  async *getStreamedResponse(request: ModelRequest): AsyncIterable<StreamEvent> {
    readRequest(
      typeof request.input === 'string' ? [{ role: 'user', content: request.input }] : (request.input as unknown[]),
      request.tools,
      request.systemInstructions,
    );
    const { first, last } = lastOf(request);
    const turn = decide(first, last);
    const id = `resp_${seq++}`;
    yield { type: 'response_started', providerData: { id } };
    let output: Item[];
    let outputTokens = 1;
    if (turn.kind === 'text') {
      const itemId = `msg_${id}`;
      let text = '';
      for (let d = 0; d < turn.deltas; d++) {
        text += turn.chunk;
        yield { type: 'output_text_delta', delta: turn.chunk, itemId };
      }
      outputTokens = turn.deltas;
      output = [
        {
          type: 'message',
          id: itemId,
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text }],
        },
      ];
    } else {
      output = [
        {
          type: 'function_call',
          id: `fc_${id}`,
          callId: turn.callId,
          name: turn.name,
          status: 'completed',
          arguments: JSON.stringify(turn.args),
        },
      ];
    }
    yield {
      type: 'response_done',
      response: {
        id,
        usage: { requests: 1, inputTokens: 10, outputTokens, totalTokens: 10 + outputTokens },
        output: output as any,
      },
    };
  }
}

let counter = { calls: 0 };
const gates = new Map<number, (i: number) => Promise<void>>();

const echo = tool({
  name: 'echo',
  description: 'Echo i back.',
  parameters: z.object({ i: z.number() }),
  execute: async ({ i }) => {
    counter.calls++;
    return { i };
  },
});
const wait = tool({
  name: 'wait',
  description: 'Wait until released.',
  parameters: z.object({ i: z.number() }),
  execute: async ({ i }) => {
    await gates.get(i)!(i);
    return { i };
  },
});

const agent = new Agent({ name: 'bench', instructions: 'bench', model: new FakeStreamingModel(), tools: [echo, wait] });

async function drain(prompt: string, maxTurns: number) {
  let textDeltas = 0;
  let toolResults = 0;
  let text = '';
  const result = await run(agent, prompt, { stream: true, maxTurns });
  for await (const ev of result) {
    if (ev.type === 'raw_model_stream_event') {
      if (ev.data.type === 'output_text_delta') {
        textDeltas++;
        text += ev.data.delta;
      }
    } else if (ev.type === 'run_item_stream_event' && ev.name === 'tool_output') toolResults++;
  }
  await result.completed;
  if (result.error) throw result.error;
  if (result.finalOutput !== text) throw new Error('openai-agents: finalOutput differs from streamed text');
  return { textDeltas, toolResults, text };
}

export const openaiAgentsPeer: Peer = {
  id: 'openai-agents',
  label: 'OpenAI Agents SDK',
  packages: ['@openai/agents', '@openai/agents-core'],
  async s1(n) {
    return (await drain(`s1:${n}`, 2)).textDeltas;
  },
  async s2(k) {
    counter = { calls: 0 };
    const r = await drain(`s2:${k}`, k + 2);
    return { toolCalls: counter.calls, toolResultEvents: r.toolResults, finalText: r.text };
  },
  async s3(i, gate) {
    gates.set(i, gate);
    try {
      return (await drain(`s3:${i}`, 3)).text;
    } finally {
      gates.delete(i);
    }
  },
};
