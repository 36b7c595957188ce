import { defineClientTool, type Tool } from '../index';
import { isArray } from '../internal/isArray';
import { errorMessage } from '../internal/errorMessage';
import { show } from '../internal/show';

/**
 * @internal A `RunAgentInput` that cannot run as the client sent it (its `tools` malformed):
 * `agUiHandler` answers it with a 400 saying why, `AgUiAgent.runAgent()` rejects with it.
 *
 * @example
 * throw new RunAgentInputError("RunAgentInput: 'tools' must be an array of tools, got {}");
 */
export class RunAgentInputError extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = 'RunAgentInputError';
  }
}

/**
 * The tools an AG-UI client offers (`RunAgentInput.tools`: its frontend actions) as client tools
 * of the run: the model is given each one's JSON Schema as it is, and a call is left to the client.
 * Undefined when it offers none. Throws a {@link RunAgentInputError} naming what the client sent
 * malformed, or a tool named as one of `agentToolNames` (the agent's own: it would take the calls).
 *
 * @example
 * clientToolsOf([{ name: 'pick_color', description: 'Asks the user', parameters: { type: 'object', properties: {} } }]);
 */
export function clientToolsOf(tools: unknown, agentToolNames: readonly string[] = []): Tool[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!isArray(tools)) throw new RunAgentInputError(`RunAgentInput: 'tools' must be an array of tools, got ${show(tools)}`);
  if (tools.length === 0) return undefined;
  const positions = new Map<string, number>();
  return tools.map((tool, i) => {
    let made: Tool;
    try {
      const { name, description, parameters } = (tool ?? {}) as { name?: unknown; description?: unknown; parameters?: unknown };
      made = defineClientTool({
        name: name as string,
        description: description as string | undefined,
        parameters: noArguments(parameters) ? { type: 'object', properties: {} } : (parameters as Record<string, unknown>),
      });
    } catch (error) {
      throw new RunAgentInputError(`RunAgentInput: tool at position ${i}: ${errorMessage(error)}`);
    }
    if (agentToolNames.includes(made.name)) {
      throw new RunAgentInputError(`RunAgentInput: the tool at position ${i} is named '${made.name}', as a tool of the agent is; give it another name`);
    }
    const first = positions.get(made.name);
    if (first !== undefined) throw new RunAgentInputError(`RunAgentInput: the tools at positions ${first} and ${i} are both named '${made.name}'`);
    positions.set(made.name, i);
    return made;
  });
}

/** A tool without arguments, as a client may send it: no schema at all, or the empty schema `{}`. */
function noArguments(parameters: unknown): boolean {
  return parameters === undefined || parameters === null || (typeof parameters === 'object' && !isArray(parameters) && Object.keys(parameters).length === 0);
}
