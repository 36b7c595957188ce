/**
 * Vercel AI SDK (`ai`) on its real streaming path: `streamText` (or `ToolLoopAgent.stream`) with
 * tools and `stopWhen: stepCountIs(n)`, consumed through `result.fullStream`.
 *
 * Fake model: a LanguageModelV3 object whose `doStream` returns a pull-based ReadableStream of
 * LanguageModelV3StreamPart, shaped like what @ai-sdk/openai emits after SSE parsing:
 *   stream-start, response-metadata, then either
 *   text-start, text-delta × n, text-end            (text turn) or
 *   tool-input-start, tool-input-delta, tool-input-end, tool-call   (tool turn)
 *   and finally finish { usage, finishReason }.
 */
import type { LanguageModelV3, LanguageModelV3CallOptions, LanguageModelV3StreamPart, LanguageModelV3Usage } from '@ai-sdk/provider';
import { ToolLoopAgent, stepCountIs, streamText, tool, type StreamTextResult } from 'ai';
import { z } from 'zod';
import type { Peer } from '../lib/peer.ts';
import { decide, readRequest, type Last, type Turn } from '../lib/scenario.ts';

(globalThis as { AI_SDK_LOG_WARNINGS?: boolean }).AI_SDK_LOG_WARNINGS = false;

function usage(output: number): LanguageModelV3Usage {
  return {
    inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: output, text: output, reasoning: 0 },
  };
}

function* turnParts(turn: Turn, seq: number): Generator<LanguageModelV3StreamPart> {
  yield { type: 'stream-start', warnings: [] };
  yield { type: 'response-metadata', id: `resp_${seq}`, modelId: 'fake-model', timestamp: new Date(0) };
  if (turn.kind === 'text') {
    const id = `txt_${seq}`;
    yield { type: 'text-start', id };
    for (let d = 0; d < turn.deltas; d++) yield { type: 'text-delta', id, delta: turn.chunk };
    yield { type: 'text-end', id };
    yield { type: 'finish', usage: usage(turn.deltas), finishReason: { unified: 'stop', raw: 'stop' } };
  } else {
    const input = JSON.stringify(turn.args);
    yield { type: 'tool-input-start', id: turn.callId, toolName: turn.name };
    yield { type: 'tool-input-delta', id: turn.callId, delta: input };
    yield { type: 'tool-input-end', id: turn.callId };
    yield { type: 'tool-call', toolCallId: turn.callId, toolName: turn.name, input };
    yield { type: 'finish', usage: usage(1), finishReason: { unified: 'tool-calls', raw: 'tool_calls' } };
  }
}

function lastOf(options: LanguageModelV3CallOptions): { first: string; last: Last } {
  const prompt = options.prompt;
  const firstUser = prompt.find((m) => m.role === 'user');
  if (!firstUser || firstUser.role !== 'user') throw new Error('fake model: no user message');
  const first = firstUser.content.map((p) => (p.type === 'text' ? p.text : '')).join('');
  const lastMsg = prompt[prompt.length - 1]!;
  if (lastMsg.role === 'user') return { first, last: { kind: 'user' } };
  if (lastMsg.role === 'tool') {
    const part = lastMsg.content[lastMsg.content.length - 1]!;
    if (part.type !== 'tool-result') throw new Error('fake model: tool message without tool-result');
    const out = part.output;
    const result = out.type === 'json' ? out.value : out.type === 'text' ? out.value : out;
    return { first, last: { kind: 'tool', name: part.toolName, result } };
  }
  throw new Error(`fake model: unexpected last message role ${lastMsg.role}`);
}

let seq = 0;
export class FakeLanguageModelV3 implements LanguageModelV3 {
  readonly specificationVersion = 'v3' as const;
  readonly provider = 'fake';
  readonly modelId = 'fake-model';
  readonly supportedUrls = {};

  async doGenerate(): Promise<never> {
    throw new Error('fake model: only doStream is benchmarked');
  }

  async doStream(options: LanguageModelV3CallOptions) {
    readRequest(options.prompt, options.tools ?? []);
    const { first, last } = lastOf(options);
    const it = turnParts(decide(first, last), seq++);
    const stream = new ReadableStream<LanguageModelV3StreamPart>({
      pull(controller) {
        const r = it.next();
        if (r.done) controller.close();
        else controller.enqueue(r.value);
      },
    });
    return { stream };
  }
}

const model = new FakeLanguageModelV3();

let counter = { calls: 0 };
const gates = new Map<number, (i: number) => Promise<void>>();

const tools = {
  echo: tool({
    description: 'Echo i back.',
    inputSchema: z.object({ i: z.number() }),
    execute: async ({ i }) => {
      counter.calls++;
      return { i };
    },
  }),
  wait: tool({
    description: 'Wait until released.',
    inputSchema: z.object({ i: z.number() }),
    execute: async ({ i }) => {
      await gates.get(i)!(i);
      return { i };
    },
  }),
};

type Tools = typeof tools;

async function drain(result: StreamTextResult<Tools, never>) {
  let textDeltas = 0;
  let toolResults = 0;
  let text = '';
  for await (const part of result.fullStream) {
    if (part.type === 'text-delta') {
      textDeltas++;
      text += part.text;
    } else if (part.type === 'tool-result') toolResults++;
    else if (part.type === 'error' || part.type === 'tool-error') throw part.error;
  }
  return { textDeltas, toolResults, text };
}

function makePeer(useAgent: boolean): Peer {
  // One agent per step budget, reused across runs, as an application would define it once.
  const agents = new Map<number, ToolLoopAgent<never, Tools>>();
  const agentFor = (maxSteps: number) => {
    let agent = agents.get(maxSteps);
    if (!agent) agents.set(maxSteps, (agent = new ToolLoopAgent({ model, tools, stopWhen: stepCountIs(maxSteps) })));
    return agent;
  };
  const start = async (prompt: string, maxSteps: number) => {
    if (useAgent) {
      const agent = agentFor(maxSteps);
      return drain((await agent.stream({ prompt })) as unknown as StreamTextResult<Tools, never>);
    }
    return drain(streamText({ model, tools, prompt, stopWhen: stepCountIs(maxSteps) }));
  };
  return {
    id: useAgent ? 'ai-sdk-agent' : 'ai-sdk',
    label: useAgent ? 'AI SDK ToolLoopAgent' : 'AI SDK streamText',
    packages: ['ai', '@ai-sdk/provider'],
    async s1(n) {
      return (await start(`s1:${n}`, 1)).textDeltas;
    },
    async s2(k) {
      counter = { calls: 0 };
      const r = await start(`s2:${k}`, k + 1);
      return { toolCalls: counter.calls, toolResultEvents: r.toolResults, finalText: r.text };
    },
    async s3(i, gate) {
      gates.set(i, gate);
      try {
        return (await start(`s3:${i}`, 2)).text;
      } finally {
        gates.delete(i);
      }
    },
  };
}

export const aiSdkStreamText = makePeer(false);
export const aiSdkToolLoopAgent = makePeer(true);
