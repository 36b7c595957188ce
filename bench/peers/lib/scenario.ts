/**
 * The scripted "model" shared by every peer's fake. Each peer adapts this to its own model
 * interface (AI SDK LanguageModelV3 stream parts, LangChain AIMessageChunks, OpenAI Agents
 * StreamEvents); the decision of what to say next is identical everywhere and is taken from the
 * conversation the framework hands the model, exactly as a real model would:
 *
 *  - the first user message names the workload: "s1:<N>", "s2:<K>" or "s3:<run index>";
 *  - if the last message is that user message, the model starts the workload;
 *  - if the last message is a tool result, the model reads it and decides the next turn.
 *
 * Reading the tool result (instead of keeping a counter) proves that the framework really fed the
 * tool's answer back to the model.
 */

export const DELTA = 'tok ';
export const FINAL_TEXT = 'done';

export type Turn =
  | { kind: 'text'; deltas: number; chunk: string } // stream `deltas` text deltas of `chunk`
  | { kind: 'tool'; name: string; args: Record<string, unknown>; callId: string };

export type Last = { kind: 'user' } | { kind: 'tool'; name: string; result: unknown };

export function parseWorkload(firstUserText: string): { workload: 's1' | 's2' | 's3'; n: number } {
  const m = /^(s1|s2|s3):(\d+)$/.exec(firstUserText.trim());
  if (!m) throw new Error(`fake model: unexpected first user message ${JSON.stringify(firstUserText)}`);
  return { workload: m[1] as 's1' | 's2' | 's3', n: Number(m[2]) };
}

function resultField(result: unknown): number {
  let r = result;
  if (typeof r === 'string') r = JSON.parse(r);
  const i = (r as { i?: unknown } | null)?.i;
  if (typeof i !== 'number') throw new Error(`fake model: tool result without numeric i: ${JSON.stringify(result)}`);
  return i;
}

export function decide(firstUserText: string, last: Last): Turn {
  const { workload, n } = parseWorkload(firstUserText);
  const text: Turn = { kind: 'text', deltas: 1, chunk: FINAL_TEXT };
  switch (workload) {
    case 's1':
      if (last.kind !== 'user') throw new Error('fake model: s1 expects a single turn');
      return { kind: 'text', deltas: n, chunk: DELTA };
    case 's2': {
      // K iterations: tool turns i = 0..K-1, then the final text turn.
      const next = last.kind === 'user' ? 0 : expectTool(last, 'echo') + 1;
      if (next < n) return { kind: 'tool', name: 'echo', args: { i: next }, callId: `call_${next}` };
      return text;
    }
    case 's3':
      if (last.kind === 'user') return { kind: 'tool', name: 'wait', args: { i: n }, callId: `call_w${n}` };
      if (expectTool(last, 'wait') !== n) throw new Error('fake model: s3 got the wrong tool result');
      return text;
  }
}

function expectTool(last: Last, name: string): number {
  if (last.kind !== 'tool' || last.name !== name) {
    throw new Error(`fake model: expected a ${name} tool result, got ${JSON.stringify(last)}`);
  }
  return resultField(last.result);
}

/** Where {@link readRequest} leaves what it read, so that the reads are not optimised away. */
export let readSink = 0;

/**
 * Reads a model call's request the way an adapter does before encoding it, the same for every
 * framework: each message's role (or type) and content, each tool's name, and the instructions.
 * Its cost grows with the history for everyone alike; the frameworks differ in what they do
 * besides (rx-agent's own bench times this read inside its S2 runs).
 */
export function readRequest(messages: readonly unknown[], tools: readonly unknown[] = [], instructions?: unknown): number {
  let sum = typeof instructions === 'string' ? instructions.length : 0;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as { role?: unknown; type?: unknown; content?: unknown };
    const kind = m.role ?? m.type;
    if (typeof kind === 'string') sum += kind.length;
    const c = m.content;
    sum += typeof c === 'string' ? c.length : Array.isArray(c) ? c.length : 0;
  }
  for (const t of tools) {
    const name = (t as { name?: unknown; function?: { name?: unknown } }).name ?? (t as { function?: { name?: unknown } }).function?.name;
    if (typeof name === 'string') sum += name.length;
  }
  readSink = (readSink + sum) | 0;
  return sum;
}
