import { AbstractAgent, type AgentConfig, type AgentSubscriber, type RunAgentInput, type RunAgentParameters, type RunAgentResult } from '@ag-ui/client';
import { defer, Observable, switchMap, takeUntil } from 'rxjs';
import type { Agent, RunOptions } from '../index';
import { eventsFor } from './agUiHandler';
import { SuspendedRuns, questionId } from '../bindings/suspendedRuns';
import { checkOnError, toAgUi, type ToAgUiOptions } from './toAgUi';
import { checkOptionsObject } from '../internal/optionNames';

/** Options of {@link AgUiAgent}: AG-UI's agent config, and the options of each run. */
export interface AgUiAgentConfig extends AgentConfig, Pick<ToAgUiOptions, 'onError'> {
  /**
   * Options of each new run (a session, a signal…); `runId` is the input's. A `state` given here
   * is the run's instead of the one taken from the input's `state`, and `tools` the run's instead of
   * the client tools made of the input's `tools`.
   */
  runOptions?: (input: RunAgentInput) => RunOptions | Promise<RunOptions>;
}

/**
 * An AG-UI agent (`AbstractAgent` of `@ag-ui/client`) that runs an rx-agent agent in this
 * process: no HTTP, the same events as {@link agUiHandler} sends. `runAgent()` keeps the
 * conversation in `messages` and the shared state in `state` (a run starts from the keys the
 * agent shares, and its changes come back as `STATE_DELTA`); a run that asks a question finishes
 * with an `interrupt` outcome (`pendingInterrupts`), and `runAgent({ resume: [{ interruptId, status: 'resolved', payload: { approved: true } }] })`
 * answers it and streams the rest. `abortRun()` stops the runs streaming now, as `HttpAgent`'s
 * stops its request: the rx-agent run is cancelled and `runAgent()` resolves with what came so far.
 * An input that cannot run rejects `runAgent()` (subscribers' `onRunFailed` get the error), as
 * `HttpAgent`'s rejects on the handler's 400 or 409: malformed `tools` (when the run uses them),
 * an answer no run waits for.
 *
 * @example
 * const ui = new AgUiAgent(agent);
 * ui.messages.push({ id: '1', role: 'user', content: 'Book a table' });
 * const { newMessages } = await ui.runAgent();
 */
export class AgUiAgent extends AbstractAgent {
  private readonly runs: SuspendedRuns;
  private readonly runOptions: AgUiAgentConfig['runOptions'];
  /** `config.onError` (`onError` is a method of `AbstractAgent`). */
  private readonly errorText: AgUiAgentConfig['onError'];
  /** Aborted by `abortRun()`: the run streaming then ends. A new one per `runAgent()`, as `HttpAgent` has. */
  private abortController = new AbortController();

  constructor(agent: Agent, config: AgUiAgentConfig = {}) {
    if (!agent || typeof agent.start !== 'function') throw new TypeError('AgUiAgent: expected an agent (createAgent(...))');
    checkOptionsObject('AgUiAgent', config); // its own options and AG-UI's AgentConfig: no fixed names
    const { runOptions, onError, ...agentConfig } = config;
    checkOnError('AgUiAgent', onError);
    super({ description: agent.name, ...agentConfig });
    this.runs = new SuspendedRuns(agent);
    this.runOptions = runOptions;
    this.errorText = onError;
  }

  /** The run for `input` (or the resumed one) as AG-UI events. */
  run(input: RunAgentInput): ReturnType<AbstractAgent['run']> {
    const { runs, runOptions, errorText } = this;
    const { signal } = this.abortController; // the controller of the runAgent() that asked, even if it aborts before streaming
    const events$ = defer(() => eventsFor(runs, input, runOptions && (() => runOptions(input)))).pipe(
      switchMap((run$) => run$),
      toAgUi({ threadId: input.threadId, runId: input.runId, interruptId: questionId, onError: errorText }),
      // Leaving the run cancels it (a client that goes away from agUiHandler's stream does the same).
      takeUntil(abortOf(signal)),
    );
    // The same rxjs 7 Observable contract; the client may hold a copy of rxjs of its own.
    return events$ as unknown as ReturnType<AbstractAgent['run']>;
  }

  /** Runs the agent with a new abort controller (the one given, else its own), as `HttpAgent` does. */
  override runAgent(parameters?: RunAgentParameters & { abortController?: AbortController }, subscriber?: AgentSubscriber): Promise<RunAgentResult> {
    this.abortController = parameters?.abortController ?? new AbortController();
    return super.runAgent(parameters, subscriber);
  }

  /** Cancels the run of the last `runAgent()`, streaming or about to (`AbstractAgent`'s own does nothing); `runAgent()` resolves. */
  override abortRun(): void {
    this.abortController.abort();
    super.abortRun();
  }

  /** A copy with the same agent and options, and the conversation and state copied (`AbstractAgent.clone`). */
  override clone(): AgUiAgent {
    const copy = super.clone() as AgUiAgent; // made without the constructor: this class's fields are set here
    const abortController = new AbortController();
    if (this.abortController.signal.aborted) abortController.abort(this.abortController.signal.reason);
    Object.assign(copy, { runs: this.runs, runOptions: this.runOptions, errorText: this.errorText, abortController });
    return copy;
  }
}

/** Emits once `signal` is aborted (at once if it is already). */
function abortOf(signal: AbortSignal): Observable<void> {
  return new Observable<void>((subscriber) => {
    const abort = () => subscriber.next();
    if (signal.aborted) return abort();
    signal.addEventListener('abort', abort, { once: true });
    return () => signal.removeEventListener('abort', abort);
  });
}
