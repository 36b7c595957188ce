import { Observable, isObservable, type Subscription } from 'rxjs';
import type { FunctionContext } from '../middleware/contexts';
import { applyWrapper, continueWith, type StepOwner } from '../middleware/runPhase';
import { HookFailure, type ToolOutcome } from '../middleware/types';
import type { ToolExecutionContext } from '../tools/defineTool';
import type { CompiledAgent } from './compileAgent';
import type { RunScopeImpl } from './runScopeImpl';
import type { ParentCall, RunScope } from '../middleware/runScope';
import { isPromiseLike } from '../internal/isPromiseLike';
import { errorMessage } from '../internal/errorMessage';
import { show } from '../internal/show';
import { unsubscribeQuietly } from '../internal/unsubscribeQuietly';
import { LinkedSubscriber } from '../internal/linkedSubscriber';
import { ToolError } from '../tools/toolError';

/** @internal The call a tool's context is for (undefined for a context made by hand, as a test may): a sub-agent's run serves it. */
export function callOfContext(ctx: ToolExecutionContext): ParentCall | undefined {
  return ctx instanceof ToolCall ? ctx.parentCall() : undefined;
}

/**
 * What a tool's `execute` receives. The AbortController is made only when the tool reads
 * `signal`, and is aborted only when the call is torn down before it settled.
 */
class ToolCall implements ToolExecutionContext {
  private controller: AbortController | undefined;
  settled = false;
  private cancelled = false;

  constructor(
    private readonly scope: RunScope,
    readonly callId: string,
    readonly iteration: number,
    private readonly toolName: string,
  ) {}

  get runId(): string {
    return this.scope.runId;
  }

  /** @internal */
  parentCall(): ParentCall {
    return { scope: this.scope, callId: this.callId };
  }

  /** Made on first read (most tools never report progress), bound so that `({ progress }) =>` works. */
  get progress(): (value: unknown) => void {
    return (this.report ??= (value: unknown) => {
      if (!this.settled) this.scope.emit({ type: 'tool-progress', iteration: this.iteration, callId: this.callId, value });
    });
  }

  private report: ((value: unknown) => void) | undefined = undefined;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      // First read after the call was cancelled (a tool that awaited something first): aborted already.
      if (this.cancelled) this.controller.abort(this.cancelReason());
    }
    return this.controller.signal;
  }

  /** Teardown: a call that has not settled is cancelled. */
  cancel(): void {
    if (this.settled) return;
    this.settled = true;
    this.cancelled = true;
    this.controller?.abort(this.cancelReason());
  }

  private cancelReason(): Error {
    return new Error(`Tool '${this.toolName}' was cancelled`);
  }
}

/**
 * Runs one function and continues with its outcome, or with the error it failed with. A tool that
 * throws, rejects or errors first meets the `wrapFunction` operators as an Observable error (so
 * `retry` re-runs it) and reaches `failed` only outside the outermost wrapper (the batch has the
 * `onError` hooks see it, then makes it an error result). A middleware's failure fails the run.
 * Without wrappers, a plain value continues at once and a Promise with no Observable around it.
 */
export function executeFunction(
  owner: StepOwner,
  scope: RunScopeImpl,
  agent: CompiledAgent,
  fn: FunctionContext,
  done: (outcome: ToolOutcome) => void,
  failed: (error: unknown) => void,
): void {
  if (agent.functionWrappers.length > 0) return executeWrapped(owner, agent, fn, done, failed);

  const call = new ToolCall(scope, fn.callId, fn.iteration, fn.toolName);
  let value: unknown;
  try {
    value = fn.tool.execute(fn.args, call);
  } catch (error) {
    call.settled = true;
    return failed(error);
  }
  if (isObservable(value)) {
    // cancel() does nothing once the Observable settled (lastOf marks the call settled).
    follow(owner, lastOf(value, call), done, failed).add(() => call.cancel());
  } else if (isPromiseLike(value)) {
    const teardown = () => call.cancel();
    owner.subscription.add(teardown);
    value.then(
      (result) => {
        if (call.settled) return;
        call.settled = true;
        owner.subscription.remove(teardown);
        continueWith(owner, done, { result, isError: false });
      },
      (error: unknown) => {
        if (call.settled) return;
        call.settled = true;
        owner.subscription.remove(teardown);
        continueWith(owner, failed, error);
      },
    );
  } else {
    call.settled = true;
    done({ result: value, isError: false });
  }
}

/** The function as an Observable of one outcome, for the `wrapFunction` operators. */
function functionStream(fn: FunctionContext): Observable<ToolOutcome> {
  return new Observable<ToolOutcome>((subscriber) => {
    const call = new ToolCall(fn.scope, fn.callId, fn.iteration, fn.toolName);
    let value: unknown;
    try {
      value = fn.tool.execute(fn.args, call);
    } catch (error) {
      call.settled = true;
      subscriber.error(error);
      return;
    }
    if (isObservable(value)) {
      const subscription = lastOf(value, call).subscribe(subscriber);
      return () => {
        subscription.unsubscribe();
        call.cancel();
      };
    }
    if (isPromiseLike(value)) {
      value.then(
        (result) => {
          call.settled = true;
          subscriber.next({ result, isError: false });
          subscriber.complete();
        },
        (error: unknown) => {
          call.settled = true;
          subscriber.error(error);
        },
      );
      return () => call.cancel();
    }
    call.settled = true;
    subscriber.next({ result: value, isError: false });
    subscriber.complete();
  });
}

