import type { ToolSpec } from '../model/types';
import { defineClientTool } from '../tools/defineClientTool';
import type { Tool } from '../tools/defineTool';
import { isArray } from '../internal/isArray';
import { show } from '../internal/show';
import type { CompiledAgent } from './compileAgent';
import { isTool } from '../tools/isTool';
import { isClientTool } from './clientCalls';

/**
 * Checks a run's own tools (`RunOptions.tools`): tools, named unlike the agent's tools and each
 * other. A journaled run (an agent with a store) takes client tools only: a resume in another
 * process rebuilds those from their specs, but could not find a server tool's `execute`.
 */
export function checkRunTools(agent: CompiledAgent, tools: unknown): readonly Tool[] {
  if (!isArray(tools)) throw new TypeError(`run: 'tools' must be an array of tools (defineTool, defineClientTool), got ${show(tools)}`);
  const agentTools = new Set(agent.tools.map((tool) => tool.name));
  const own = new Set<string>();
  tools.forEach((tool: unknown, i) => {
    if (!isTool(tool)) {
      throw new TypeError(`run: 'tools' at position ${i} is not a tool; make tools with defineTool() or defineClientTool()`);
    }
    if (agentTools.has(tool.name)) throw new TypeError(`run: 'tools' has a tool named '${tool.name}', as the agent (or one of its middleware) has already`);
    if (own.has(tool.name)) throw new TypeError(`run: 'tools' has two tools named '${tool.name}'`);
    if (agent.store && !isClientTool(tool)) {
      throw new TypeError(
        `run: 'tools' of a journaled run (an agent with a store) takes client tools only (defineClientTool): a resume could not run '${tool.name}'; give it to the agent instead`,
      );
    }
    own.add(tool.name);
  });
  return tools as readonly Tool[];
}

/** The specs a journal's start record keeps of a run's client tools (undefined: none). */
export function clientToolSpecs(tools: readonly Tool[]): ToolSpec[] | undefined {
  const specs = tools.filter(isClientTool).map((tool) => tool.spec);
  return specs.length > 0 ? specs : undefined;
}

/** A run without tools of its own shares this list (a waiting run holds no array of its own). */
export const NO_RUN_TOOLS: readonly Tool[] = Object.freeze([]);

/** A resumed run's client tools, rebuilt from the specs its journal kept. */
export function rebuildClientTools(specs: readonly ToolSpec[] | undefined): readonly Tool[] {
  return specs && specs.length > 0
    ? specs.map((spec) => defineClientTool({ name: spec.name, description: spec.description, parameters: spec.parameters }))
    : NO_RUN_TOOLS;
}
