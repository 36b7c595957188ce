/**
 * S2's floor: the same loop written by hand with rxjs, doing the least that rx-agent's contract
 * asks of a loop, and nothing more. It is what the targets for S2's allocations and its cost after
 * a forced GC are measured against (bench/README.md, "beside floors written with rxjs").
 *
 * Per iteration, as an rx-agent run with the five operators: `expand` drives the iterations; the
 * model (the same fake model, which reads its whole request) is called with the run's own history
 * array (appended to, never copied); its stream goes through five wrappers, each the least a
 * `wrapModel` operator can be (an Observable and a Subscriber of its own per call, forwarding every
 * update); one Subscriber assembles the answer; the tool's arguments are parsed and checked by zod;
 * the same seven events are emitted (iteration-start, tool-input-start, tool-input-delta,
 * tool-call, tool-result, cost-recorded, iteration-end) and the same two messages appended. No
 * hooks, no contexts, no retry, no timeout, no redaction: a lower bound, not a peer.
 */
import { EMPTY, Observable, Subscriber, expand } from 'rxjs';
import type { z } from 'zod';
import type { Message, ModelClient, ModelRequest, ModelUpdate, ToolSpec } from '../../src/index';

/** One tool, as the loop needs it. */
export interface LoopTool {
  readonly spec: ToolSpec;
  readonly schema: z.ZodType;
  readonly execute: (args: unknown) => unknown;
}

/** What the loop emits: rx-agent's event shapes, typed loosely (the bench reads a few fields). */
export interface LoopEvent {
  readonly type: string;
  readonly [field: string]: unknown;
}

/** The number of wrappers around every model call (S2 runs five operators). */
const LOOP_WRAPPERS = 5;

let ids = 0;
const nextId = (prefix: string) => `${prefix}_${(ids++).toString(36)}`;

/** The least a `wrapModel` operator makes per call: an Observable and a Subscriber that forwards. */
class Forward extends Subscriber<ModelUpdate> {
  override next(update: ModelUpdate): void {
    if (!this.isStopped) this.destination.next(update);
  }
}

const wrap = (source: Observable<ModelUpdate>): Observable<ModelUpdate> =>
  new Observable<ModelUpdate>((subscriber) => source.subscribe(new Forward(subscriber)));

/** `stream` inside {@link LOOP_WRAPPERS} wrappers that forward every update (S1's rxjs floor uses it too). */
export function wrapped(stream: Observable<ModelUpdate>): Observable<ModelUpdate> {
  for (let w = 0; w < LOOP_WRAPPERS; w++) stream = wrap(stream);
  return stream;
}

/** One call's tool call, as its deltas build it. */
interface PendingCall {
  callId: string;
  name: string;
  args: string;
}

/**
 * A run of the loop: K tool iterations answered by `tool`, then the model's final text; the run's
 * events, ending with `run-end` (reason, text, usage).
 */
export function rxjsLoop(model: ModelClient, tool: LoopTool, question: string, maxIterations: number): Observable<LoopEvent> {
  return new Observable<LoopEvent>((events) => {
    const runId = nextId('run');
    const messages: Message[] = [{ id: nextId('msg'), role: 'user', content: [{ type: 'text', text: question }] }];
    const request: ModelRequest = { messages, tools: [tool.spec], settings: {} };
    let inputTokens = 0;
    let outputTokens = 0;
    let totalCost = 0;
    let finalText = '';
    events.next({ type: 'run-start', runId });

    /** One iteration: emits the next iteration's number, or -1 when the turn is over. */
    const iterate = (iteration: number) =>
      new Observable<number>((out) => {
        const answerId = nextId('msg');
        events.next({ type: 'iteration-start', runId, iteration, messageId: answerId });
        const stream = wrapped(model(request));
        const sink = new AnswerSink(events, runId, iteration, () => {
          const call = sink.call;
          const usage = { inputTokens: sink.inputTokens, outputTokens: sink.outputTokens };
          inputTokens += usage.inputTokens;
          outputTokens += usage.outputTokens;
          const cost = usage.inputTokens * 1e-6 + usage.outputTokens * 2e-6;
          totalCost += cost;
          if (call === undefined) {
            messages.push({ id: answerId, role: 'assistant', content: [{ type: 'text', text: sink.text }] });
            finalText = sink.text;
          } else {
            const parsed = tool.schema.safeParse(JSON.parse(call.args));
            const args = parsed.success ? parsed.data : undefined;
            messages.push({ id: answerId, role: 'assistant', content: [{ type: 'tool-call', callId: call.callId, name: call.name, args }] });
            events.next({ type: 'tool-call', runId, iteration, callId: call.callId, name: call.name, args });
            const result = parsed.success ? tool.execute(args) : parsed.error.message;
            const isError = !parsed.success;
            events.next({ type: 'tool-result', runId, iteration, callId: call.callId, name: call.name, result, isError });
            messages.push({ id: nextId('msg'), role: 'tool', content: [{ type: 'tool-result', callId: call.callId, name: call.name, result, isError }] });
          }
          events.next({ type: 'cost-recorded', inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, cost, totalCost, runId });
          events.next({ type: 'iteration-end', runId, iteration, usage });
          out.next(call === undefined || iteration + 1 >= maxIterations ? -1 : iteration + 1);
          out.complete();
        });
        stream.subscribe(sink);
        return sink;
      });

    return new Observable<number>((first) => {
      first.next(0);
      first.complete();
    })
      .pipe(expand((iteration) => (iteration < 0 ? EMPTY : iterate(iteration))))
      .subscribe({
        error: (error: unknown) => events.error(error),
        complete: () => {
          events.next({ type: 'run-end', runId, reason: 'completed', text: finalText, usage: { inputTokens, outputTokens } });
          events.complete();
        },
      });
  });
}

/** Assembles one answer: its text, its one tool call (announced as it streams), its usage. */
class AnswerSink extends Subscriber<ModelUpdate> {
  text = '';
  call: PendingCall | undefined = undefined;
  inputTokens = 0;
  outputTokens = 0;

  constructor(
    private readonly events: Subscriber<LoopEvent>,
    private readonly runId: string,
    private readonly iteration: number,
    private readonly done: () => void,
  ) {
    super();
  }

  override next(update: ModelUpdate): void {
    const { runId, iteration } = this;
    switch (update.type) {
      case 'text-delta':
        this.text += update.text;
        this.events.next({ type: 'text-delta', runId, iteration, text: update.text });
        break;
      case 'tool-call-delta': {
        const callId = update.callId ?? `call_${update.index}`;
        const name = update.name ?? '';
        if (this.call === undefined) {
          this.call = { callId, name, args: update.argsDelta };
          this.events.next({ type: 'tool-input-start', runId, iteration, callId, name });
        } else this.call.args += update.argsDelta;
        this.events.next({ type: 'tool-input-delta', runId, iteration, callId, name, argsDelta: update.argsDelta });
        break;
      }
      case 'usage':
        this.inputTokens += update.inputTokens;
        this.outputTokens += update.outputTokens;
        break;
    }
  }

  override error(error: unknown): void {
    this.unsubscribe();
    this.events.error(error);
  }

  override complete(): void {
    this.unsubscribe();
    this.done();
  }
}
