/**
 * The wire workloads: a real `openai` client against a loopback OpenAI-compatible server
 * (bench/lib/wireServer.mjs, in a process of its own, so that only the client's CPU is counted).
 *
 * S1w: 20,000 text deltas in one answer (S1's texts, digits and `@` included). Floor: the raw
 * SDK's `for await` over `client.chat.completions.create({ stream: true })`, counting the deltas;
 * against it `openAIChat` alone, and the whole agent (five operators) through `toSSEStream` with
 * the body read to its end. Two framings: the body written at once (thousands of events per
 * network read) and each event written on its own.
 *
 * S2r: K iterations of one tool call each. Floor: a hand-written loop on the raw SDK that appends
 * to its own message array and sends the whole history every time, as the agent does; against it
 * the agent with `openAIChat` and the five operators. For information, the Vercel AI SDK's loop on
 * the same server, beside the same floor in alternating runs of its own: `streamText` (the agent
 * streams too) fully consumed, through `@ai-sdk/openai-compatible`, with the same `echo` tool and
 * `stopWhen: stepCountIs(K + 1)`, its defaults otherwise.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import OpenAI from 'openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';
import { createAgent, defineTool, textMessage, type AgentMiddleware } from '../../src/index';
import { openAIChat } from '../../src/openai/index';
import { toSSEStream } from '../../src/http/index';
import { benchPair, check, withTimeout, type GcMode, type Measured } from '../lib/harness';
import { s1Text } from '../lib/fakeModel';

export const N_WIRE = 20_000;
export const K_WIRE: readonly number[] = [500, 2_000];
const PAIRS = 7;
const MODEL = 'gpt-wire';

export type Framing = 'whole' | 'events';

export interface S1wResult {
  readonly framing: Framing;
  readonly mode: GcMode;
  /** The raw SDK's `for await`. */
  readonly sdk: Measured;
  /** `openAIChat` alone, beside the SDK in alternating runs. */
  readonly openAIChat: Measured;
  readonly sdkForAgent: Measured;
  /** The agent, five operators, through `toSSEStream`, its body read to the end. */
  readonly agentSSE: Measured;
}

export interface S2rResult {
  readonly k: number;
  readonly mode: GcMode;
  readonly sdk: Measured;
  readonly agent: Measured;
  /** The floor again, beside the AI SDK in alternating runs. */
  readonly sdkForAiSdk: Measured;
  /** The AI SDK's `streamText` loop through `@ai-sdk/openai-compatible`. */
  readonly aiSdk: Measured;
}

export async function startServer(): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [join(process.cwd(), 'bench', 'lib', 'wireServer.mjs')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [data] = (await withTimeout(once(child.stdout, 'data'), 10_000, 'the wire server starting')) as [Buffer];
  return { url: `http://127.0.0.1:${data.toString().trim()}/v1`, child };
}

const ask = (text: string) => ({ messages: [textMessage('user', text)], tools: [], settings: {} });

/** The raw SDK's `for await`, counting text deltas and checking the text. */
export function sdkS1(client: OpenAI, prompt: string, expected: string): () => Promise<void> {
  return async () => {
    const stream = await client.chat.completions.create(
      { model: MODEL, messages: [{ role: 'user', content: prompt }], stream: true, stream_options: { include_usage: true } },
      { maxRetries: 0 },
    );
    let count = 0;
    let length = 0;
    for await (const chunk of stream) {
      const content = chunk.choices[0]?.delta?.content;
      if (content) {
        count++;
        length += content.length;
      }
    }
    check(count === N_WIRE && length === expected.length, `S1w SDK: ${count} deltas, ${length} characters`);
  };
}

export function openAIChatS1(client: OpenAI, prompt: string, expected: string): () => Promise<void> {
  const model = openAIChat({ client, model: MODEL });
  return () =>
    new Promise<void>((resolve, reject) => {
      let count = 0;
      let length = 0;
      let finished = false;
      model(ask(prompt)).subscribe({
        next(update) {
          if (update.type === 'text-delta') {
            count++;
            length += update.text.length;
          } else if (update.type === 'finish') finished = update.reason === 'stop';
        },
        error: reject,
        complete() {
          try {
            check(finished && count === N_WIRE && length === expected.length, `S1w openAIChat: ${count} deltas, ${length} characters`);
            resolve();
          } catch (e) {
            reject(e);
          }
        },
      });
    });
}

export function agentSSES1(client: OpenAI, prompt: string, expected: string, middleware: readonly AgentMiddleware[]): () => Promise<void> {
  const agent = createAgent({ model: openAIChat({ client, model: MODEL }), middleware });
  const decoder = new TextDecoder();
  return async () => {
    const reader = toSSEStream(agent.run(prompt)).getReader();
    let bytes = 0;
    let tail = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      bytes += r.value.byteLength;
      if (r.value.byteLength > 0) tail = decoder.decode(r.value);
    }
    check(tail.startsWith('event: run-end') && tail.includes('"reason":"completed"'), `S1w agent: ended with ${tail.slice(0, 80)}`);
    check(bytes > expected.length, `S1w agent: ${bytes} bytes sent`);
  };
}

const echo = defineTool({
  name: 'echo',
  description: 'Returns its arguments',
  parameters: z.object({ i: z.number() }),
  execute: ({ i }) => ({ i }),
});
const ECHO_TOOL: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: { name: 'echo', description: 'Returns its arguments', parameters: z.toJSONSchema(z.object({ i: z.number() })) },
};

