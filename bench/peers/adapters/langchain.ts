/**
 * LangChain v1 (`langchain` createAgent on LangGraph, with `@langchain/core`) on its real streaming
 * path: `agent.stream({ messages }, { streamMode: 'messages' })`, counting the AIMessageChunks the
 * model node emits.
 *
 * Fake model: a BaseChatModel subclass shaped like ChatOpenAI's streaming path:
 * `bindTools` converts the tools to OpenAI function specs and returns `this.withConfig({ tools })`;
 * `_streamResponseChunks` yields ChatGenerationChunks (one per text delta, or one carrying
 * `tool_call_chunks` for a tool turn, then a last chunk with usage and finish_reason) and, like every
 * real provider, reports each chunk with `runManager.handleLLMNewToken` so streamMode 'messages'
 * sees it. `_generate` (unused here) concatenates the stream.
 */
import type { CallbackManagerForLLMRun } from '@langchain/core/callbacks/manager';
import { BaseChatModel, type BaseChatModelCallOptions } from '@langchain/core/language_models/chat_models';
import { AIMessageChunk, type BaseMessage, ToolMessage } from '@langchain/core/messages';
import { ChatGenerationChunk, type ChatResult } from '@langchain/core/outputs';
import { convertToOpenAITool } from '@langchain/core/utils/function_calling';
import { createAgent, tool } from 'langchain';
import { z } from 'zod';
import type { Peer } from '../lib/peer.ts';
import { decide, readRequest, type Last } from '../lib/scenario.ts';

// LangChain's default (LANGCHAIN_CALLBACKS_BACKGROUND unset = true) runs callback handlers, including
// LangGraph's StreamMessagesHandler that implements streamMode 'messages', through one global
// background queue. Under S3's 2,000 concurrent runs the graph finishes before that queue drains and
// the final turn's tokens never reach the stream (S3's check fails: 0 of 2000 runs see 'done').
// Awaited handlers are LangChain's documented setting for exact delivery (and measured a little
// faster on S1 here). Override from the environment to reproduce the default.
process.env.LANGCHAIN_CALLBACKS_BACKGROUND ??= 'false';

function textOf(m: BaseMessage): string {
  return typeof m.content === 'string' ? m.content : m.content.map((p) => ('text' in p ? String(p.text) : '')).join('');
}

export class FakeStreamingToolChatModel extends BaseChatModel {
  static override lc_name() {
    return 'FakeStreamingToolChatModel';
  }
  _llmType() {
    return 'fake-streaming-tool';
  }

  override bindTools(tools: any[], kwargs?: Partial<BaseChatModelCallOptions>) {
    return this.withConfig({ tools: tools.map((t) => convertToOpenAITool(t)), ...kwargs } as any);
  }

  private lastOf(messages: BaseMessage[]): { first: string; last: Last } {
    const firstUser = messages.find((m) => m.getType() === 'human');
    if (!firstUser) throw new Error('fake model: no human message');
    const lastMsg = messages[messages.length - 1]!;
    if (lastMsg.getType() === 'human') return { first: textOf(firstUser), last: { kind: 'user' } };
    if (ToolMessage.isInstance(lastMsg)) {
      return { first: textOf(firstUser), last: { kind: 'tool', name: lastMsg.name ?? '', result: textOf(lastMsg) } };
    }
    throw new Error(`fake model: unexpected last message ${lastMsg.getType()}`);
  }