function executeWrapped(
  owner: StepOwner,
  agent: CompiledAgent,
  fn: FunctionContext,
  done: (outcome: ToolOutcome) => void,
  fail: (error: unknown) => void,
): void {
  let wrapped = functionStream(fn);
  const wrappers = agent.functionWrappers;
  for (let i = wrappers.length - 1; i >= 0; i--) {
    const { wrap, middleware } = wrappers[i];
    try {
      wrapped = applyWrapper(wrap(fn), wrapped, middleware, 'wrapFunction');
    } catch (error) {
      return owner.fail(HookFailure.of(error, middleware, 'wrapFunction'));
    }
    // Each wrapper's last value is checked where it leaves it, so the one that broke the contract is named.
    wrapped = checkedOutcomes(wrapped, owner, middleware);
  }
  follow(owner, wrapped, done, fail);
}

/** `outcomes`, which must emit exactly one tool outcome; else the run fails naming `middleware`. */
function checkedOutcomes(outcomes: Observable<ToolOutcome>, owner: StepOwner, middleware: string): Observable<ToolOutcome> {
  return new Observable<ToolOutcome>((subscriber) => {
    let last: unknown;
    let count = 0;
    const breach = (what: string) => {
      subscriber.unsubscribe();
      owner.fail(
        HookFailure.breach(
          middleware,
          'wrapFunction',
          `Middleware '${middleware}' wrapFunction ${what} ({ result, isError }: pass the call's own stream on, or map to one)`,
        ),
      );
    };
    return outcomes.subscribe({
      next(value) {
        // A second value is a breach at once: the call must not go on with either.
        if (++count > 1) return breach(`emitted ${count} values, not one tool outcome`);
        last = value;
        subscriber.next(value);
      },
      error: (error: unknown) => subscriber.error(error),
      complete() {
        if (isOutcome(last)) return subscriber.complete();
        breach(last === undefined ? 'completed without a tool outcome' : `emitted ${show(last)}, not a tool outcome`);
      },
    });
  });
}

/**
 * Subscribes a call's stream of outcomes and continues with the last one when it completes. The
 * owner holds the subscription only while it runs: it may well settle during subscribe.
 */
function follow(owner: StepOwner, outcomes: Observable<ToolOutcome>, done: (outcome: ToolOutcome) => void, fail: (error: unknown) => void): Subscription {
  const sink = new OutcomeSink(owner, done, fail);
  outcomes.subscribe(sink);
  if (!sink.closed) owner.subscription.add(sink);
  return sink;
}

/**
 * Keeps a call's last outcome. It tears the stream down itself before going on (as the model
 * stream's sink does), so a teardown that throws when the tool completes fails the call, which the
 * model reads as an error result, instead of escaping as an uncaught error after the run went on.
 */
class OutcomeSink extends LinkedSubscriber<ToolOutcome> {
  private outcome: ToolOutcome | undefined = undefined;

  constructor(
    private readonly owner: StepOwner,
    private readonly done: (outcome: ToolOutcome) => void,
    private readonly fail: (error: unknown) => void,
  ) {
    super();
  }

  override next(value: ToolOutcome): void {
    if (!this.isStopped) this.outcome = value;
  }

  override error(error: unknown): void {
    if (this.isStopped) return;
    this.stop();
    this.fail(error); // the stream's own error is the one to report
  }

  override complete(): void {
    if (this.isStopped) return;
    const teardownError = this.stop();
    if (teardownError !== undefined) return this.fail(teardownError);
    continueWith(this.owner, this.done, this.outcome as ToolOutcome);
  }

  /** Leaves the owner and tears the stream down; returns what a teardown threw. */
  private stop(): unknown {
    this.isStopped = true;
    this.owner.subscription.remove(this);
    return unsubscribeQuietly(this);
  }
}

/** The last value of a tool's Observable (undefined when it completes empty), as an outcome. */
function lastOf(source: Observable<unknown>, call: ToolCall): Observable<ToolOutcome> {
  return new Observable<ToolOutcome>((subscriber) => {
    let result: unknown;
    return source.subscribe({
      next: (value) => (result = value),
      error: (error) => {
        call.settled = true;
        subscriber.error(error);
      },
      complete: () => {
        call.settled = true;
        subscriber.next({ result, isError: false });
        subscriber.complete();
      },
    });
  });
}

export function toolErrorText(error: unknown): string {
  if (error instanceof ToolError) return error.message;
  return `Error: ${errorMessage(error)}`; // a cycle or a BigInt still becomes the result
}

function isOutcome(value: unknown): value is ToolOutcome {
  return typeof value === 'object' && value !== null && typeof (value as ToolOutcome).isError === 'boolean';
}
