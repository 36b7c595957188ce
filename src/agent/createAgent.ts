import { Observable, type SchedulerLike } from 'rxjs';
import type { z } from 'zod';
import type { AgentEvent, AgentResponse } from '../events/types';
import type { RunInput } from '../messages/message';
import { compileAgent, type AgentOptions, type CompiledAgent } from './compileAgent';
import { EventLog } from './eventLog';
import { runAgent, type RunControl, type RunOptions, type RunResult, type StartedControl } from './runAgent';
import { cancelRun, respondTo, resumeRun, runEvents, runInfo, type ResumeOptions, type RunInfo } from './durable';
import type { AgentStore } from '../journal/store';
import type { Tool } from '../tools/defineTool';
import { asTool, type AgentToolInput, type AsToolOptions } from './asTool';

/** A run started with `agent.start()`. `respond` and `cancel` are methods: call them on the handle. */
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

/**
 * The type of the structured output of a run: `z.output` of the run's own `output` schema `S`,
 * else the agent's `O`.
 *
 * @example
 * type Weather = OutputOf<typeof WeatherSchema, undefined>; // z.output<typeof WeatherSchema>
 */
export type OutputOf<S extends z.ZodType, O> = [S] extends [never] ? O : z.output<S>;

/**
 * An agent: configuration only; any number of runs may share it. `O` is the type of its structured
 * output (`z.output` of `createAgent({ output })`; `undefined` without one).
 */
export interface Agent<O = unknown> {
  readonly name: string;
  /** A cold Observable of the run's events: each subscription is one run. */
  run(input: RunInput, options?: RunOptions): Observable<AgentEvent>;
  /** Starts a run at once. */
  start(input: RunInput, options?: RunOptions): RunHandle;
  /**
   * Runs to the end; resolves with the outcome, rejects with the error of a failed run. With
   * structured output, `output` is typed by the run's `output` schema, else by the agent's.
   */
  invoke<S extends z.ZodType = never>(input: RunInput, options?: RunOptions & { output?: S }): Promise<RunResult<OutputOf<S, O>>>;
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
   * it at once, a suspended one on its resume. Rejects with `RunNotFoundError` when the store has
   * no journal for the run. Needs a store (rejects with `StoreRequiredError`).
   */
  respond(runId: string, response: AgentResponse): Promise<boolean>;
  /**
   * Cancels a journaled run from any process: a live one ends with `run-end` reason `cancelled`
   * where it runs; a suspended or interrupted one is ended here the same way (its requests
   * expired, the completed part of its turn saved to its session). False for a finished run;
   * rejects with `RunNotFoundError` when the store has no journal for it.
   */
  cancel(runId: string): Promise<boolean>;
  /**
   * A journaled run's events from the store: those after `after` (a `seq`, default 0), then the
   * new ones as they are written, up to the next `run-end` (a suspended run's included); at once
   * for a finished run whose `run-end` is at or before `after`. Errors with `RunNotFoundError`
   * when the store has no journal for the run. Needs a store.
   */
  events(runId: string, options?: { after?: number }): Observable<AgentEvent>;
  /**
   * This agent as a tool of another agent: the parent's model calls it with `{ input: string }`;
   * each call runs this agent on `input` (a fresh run, cancelled with the call), forwards its events
   * to the parent as `tool-progress` (`value`: the event), and returns its final text. A run that
   * fails, is cancelled or suspends gives an error result the parent's model reads.
   */
  asTool(options: AsToolOptions): Tool<AgentToolInput, string>;
  /**
   * @internal This agent when it has a store; otherwise the same agent over a store of its own,
   * made once by `makeStore` (a `memoryStore()` on the agent's scheduler), so that a transport can
   * suspend and resume its runs in this process. A member rather than an import, so that the
   * entries that use it carry no runtime of their own.
   */
  readonly withOwnStore?: (makeStore: (scheduler: SchedulerLike) => AgentStore) => Agent<O>;
  /**
   * @internal The keys of the state its middleware share (listed in a middleware's `state`,
   * defined with `shared: true`): those a run's `state` option may set. A UI transport keeps
   * these of the state its client sends.
   */
  readonly sharedStateKeys?: readonly string[];
  /**
   * @internal The names of its tools and its middleware's: a UI transport refuses a client tool
   * named as one of them, as a run's `tools` option would.
   */
  readonly toolNames?: readonly string[];
  /** Journaled runs by id. */
  readonly runs: {
    /** A run's status, session, last `seq`, pending requests and lease, and once it ended its reason and the calls it left to the client; undefined when the store has no journal for it. */
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
 *   output: z.object({ city: z.string(), celsius: z.number() }), // optional: a typed, checked final answer
 * });
 * agent.run('Weather in Paris?').pipe(ofType('text-delta')).subscribe(e => process.stdout.write(e.text));
 */
