import { Observable, Subscriber, type Observer } from 'rxjs';
import { z } from 'zod';
import type { AgentEvent, ErrorInfo } from '../events/types';
import type { RunInput } from '../messages/message';
import type { ParentCall } from '../middleware/runScope';
import { callOfContext } from './executeFunction';
import { defineTool, type NeedsApproval, type Tool } from '../tools/defineTool';
import { ToolError } from '../tools/toolError';
import type { RunOptions } from './runAgent';
import { checkOptions, optionNames } from '../internal/optionNames';

/**
 * Options of `agent.asTool()`: the tool's name and description as the parent's model sees them.
 *
 * @example
 * const research = researcher.asTool({ name: 'research', description: 'Finds sources on a topic', needsApproval: false });
 */
export interface AsToolOptions {
  /** The tool's name: 1–64 letters, digits, `_` or `-`. */
  name: string;
  /** What the tool does, for the parent's model: when to call it and what to ask. */
  description: string;
  /** Ask a person before the parent runs it (enforced by `permissions()`, as for any tool). */
  needsApproval?: NeedsApproval<AgentToolInput>;
}

/** The keys of {@link AsToolOptions}: any other is refused. */
const AS_TOOL_OPTIONS = optionNames<AsToolOptions>({ name: true, description: true, needsApproval: true });

/** The arguments of an agent used as a tool: what the parent's model asks it. */
export interface AgentToolInput {
  input: string;
}

/**
 * @internal `agent.asTool(options)`: a tool that runs `run` (the child agent's) on the call's
 * `input`, with the call's signal; every child event goes to the parent as `tool-progress`, and
 * the child's final text is the result. A child that fails, is cancelled or suspends gives an
 * error result.
 */
export function asTool(
  name: string,
  run: (input: RunInput, options: RunOptions) => Observable<AgentEvent>,
  options: AsToolOptions,
): Tool<AgentToolInput, string> {
  checkOptions('asTool', options, AS_TOOL_OPTIONS, "with 'name' and 'description'");
  if (typeof options.description !== 'string' || options.description === '') {
    throw new TypeError(`asTool: 'description' must be a non-empty string: the parent's model reads it to know when to call agent '${name}'`);
  }
  const label = `Agent '${name}'`;
  return defineTool({
    name: options.name,
    description: options.description,
    parameters: z.object({ input: z.string().describe('The request for the agent, in plain language, with everything it needs to know') }),
    needsApproval: options.needsApproval,
    execute: ({ input }, ctx) =>
      new Observable<string>((subscriber) => {
        let error: ErrorInfo | undefined;
        let end: AgentEvent | undefined;
        const observer: Observer<AgentEvent> = {
          next: (event) => {
            ctx.progress(event);
            if (event.type === 'error') error = event.error;
            else if (event.type === 'run-end') end = event;
          },
          error: (failure: unknown) => subscriber.error(failure),
          complete: () => {
            if (end?.type !== 'run-end') return subscriber.error(new ToolError(`${label} ended without an answer`));
            if (end.clientCalls !== undefined && end.clientCalls.length > 0) {
              const names = end.clientCalls.map((call) => `'${call.name}'`).join(', ');
              return subscriber.error(new ToolError(`${label} called a tool its client runs (${names}), which a tool call cannot run`));
            }
            switch (end.reason) {
              case 'completed':
              case 'terminated':
              case 'max-iterations':
                subscriber.next(end.text);
                return subscriber.complete();
              case 'error':
                return subscriber.error(new ToolError(`${label} failed: ${error ? `${error.name}: ${error.message}` : 'unknown error'}`));
              case 'suspended':
                return subscriber.error(new ToolError(`${label} stopped to wait for an answer, which a tool call cannot give`));
              default:
                return subscriber.error(new ToolError(`${label} was ${end.reason}`));
            }
          },
        };
        return run(input, { signal: ctx.signal }).subscribe(new SubAgentSink(observer, callOfContext(ctx)));
      }),
  });
}

/**
 * The subscriber of a sub-agent's run: the run reads the call it serves from it (`parentCallOf`),
 * so that telemetry nests the run's span in the call's without a run option.
 */
class SubAgentSink extends Subscriber<AgentEvent> {
  constructor(
    destination: Observer<AgentEvent>,
    readonly parentCall: ParentCall | undefined,
  ) {
    super(destination);
  }
}
