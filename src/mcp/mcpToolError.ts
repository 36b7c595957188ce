import { ToolError } from '../tools/toolError';

/**
 * An MCP tool's own failure: the server answered the call with `isError: true`. The model reads
 * the message as is (the result's text); `result` is the server's whole `CallToolResult`. A
 * `toolRetry` retries it like any failed call unless its `retryOn` says otherwise.
 *
 * @example
 * toolRetry({ retryOn: (error) => !(error instanceof McpToolError) }); // retry lost connections, not the tool's own failures
 */
export class McpToolError extends ToolError {
  override readonly name: string = 'McpToolError';

  constructor(
    message: string,
    /** The server's answer, as the MCP client returned it. */
    readonly result: unknown,
  ) {
    super(message);
  }
}
