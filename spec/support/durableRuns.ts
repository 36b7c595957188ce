// The agent of the cross-process specs, the same in the child processes (a worker) and in the
// spec's own process, on any store: a model that asks for one tool call and then answers with
// what it read, and tools that count their executions where the store is (a count that a killed
// process cannot lose).
import { z } from 'zod';
import {
  createAgent,
  defineTool,
  type Agent,
  type AgentMiddleware,
  type AgentStore,
  type Message,
  type ModelRequest,
  type Tool,
  type ToolExecutionContext,
} from '../../src/index';
import { scriptedModel, type ScriptedModel } from '../../src/testing/index';

/** What a tool does on a given execution (1 = the first): finish, or hang until the process is killed. */
export type ToolMode = 'finish' | 'hang-first';

/**
 * Counts an execution of a tool by a run, atomically, outside the process: resolves with the
 * number of executions of the tool (1 = the first), after counting the call's executions too.
 */
export type CountExecution = (runId: string, tool: string, callId: string) => Promise<number>;

export interface DurableAgentOptions {
  readonly store: AgentStore;
  readonly countExecution: CountExecution;
  readonly leaseMs: number;
  /** The tool the model calls. */
  readonly tool: 'pay' | 'lookup' | 'book';
  /** How the tools behave in this process. */
  readonly mode: ToolMode;
  readonly middleware?: readonly AgentMiddleware[];
  /** Deltas of the final answer, and ms between them (a run streaming long enough to be followed or cancelled). */
  readonly finalDeltas?: number;
  readonly deltaDelayMs?: number;
  readonly onRequest?: 'wait' | 'suspend';
  /**
   * Instead of one call of `tool`: per iteration, the calls the model asks for (each tool taking
   * `ms` to run), then the final answer.
   */
  readonly plan?: ReadonlyArray<ReadonlyArray<{ readonly tool: 'pay' | 'lookup'; readonly ms: number }>>;
}

/** The line a child prints when a tool has started (after counting it). */
export const TOOL_STARTED = 'TOOL-STARTED';

/** The text of the tool results in the messages a model read. */
export function toolResultsRead(request: ModelRequest): string[] {
  const out: string[] = [];
  for (const message of request.messages) {
    for (const part of message.content) if (part.type === 'tool-result') out.push(typeof part.result === 'string' ? part.result : JSON.stringify(part.result));
  }
  return out;
}

/** Every tool call in `messages` is followed by its result (what a model API requires). */
export function unpairedToolCalls(messages: readonly Message[]): string[] {
  const calls = new Set<string>();
  for (const message of messages) {
    for (const part of message.content) {
      if (part.type === 'tool-call') calls.add(part.callId);
      else if (part.type === 'tool-result') calls.delete(part.callId);
    }
  }
  return [...calls];
}

export function durableAgent(options: DurableAgentOptions): { agent: Agent; model: ScriptedModel } {
  const { store, countExecution, leaseMs, mode } = options;
  const counting = (name: string, result: (n: number) => unknown) => async (args: { ms?: number } | object, ctx: ToolExecutionContext) => {
    const n = await countExecution(ctx.runId, name, ctx.callId);
    if (mode === 'hang-first' && n === 1) {
      process.stdout.write(`${TOOL_STARTED} ${name}\n`);
      return new Promise<never>(() => undefined); // until the process is killed
    }
    const ms = (args as { ms?: number }).ms;
    if (ms) await new Promise((resolve) => setTimeout(resolve, ms));
    return result(n);
  };
  const tools: Tool[] = [
    defineTool({
      name: 'pay',
      description: 'Pays an invoice (not safe to repeat)',
      parameters: z.object({ invoice: z.string(), ms: z.number().optional() }),
      execute: counting('pay', (n) => ({ paid: true, execution: n })),
    }),
    defineTool({
      name: 'lookup',
      description: 'Looks an invoice up (safe to repeat)',
      parameters: z.object({ invoice: z.string(), ms: z.number().optional() }),
      idempotent: true,
      execute: counting('lookup', (n) => ({ amount: 42, execution: n })),
    }),
    defineTool({
      name: 'book',
      description: 'Books a table (asks first)',
      parameters: z.object({ place: z.string() }),
      needsApproval: true,
      execute: counting('book', (n) => ({ booked: true, execution: n })),
    }),
  ];
  const deltas = options.finalDeltas ?? 1;
  const model = scriptedModel(
    [
      (request) => {
        const read = toolResultsRead(request);
        const plan = options.plan;
        if (plan) {
          // The iteration is the number of tool-result messages read so far.
          const iteration = request.messages.filter((m) => m.content.some((part) => part.type === 'tool-result')).length;
          if (iteration < plan.length) {
            return {
              toolCalls: plan[iteration].map(({ tool, ms }, j) => ({
                name: tool,
                args: { invoice: `INV-${iteration}-${j}`, ms },
                callId: `call-${iteration}-${j}`,
              })),
            };
          }
        } else if (read.length === 0)
          return { toolCalls: [{ name: options.tool, args: options.tool === 'book' ? { place: 'Flore' } : { invoice: 'INV-7' }, callId: 'call-1' }] };
        const text = `Done. The tool said: ${read.join(' | ')}`;
        if (deltas <= 1) return { text, delay: options.deltaDelayMs };
        return { text: [...Array.from({ length: deltas - 1 }, (_, i) => `d${i} `), text], delay: options.deltaDelayMs };
      },
    ],
    { loop: true },
  );
  const agent = createAgent({
    model,
    tools,
    middleware: options.middleware ? [...options.middleware] : [],
    store,
    leaseMs,
    onRequest: options.onRequest,
  });
  return { agent, model };
}