  override async *_streamResponseChunks(
    messages: BaseMessage[],
    _options: this['ParsedCallOptions'],
    runManager?: CallbackManagerForLLMRun,
  ): AsyncGenerator<ChatGenerationChunk> {
    readRequest(messages, ((_options as { tools?: unknown[] }).tools ?? []) as unknown[]);
    const { first, last } = this.lastOf(messages);
    const turn = decide(first, last);
    const id = `run-${Math.random().toString(36).slice(2)}`;
    let outputTokens = 1;
    if (turn.kind === 'text') {
      outputTokens = turn.deltas;
      for (let d = 0; d < turn.deltas; d++) {
        const chunk = new ChatGenerationChunk({
          message: new AIMessageChunk({ content: turn.chunk, id }),
          text: turn.chunk,
        });
        yield chunk;
        await runManager?.handleLLMNewToken(turn.chunk, { prompt: 0, completion: 0 }, undefined, undefined, undefined, { chunk });
      }
    } else {
      const chunk = new ChatGenerationChunk({
        message: new AIMessageChunk({
          content: '',
          id,
          tool_call_chunks: [{ type: 'tool_call_chunk', name: turn.name, args: JSON.stringify(turn.args), id: turn.callId, index: 0 }],
        }),
        text: '',
      });
      yield chunk;
      await runManager?.handleLLMNewToken('', { prompt: 0, completion: 0 }, undefined, undefined, undefined, { chunk });
    }
    const final = new ChatGenerationChunk({
      message: new AIMessageChunk({
        content: '',
        id,
        response_metadata: { finish_reason: turn.kind === 'text' ? 'stop' : 'tool_calls', model_name: 'fake-model' },
        usage_metadata: { input_tokens: 10, output_tokens: outputTokens, total_tokens: 10 + outputTokens },
      }),
      text: '',
    });
    yield final;
    await runManager?.handleLLMNewToken('', { prompt: 0, completion: 0 }, undefined, undefined, undefined, { chunk: final });
  }

  override async _generate(messages: BaseMessage[], options: this['ParsedCallOptions'], runManager?: CallbackManagerForLLMRun): Promise<ChatResult> {
    let acc: ChatGenerationChunk | undefined;
    for await (const c of this._streamResponseChunks(messages, options, runManager)) acc = acc ? acc.concat(c) : c;
    return { generations: [{ text: acc!.text, message: acc!.message }] };
  }
}

type Counter = { calls: number };
let counter: Counter = { calls: 0 };
const gates = new Map<number, (i: number) => Promise<void>>();

const echo = tool(
  async ({ i }: { i: number }) => {
    counter.calls++;
    return { i };
  },
  { name: 'echo', description: 'Echo i back.', schema: z.object({ i: z.number() }) },
);
const wait = tool(
  async ({ i }: { i: number }) => {
    await gates.get(i)!(i);
    return { i };
  },
  { name: 'wait', description: 'Wait until released.', schema: z.object({ i: z.number() }) },
);

const agent = createAgent({ model: new FakeStreamingToolChatModel({}), tools: [echo, wait] });

async function drain(prompt: string, recursionLimit: number) {
  let textDeltas = 0;
  let toolResults = 0;
  let text = '';
  const stream = await agent.stream({ messages: [{ role: 'user', content: prompt }] }, { streamMode: 'messages', recursionLimit });
  for await (const [message] of stream as AsyncIterable<[BaseMessage, unknown]>) {
    if (AIMessageChunk.isInstance(message)) {
      const t = textOf(message);
      if (t.length > 0) {
        textDeltas++;
        text += t;
      }
    } else if (ToolMessage.isInstance(message)) {
      if (message.status === 'error') throw new Error(`tool error: ${textOf(message)}`);
      toolResults++;
    }
  }
  return { textDeltas, toolResults, text };
}

export const langchainPeer: Peer = {
  id: 'langchain',
  label: 'LangChain createAgent',
  packages: ['langchain', '@langchain/core', '@langchain/langgraph'],
  async s1(n) {
    return (await drain(`s1:${n}`, 25)).textDeltas;
  },
  async s2(k) {
    counter = { calls: 0 };
    const r = await drain(`s2:${k}`, 2 * k + 10);
    return { toolCalls: counter.calls, toolResultEvents: r.toolResults, finalText: r.text };
  },
  async s3(i, gate) {
    gates.set(i, gate);
    try {
      return (await drain(`s3:${i}`, 25)).text;
    } finally {
      gates.delete(i);
    }
  },
};
