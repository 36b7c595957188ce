import * as E from 'fp-ts/lib/Either.js';
import { UnparsedArguments } from '../messages/unparsedArguments';
import type { Tool } from './defineTool';
import { zodIssues } from '../internal/zodIssues';
import { errorMessage } from '../internal/errorMessage';

/**
 * Checks a call's arguments against the tool's schema. Left is the message the model reads.
 *
 * @example
 * parseArguments(weather, { city: 'Paris' }); // right({ city: 'Paris' })
 */
export function parseArguments<A>(tool: Tool<A>, args: unknown): E.Either<string, A> {
  if (args instanceof UnparsedArguments) {
    return E.left(`Invalid arguments for tool '${tool.name}': not valid JSON (${args.reason})`);
  }
  let parsed: ReturnType<Tool<A>['parameters']['safeParse']>;
  try {
    parsed = tool.parameters.safeParse(args);
  } catch (error) {
    // A transform or refinement that throws (or is asynchronous): the model reads why, the run goes on.
    return E.left(`Invalid arguments for tool '${tool.name}': ${errorMessage(error)}`);
  }
  return parsed.success ? E.right(parsed.data) : E.left(`Invalid arguments for tool '${tool.name}': ${zodIssues(parsed.error)}`);
}