export function createAgent<S extends z.ZodType = never>(options: AgentOptions & { output?: S }): Agent<OutputOf<S, undefined>> {
  return agentOf(compileAgent(options));
}

/** The configuration behind each agent `createAgent` made. */
const compiledAgents = new WeakMap<object, CompiledAgent>();
/** The journaled twin of each agent without a store, made by {@link durableAgent}. */
const durableTwins = new WeakMap<object, object>();

/** `agent.withOwnStore(makeStore)`: the agent itself when it has a store, else its twin over a store of its own. */
function durableAgent<O>(agent: Agent<O>, makeStore: (scheduler: SchedulerLike) => AgentStore): Agent<O> {
  const compiled = compiledAgents.get(agent);
  if (!compiled || compiled.store) return agent;
  let twin = durableTwins.get(agent) as Agent<O> | undefined;
  if (!twin) {
    twin = agentOf<O>({ ...compiled, store: makeStore(compiled.scheduler) });
    durableTwins.set(agent, twin);
  }
  return twin;
}

/**
 * `agent.start()`'s handle: one object holding the replay log and the run (what a waiting run
 * keeps per handle), its methods on the prototype rather than a closure each.
 */
class StartedRun implements RunHandle, RunControl {
  readonly events$: Observable<AgentEvent>;
  private control: StartedControl | undefined;

  constructor(compiled: CompiledAgent, input: RunInput, runOptions: RunOptions | undefined) {
    const log = new EventLog<AgentEvent>();
    this.events$ = log.readOnly(); // not the log's next()
    runAgent(compiled, input, runOptions, this).subscribe(log);
  }

  /** @internal Called by the run once it is set up. */
  onStart(control: StartedControl): void {
    this.control = control;
  }

  respond(response: AgentResponse): boolean {
    return this.control?.respond(response) ?? false;
  }

  cancel(): void {
    this.control?.cancel();
  }
}

function agentOf<O>(compiled: CompiledAgent): Agent<O> {
  const agent: Agent<O> = Object.freeze({
    name: compiled.name,
    run: (input: RunInput, runOptions?: RunOptions) => runAgent(compiled, input, runOptions),
    start: (input: RunInput, runOptions?: RunOptions): RunHandle => new StartedRun(compiled, input, runOptions),
    invoke(input: RunInput, runOptions?: RunOptions) {
      return new Promise<RunResult<never>>((resolve, reject) => {
        runAgent(compiled, input, runOptions, {
          // The output is the schema's parse of the answer: of the type the signature names.
          onResult: (result, error) => (result.reason === 'error' ? reject(error) : resolve(result as RunResult<never>)),
        }).subscribe({ error: reject }); // a run reports its errors as events; this is a last resort
      });
    },
    resume: (runId: string, options?: ResumeOptions) => resumeRun(compiled, runId, options),
    respond: (runId: string, response: AgentResponse) => respondTo(compiled, runId, response),
    cancel: (runId: string) => cancelRun(compiled, runId),
    events: (runId: string, options?: { after?: number }) => runEvents(compiled, runId, options),
    asTool: (options: AsToolOptions) => asTool(compiled.name, (input, runOptions) => runAgent(compiled, input, runOptions), options),
    withOwnStore: (makeStore: (scheduler: SchedulerLike) => AgentStore) => durableAgent(agent, makeStore),
    sharedStateKeys: Object.freeze([...compiled.states.values()].filter((def) => def.shared).map((def) => def.key)),
    toolNames: Object.freeze(compiled.tools.map((tool) => tool.name)),
    runs: Object.freeze({ get: (runId: string) => runInfo(compiled, runId) }),
  });
  compiledAgents.set(agent, compiled);
  return agent;
}