/** The floor of S2r: a loop on the raw SDK, appending to its own message array. */
export function sdkLoop(client: OpenAI, k: number): () => Promise<void> {
  return async () => {
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: `s2r:${k}` }];
    let calls = 0;
    for (;;) {
      const stream = await client.chat.completions.create(
        { model: MODEL, messages, tools: [ECHO_TOOL], stream: true, stream_options: { include_usage: true } },
        { maxRetries: 0 },
      );
      let text = '';
      const toolCalls: Array<{ id: string; name: string; args: string }> = [];
      for await (const chunk of stream) {
        const d = chunk.choices[0]?.delta;
        if (!d) continue;
        if (d.content) text += d.content;
        for (const t of d.tool_calls ?? []) {
          const call = (toolCalls[t.index] ??= { id: '', name: '', args: '' });
          if (t.id) call.id = t.id;
          if (t.function?.name) call.name = t.function.name;
          if (t.function?.arguments) call.args += t.function.arguments;
        }
      }
      if (toolCalls.length === 0) {
        check(text === 'done' && calls === k, `S2r SDK loop: ${calls} calls, text ${text}`);
        return;
      }
      messages.push({
        role: 'assistant',
        content: text === '' ? null : text,
        tool_calls: toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.args } })),
      });
      for (const c of toolCalls) {
        const { i } = z.object({ i: z.number() }).parse(JSON.parse(c.args));
        calls++;
        messages.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify({ i }) });
      }
    }
  };
}

export function agentLoop(client: OpenAI, k: number, middleware: readonly AgentMiddleware[]): () => Promise<void> {
  const agent = createAgent({ model: openAIChat({ client, model: MODEL }), tools: [echo], middleware, maxIterations: k + 1 });
  return async () => {
    const result = await agent.invoke(`s2r:${k}`);
    check(result.reason === 'completed' && result.text === 'done', `S2r agent: ${result.reason} ${result.text}`);
    const results = result.messages.filter((m) => m.role === 'tool').length;
    check(results === k, `S2r agent: ${results} tool results, expected ${k}`);
  };
}

/** The AI SDK's loop: `streamText` with the `echo` tool until `stepCountIs(k + 1)`, fully consumed. */
export function aiSdkLoop(baseURL: string, k: number): () => Promise<void> {
  const model = createOpenAICompatible({ name: 'wire', baseURL, apiKey: 'bench', includeUsage: true })(MODEL);
  const tools = {
    echo: tool({
      description: 'Returns its arguments',
      inputSchema: z.object({ i: z.number() }),
      execute: ({ i }) => ({ i }),
    }),
  };
  return async () => {
    let failure: unknown;
    const fail = (error: unknown) => {
      failure ??= error;
    };
    const result = streamText({ model, tools, prompt: `s2r:${k}`, stopWhen: stepCountIs(k + 1), maxRetries: 0, onError: ({ error }) => fail(error) });
    await result.consumeStream({ onError: fail });
    check(failure === undefined, `S2r AI SDK: ${String(failure)}`);
    const [text, steps] = await Promise.all([result.text, result.steps]);
    const calls = steps.reduce((n, step) => n + step.toolResults.length, 0);
    check(text === 'done' && calls === k, `S2r AI SDK: ${calls} tool results, text ${text}, expected ${k} and done`);
  };
}

export async function runWire(middleware: readonly AgentMiddleware[], modes: readonly GcMode[]): Promise<{ s1w: S1wResult[]; s2r: S2rResult[] }> {
  const { url, child } = await startServer();
  try {
    const client = new OpenAI({ apiKey: 'bench', baseURL: url, maxRetries: 0 });
    const expected = s1Text(N_WIRE);
    const s1w: S1wResult[] = [];
    for (const framing of ['whole', 'events'] as const) {
      const prompt = `s1w:${N_WIRE}:${framing}`;
      for (const mode of modes) {
        const [sdk, chat] = await benchPair(N_WIRE, sdkS1(client, prompt, expected), openAIChatS1(client, prompt, expected), PAIRS, mode);
        const [sdkForAgent, agentSSE] = await benchPair(N_WIRE, sdkS1(client, prompt, expected), agentSSES1(client, prompt, expected, middleware), PAIRS, mode);
        s1w.push({ framing, mode, sdk, openAIChat: chat, sdkForAgent, agentSSE });
      }
    }
    const s2r: S2rResult[] = [];
    for (const k of K_WIRE) {
      for (const mode of modes) {
        const runs = k > 500 ? 3 : 5;
        // Eight warm-up runs each at K = 500: the agent's CPU per iteration keeps falling for about
        // eight runs (4,000 -> 1,600 µs), the raw SDK loop's for five (3,500 -> 1,400): with three,
        // 'warm' measured the JIT's warm-up. K = 2,000 runs after them, on code already settled.
        const [sdk, agent] = await benchPair(k, sdkLoop(client, k), agentLoop(client, k, middleware), runs, mode, k > 500 ? 3 : 8);
        // At K = 2,000 an AI SDK run takes about 40 s here: one warm-up (K = 500 warmed its code) and one timed run.
        const [sdkForAiSdk, aiSdk] =
          k > 500
            ? await benchPair(k, sdkLoop(client, k), aiSdkLoop(url, k), 1, mode, 1)
            : await benchPair(k, sdkLoop(client, k), aiSdkLoop(url, k), runs, mode);
        s2r.push({ k, mode, sdk, agent, sdkForAiSdk, aiSdk });
      }
    }
    return { s1w, s2r };
  } finally {
    child.kill('SIGTERM');
  }
}
