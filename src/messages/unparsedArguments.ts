/** Marks a tool call whose arguments were not valid JSON; the runtime reports it to the model. */
export class UnparsedArguments {
  constructor(
    readonly text: string,
    readonly reason: string,
  ) {}
  toJSON(): string {
    return this.text;
  }
}
