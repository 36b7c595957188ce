/**
 * rx-agent, measured by the same runner as the peers (same process setup, warm-up and GC modes),
 * from its sources through the same loader. `createAgent` with the five operators of its own
 * bench (iterationLogging, modelRetry, modelTimeout, piiRedaction on output, costBudget), consumed
 * through `agent.run(...)`, counting `text-delta` / `tool-result` events.
 *
 * Fake model: a `ModelClient` over an async generator (the shape `openAIChat` has), which reads its
 * request as every peer's fake does and decides with the shared scenario.
 */
import { z } from 'zod';
import { createAgent, defineTool, fromAsyncIterable, type Agent, type ModelClient, type ModelRequest, type ModelUpdate } from '../../../src/index';
import { costBudget, iterationLogging, modelRetry, modelTimeout, piiRedaction } from '../../../operators/index';
import type { Peer } from '../lib/peer.ts';
import { decide, readRequest, type Last, type Turn } from '../lib/scenario.ts';

const silent = { info() {}, debug() {}, trace() {} };
const middleware = [
  iterationLogging({ logger: silent }),
  modelRetry(),
  modelTimeout(),
  piiRedaction({ applyToOutput: true }),
  costBudget({ maxCost: 1e9, pricing: { inputPerToken: 1e-6, outputPerToken: 2e-6 } }),
];

function textOf(message: ModelRequest['messages'][number] | undefined): string {
  let text = '';
  for (const part of message?.content ?? []) if (part.type === 'text') text += part.text;
  return text;
}

function lastOf(request: ModelRequest): { first: string; last: Last } {
  const messages = request.messages;
  const first = textOf(messages.find((m) => m.role === 'user'));
  const lastMsg = messages[messages.length - 1];
  if (lastMsg?.role === 'user') return { first, last: { kind: 'user' } };
  const part = lastMsg?.content[lastMsg.content.length - 1];
  if (part?.type !== 'tool-result') throw new Error('fake model: unexpected last message');
  return { first, last: { kind: 'tool', name: part.name, result: part.result } };
}

// eslint-disable-next-line @typescript-eslint/require-await -- a model's stream is async; this fake one has nothing to wait for
async function* turnUpdates(turn: Turn): AsyncGenerator<ModelUpdate> {
  if (turn.kind === 'text') {
    const delta: ModelUpdate = { type: 'text-delta', text: turn.chunk };
    for (let d = 0; d < turn.deltas; d++) yield delta;
    yield { type: 'usage', inputTokens: 10, outputTokens: turn.deltas };
    yield { type: 'finish', reason: 'stop' };
  } else {
    yield { type: 'tool-call-delta', index: 0, callId: turn.callId, name: turn.name, argsDelta: JSON.stringify(turn.args) };
    yield { type: 'usage', inputTokens: 10, outputTokens: 1 };
    yield { type: 'finish', reason: 'tool-calls' };
  }
}

const model: ModelClient = (request) => {
  readRequest(request.messages, request.tools, request.instructions);
  const { first, last } = lastOf(request);
  const turn = decide(first, last);
  return fromAsyncIterable(() => turnUpdates(turn));
};

let counter = { calls: 0 };
const gates = new Map<number, (i: number) => Promise<void>>();
const echo = defineTool({
  name: 'echo',
  description: 'Echo the index back.',
  parameters: z.object({ i: z.number() }),
  execute: ({ i }) => {
    counter.calls++;
    return { i };
  },
});
const wait = defineTool({
  name: 'wait',
  description: 'Wait until released.',
  parameters: z.object({ i: z.number() }),
  execute: async ({ i }) => {
    await gates.get(i)!(i);
    return { i };
  },
});

const agents = new Map<number, Agent>();
function agentFor(maxIterations: number): Agent {
  let agent = agents.get(maxIterations);
  if (!agent) agents.set(maxIterations, (agent = createAgent({ model, tools: [echo, wait], middleware, maxIterations })));
  return agent;
}

function drain(agent: Agent, prompt: string): Promise<{ textDeltas: number; toolResults: number; text: string }> {
  return new Promise((resolve, reject) => {
    let textDeltas = 0;
    let toolResults = 0;
    let text = '';
    agent.run(prompt).subscribe({
      next(event) {
        if (event.type === 'text-delta') textDeltas++;
        else if (event.type === 'tool-result') toolResults++;
        else if (event.type === 'run-end') text = event.text;
        else if (event.type === 'error') reject(new Error(`rx-agent run error: ${JSON.stringify(event.error)}`));
      },
      error: reject,
      complete: () => resolve({ textDeltas, toolResults, text }),
    });
  });
}

export const rxAgentPeer: Peer = {
  id: 'rx-agent',
  label: 'rx-agent (five operators)',
  packages: [],
  async s1(n) {
    return (await drain(agentFor(1), `s1:${n}`)).textDeltas;
  },
  async s2(k) {
    counter = { calls: 0 };
    const r = await drain(agentFor(k + 1), `s2:${k}`);
    return { toolCalls: counter.calls, toolResultEvents: r.toolResults, finalText: r.text };
  },
  async s3(i, gate) {
    gates.set(i, gate);
    try {
      return (await drain(agentFor(2), `s3:${i}`)).text;
    } finally {
      gates.delete(i);
    }
  },
};
