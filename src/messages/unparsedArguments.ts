/**
 * The `args` of a tool call whose arguments were not valid JSON: the text the model wrote and why
 * it did not parse. The runtime reports it to the model as an error result; it serializes back to
 * the same text.
 * @example
 * const unparsed = (part: ContentPart) => part.type === 'tool-call' && part.args instanceof UnparsedArguments;
 */
export class UnparsedArguments {
  constructor(
    readonly text: string,
    readonly reason: string,
  ) {}
  toJSON(): string {
    return this.text;
  }
}
