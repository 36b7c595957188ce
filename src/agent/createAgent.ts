import { Observable } from 'rxjs';
import type { AgentEvent, AgentResponse } from '../events/types';
import type { RunInput } from '../messages/message';
import { compileAgent, type AgentOptions, type CompiledAgent } from './compileAgent';
import { EventLog } from './eventLog';
import { runAgent, type RunOptions, type RunResult } from './runAgent';
import { cancelRun, respondTo, resumeRun, runEvents, runInfo, type ResumeOptions, type RunInfo } from './durable';

/** A run started with `agent.start()`. */
export interface RunHandle {
  /**
   * Every event of the run, replayed to each subscriber (a UI may subscribe late). A late
   * subscriber gets each run of consecutive text (or reasoning) deltas of an iteration as one
   * delta holding their text: what a run keeps for replay does not grow by one event per delta.
   */
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
  /**
   * Continues a journaled run (suspended, or interrupted by its process's end) from its journal, in
   * this process: `run-start` with `resumed: true`, then what is left of the run. A run another
   * process holds is refused with an `error` event (`RunBusyError`) and `run-end` reason `error`,
   * as are an unknown run (`RunNotFoundError`) and a finished one (`RunFinishedError`); a refused
   * resume writes nothing to the journal and its events carry no `seq`. Needs a store.
   */
  resume(runId: string, options?: ResumeOptions): Observable<AgentEvent>;
  /**
   * Answers a journaled run's request from any process: true when the run waits for that
   * `requestId` and this is its first answer before its deadline; false otherwise. A live run gets
   * it at once, a suspended one on its resume. Needs a store (rejects with `StoreRequiredError`).
   */
  respond(runId: string, response: AgentResponse): Promise<boolean>;
  /**
   * Cancels a journaled run from any process: a live one ends with `run-end` reason `cancelled`
   * where it runs; a suspended or interrupted one is ended here the same way (its requests
   * expired, the completed part of its turn saved to its session). False for a finished run.
   */
  cancel(runId: string): Promise<boolean>;
  /**
   * A journaled run's events from the store: those after `after` (a `seq`, default 0), then the
   * new ones as they are written, up to the next `run-end` (a suspended run's included). Errors
   * with `RunNotFoundError` when the store has no journal for the run. Needs a store.
   */
  events(runId: string, options?: { after?: number }): Observable<AgentEvent>;
  /** Journaled runs by id. */
  readonly runs: {
    /** A run's status, session, last `seq`, pending requests and lease; undefined when the store has no journal for it. */
    get(runId: string): Promise<RunInfo | undefined>;
  };
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
    resume: (runId: string, options?: ResumeOptions) => resumeRun(compiled, runId, options),
    respond: (runId: string, response: AgentResponse) => respondTo(compiled, runId, response),
    cancel: (runId: string) => cancelRun(compiled, runId),
    events: (runId: string, options?: { after?: number }) => runEvents(compiled, runId, options),
    runs: Object.freeze({ get: (runId: string) => runInfo(compiled, runId) }),
  });
}
