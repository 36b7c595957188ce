import type { Tool } from './defineTool';

/**
 * Whether a value has the shape of a tool made with `defineTool` or `defineClientTool`: what
 * `createAgent` and a run's own `tools` check before they take a list.
 *
 * @example
 * isTool(defineTool({ name: 'now', description: 'The time', parameters: z.object({}), execute: () => Date.now() })); // true
 */
export function isTool(value: unknown): value is Tool {
  const tool = value as Tool | null | undefined;
  return !!tool && typeof tool === 'object' && typeof tool.execute === 'function' && !!tool.spec && typeof tool.name === 'string';
}
