/**
 * `rx-agent/mcp`: the tools of a Model Context Protocol server, over `@modelcontextprotocol/sdk`
 * (an optional peer dependency).
 *
 * @module rx-agent/mcp
 */
export { mcpTools, type McpClient, type McpRequestOptions, type McpToolFilter, type McpToolInfo, type McpTools, type McpToolsOptions } from './mcpTools';
export { McpToolError } from './mcpToolError';
