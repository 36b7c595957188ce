import { Observable } from 'rxjs';
import type { AgentEvent, AgentResponse } from '../events/types';
import type { RunInput } from '../messages/message';
import { compileAgent, type AgentOptions, type CompiledAgent } from './compileAgent';
import { EventLog } from './eventLog';
import { runAgent, type RunOptions, type RunResult } from './runAgent';

/** A run started with `agent.start()`. */
export interface RunHandle {
  /** Every event of the run, replayed to each subscriber (a UI may subscribe late). */
  readonly events$: Observable<AgentEvent>;
  /**
   * Answers a request; false for an unknown, duplicate or late `requestId`. An answer's fields are
   * read as its own properties: one it only inherits (`approved: true` on a prototype) counts for nothing.
   */
  respond(response: AgentResponse): boolean;
  /** Cancels the run: `run-end` reason `cancelled`, then `events$` completes. */
  cancel(): void;
}

/** An agent: configuration only; any number of runs may share it. */
export interface Agent {
  readonly name: string;
  /** A cold Observable of the run's events: each subscription is one run. */
  run(input: RunInput, options?: RunOptions): Observable<AgentEvent>;
  /** Starts a run at once. */
  start(input: RunInput, options?: RunOptions): RunHandle;
  /** Runs to the end; resolves with the outcome, rejects with the error of a failed run. */
  invoke(input: RunInput, options?: RunOptions): Promise<RunResult>;
}

/**
 * Creates an agent. Options are checked here, with errors that name what is wrong; so is every
 * hook of every middleware (a hook that is not a function is a `TypeError` naming the middleware
 * and the hook, rather than a failure when a run first reaches it).
 *
 * @example
 * const agent = createAgent({
 *   model: openAIChat({ client: new OpenAI(), model: 'gpt-4o-mini' }),
 *   instructions: 'You are terse.',
 *   tools: [weather],
 *   middleware: [modelRetry(), permissions()],
 * });
 * agent.run('Weather in Paris?').pipe(ofType('text-delta')).subscribe(e => process.stdout.write(e.text));
 */
export function createAgent(options: AgentOptions): Agent {
  const compiled: CompiledAgent = compileAgent(options);
  return Object.freeze({
    name: compiled.name,
    run: (input: RunInput, runOptions?: RunOptions) => runAgent(compiled, input, runOptions),
    start(input: RunInput, runOptions?: RunOptions): RunHandle {
      const log = new EventLog<AgentEvent>();
      let control: { cancel(): void; respond(r: AgentResponse): boolean } | undefined;
      runAgent(compiled, input, runOptions, { onStart: (c) => (control = c) }).subscribe(log);
      return {
        events$: new Observable<AgentEvent>((subscriber) => log.subscribe(subscriber)), // read-only: not the log's next()
        respond: (response) => control?.respond(response) ?? false,
        cancel: () => control?.cancel(),
      };
    },
    invoke(input: RunInput, runOptions?: RunOptions): Promise<RunResult> {
      return new Promise<RunResult>((resolve, reject) => {
        runAgent(compiled, input, runOptions, {
          onResult: (result, error) => (result.reason === 'error' ? reject(error) : resolve(result)),
        }).subscribe({ error: reject }); // a run reports its errors as events; this is a last resort
      });
    },
  });
}
