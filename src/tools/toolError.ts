/**
 * An error whose message is written for the model: the result it reads is the message as is.
 * Any other error a tool raises reaches the model as `Error: <message>`.
 *
 * @example
 * throw new ToolError(`City 'Atlantis' not found`);
 */
export class ToolError extends Error {
  override readonly name: string = 'ToolError';
}
