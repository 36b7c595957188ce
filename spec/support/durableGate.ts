// What the specs of journaled runs use to stop a run part-way, as a process that stops there
// would (they unsubscribe once it is reached), and then resume it: a middleware that holds the
// turn before the run's first checkpoint, and a tool that never ends the first time it runs.
import { NEVER, of, switchMap } from 'rxjs';
import { z } from 'zod';
import { defineTool, type AgentMiddleware, type Tool } from '../../src/index';

/** A promise and its resolve (Node 20 has no Promise.withResolvers). */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = () => undefined as void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

/** A gate on a run's `beforeMessageTurn`: see {@link turnGate}. */
export interface TurnGate {
  /** While true, `beforeMessageTurn` never ends; set it to false before the resume, which then goes through. */
  held: boolean;
  /** Resolves once `beforeMessageTurn` is reached. */
  readonly reached: Promise<void>;
  /** The middleware to give the agent. */
  readonly middleware: AgentMiddleware;
}

/**
 * A middleware whose `beforeMessageTurn` never ends while the gate is `held`: a run stopped there
 * has its start record and no checkpoint yet.
 *
 * @example
 * const gate = turnGate();
 * const live = createAgent({ model, middleware: [gate.middleware], store }).run('hi', { runId: 'r1' }).subscribe();
 * await gate.reached;
 * live.unsubscribe(); // the process stops before the first checkpoint
 * gate.held = false;
 */
export function turnGate(): TurnGate {
  const reached = deferred();
  const gate: TurnGate = {
    held: true,
    reached: reached.promise,
    middleware: {
      name: 'gate',
      beforeMessageTurn: switchMap((ctx) => {
        reached.resolve();
        return gate.held ? NEVER : of(ctx);
      }),
    },
  };
  return gate;
}

/**
 * An idempotent tool `slow` (no arguments) that never ends the first time it runs and answers
 * `'done'` after that; `started` resolves once it has started.
 *
 * @example
 * const { tool, started } = hangingFirstTool();
 * const live = createAgent({ model, tools: [tool], store }).run('go', { runId: 'r1' }).subscribe();
 * await started;
 * live.unsubscribe(); // the process stops while the tool runs: its resume runs it again
 */
export function hangingFirstTool(): { tool: Tool; started: Promise<void> } {
  let calls = 0;
  const started = deferred();
  const tool = defineTool({
    name: 'slow',
    description: 'Never ends the first time',
    parameters: z.object({}),
    idempotent: true,
    execute: () => {
      started.resolve();
      return calls++ === 0 ? new Promise<string>(() => undefined) : 'done';
    },
  });
  return { tool, started: started.promise };
}
