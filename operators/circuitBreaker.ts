import { z } from 'zod';
import { mapContext, defineState, type AgentMiddleware, type ToolCallPart } from '../src/index';
import { fillTemplate } from './internal/fillTemplate';
import { checkOptions, optionNames } from './internal/checkOptions';

/** Options of {@link circuitBreaker}. */
export interface CircuitBreakerOptions {
  /**
   * The run terminates before a call that would be the `maxConsecutiveCalls`-th identical call
   * of a tool in a row (default 3, a positive integer).
   */
  maxConsecutiveCalls?: number;
  /**
   * The termination message; `{toolName}` and `{count}` are replaced (every occurrence). Default:
   * `Circuit breaker triggered: '{toolName}' was called {count} times in a row with identical arguments.`
   */
  message?: string;
}

/** The keys of {@link CircuitBreakerOptions}: any other is refused. */
const OPTIONS = optionNames<CircuitBreakerOptions>({ maxConsecutiveCalls: true, message: true });

/** The default termination message of {@link circuitBreaker}. */
export const CIRCUIT_BREAKER_MESSAGE = "Circuit breaker triggered: '{toolName}' was called {count} times in a row with identical arguments.";

/** Per tool: the signature of its last call and how many identical calls in a row led to it. */
const CircuitState = defineState({
  key: 'rx-agent.circuitBreaker.calls',
  schema: z.object({
    lastSignature: z.record(z.string(), z.string()),
    count: z.record(z.string(), z.number()),
  }),
  initial: () => ({ lastSignature: {}, count: {} }),
  scope: 'run',
});

type CircuitSnapshot = z.output<typeof CircuitState.schema>;

/**
 * Stops a run that loops: the model calling the same tool with the same arguments again and again.
 *
 * A call's signature is the tool name plus its arguments as JSON with the keys sorted at every
 * depth (so `{ a: 1, b: 2 }` and `{ b: 2, a: 1 }` are identical). Before a batch of tools runs,
 * each call's predicted count is "that tool's previous call had the same signature ? its count
 * + 1 : 1". When any call's predicted count reaches `maxConsecutiveCalls`, no tool of the batch
 * runs, the event `circuit-breaker-triggered { toolName, count, iteration }` is emitted (for the
 * first such call in the model's order) and the run terminates with `message`. After the
 * iteration, the signatures and counts are recorded in run state (a new run starts from zero).
 *
 * Decisions where the spec is silent:
 * - Calls are counted one after another in the model's order, also inside one batch: a batch
 *   that calls `search({ q: 'x' })` twice counts 1 then 2 (that is "in a row").
 * - Counts are per tool: a call of another tool in between does not reset a tool's count.
 * - The counts are recorded in `afterIteration` for every iteration that had tool calls and did
 *   not terminate (calls of a batch another middleware skipped count too: the model asked for them).
 * - Arguments the model wrote as invalid JSON are compared by their raw text.
 *
 * @param options `maxConsecutiveCalls` (default 3), `message` (default {@link CIRCUIT_BREAKER_MESSAGE}).
 * @throws TypeError when an option is invalid (the message names it).
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   tools: [search],
 *   middleware: [circuitBreaker({ maxConsecutiveCalls: 3, message: 'Stopped: {toolName} looped {count} times.' })],
 * });
 */
export function circuitBreaker(options: CircuitBreakerOptions = {}): AgentMiddleware {
  checkOptions('circuitBreaker', options, OPTIONS);
  const { maxConsecutiveCalls = 3, message = CIRCUIT_BREAKER_MESSAGE } = options;
  if (!Number.isInteger(maxConsecutiveCalls) || maxConsecutiveCalls < 1) {
    throw new TypeError(`circuitBreaker: 'maxConsecutiveCalls' must be a positive integer, got ${String(maxConsecutiveCalls)}`);
  }
  if (typeof message !== 'string') {
    throw new TypeError(`circuitBreaker: 'message' must be a string, got ${typeof message}`);
  }

  return {
    name: 'circuitBreaker',
    beforeToolExecution: mapContext((ctx) => {
      if (ctx.termination || ctx.skipped) return ctx; // an earlier middleware already decided the batch
      let state = ctx.state(CircuitState);
      for (const call of ctx.toolCalls) {
        const next = record(state, call);
        const count = next.count[call.name];
        if (count >= maxConsecutiveCalls) {
          ctx.emit({ type: 'circuit-breaker-triggered', toolName: call.name, count, iteration: ctx.iteration });
          return ctx.terminate(fillTemplate(message, { toolName: call.name, count: String(count) }));
        }
        state = next;
      }
      return ctx;
    }),
    afterIteration: mapContext((ctx) => {
      const calls = ctx.toolCalls;
      if (calls.length === 0 || ctx.termination) return ctx;
      return ctx.updateState(CircuitState, (current) => calls.reduce(record, current));
    }),
  };
}

/** The state after `call`: its signature, and its count (previous + 1 when identical, else 1). */
function record(state: CircuitSnapshot, call: ToolCallPart): CircuitSnapshot {
  const signature = signatureOf(call);
  const identical = Object.hasOwn(state.lastSignature, call.name) && state.lastSignature[call.name] === signature;
  const count = identical && Object.hasOwn(state.count, call.name) ? state.count[call.name] + 1 : 1;
  return {
    lastSignature: { ...state.lastSignature, [call.name]: signature },
    count: { ...state.count, [call.name]: count },
  };
}

function signatureOf(call: ToolCallPart): string {
  return `${call.name}(${canonicalJson(call.args)})`;
}

/** JSON with object keys sorted at every depth (honours `toJSON`, skips `undefined` like JSON.stringify). */
function canonicalJson(value: unknown): string {
  if (value !== null && typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    value = (value as { toJSON(): unknown }).toJSON();
  }
  if (Array.isArray(value)) {
    return `[${value.map((item) => (item === undefined || typeof item === 'function' ? 'null' : canonicalJson(item))).join(',')}]`;
  }
  if (value !== null && typeof value === 'object') {
    const record = value as Record<string, unknown>;
    const parts: string[] = [];
    for (const key of Object.keys(record).sort()) {
      const item = record[key];
      if (item === undefined || typeof item === 'function') continue;
      parts.push(`${JSON.stringify(key)}:${canonicalJson(item)}`);
    }
    return `{${parts.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
