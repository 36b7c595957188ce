import { messageId, type ContentPart, type Message, type ToolCallPart } from '../messages/message';
import type { FinishReason, ModelUpdate, Usage } from './types';
import { PlainUsage } from './usage';
import { keepShape } from '../internal/keepShape';
import { TextBuilder } from '../internal/textBuilder';
import { UnparsedArguments } from '../messages/unparsedArguments';

/** @internal A tool call being assembled. */
export interface PendingCall {
  callId: string;
  name: string;
  /** The arguments' JSON text so far (pieces joined as they come: V8 joins strings without copying). */
  argsText: string;
  /** The runtime has told the run's events that this call's input streams. */
  announced: boolean;
}

let assemblerKept = false;

/** The calls of an assembler that has none (most turns): the first call gets an array of its own. */
const NO_CALLS: PendingCall[] = Object.freeze([]) as unknown as PendingCall[];

/**
 * Builds the assistant message from a model's updates. Text pieces are gathered by a
 * text builder of fixed-size chunks (no quadratic string building); tool-call deltas are gathered by
 * `index`, so calls whose pieces interleave are assembled correctly. A call's name is taken as
 * sent (not concatenated: some servers repeat it on every delta, as the openai SDK's own
 * accumulator assumes).
 *
 * @example
 * const assembler = new ResponseAssembler();
 * assembler.add({ type: 'text-delta', text: 'Hi' });
 * assembler.message(); // { role: 'assistant', content: [{ type: 'text', text: 'Hi' }] }
 */
export class ResponseAssembler {
  /**
   * The id {@link message} gives the answer (default: a new one). The loop picks it when the
   * iteration starts (`iteration-start.messageId`), so that a stream can name the answer before it is complete.
   */
  messageId: string;
  // Made with their first piece: a tool turn usually has neither.
  private text: TextBuilder | undefined = undefined;
  private reasoning: TextBuilder | undefined = undefined;
  private calls: PendingCall[] = NO_CALLS;
  usage: Usage | undefined;
  finishReason: FinishReason | undefined;
  /** @internal How many times {@link reset} dropped what was added (a follower of the text starts again). */
  resets = 0;

  constructor(id: string = messageId()) {
    this.messageId = id;
    if (!assemblerKept) {
      assemblerKept = true; // before: the kept one's own constructor comes here too
      keepShape(new ResponseAssembler(id));
    }
  }

  /** Adds a text delta (what {@link add} does with a `text-delta`, for the per-delta hot path). */
  addText(text: string): void {
    (this.text ??= new TextBuilder()).append(text);
  }

  /** Adds one update. */
  add(update: ModelUpdate): void {
    if (update.type === 'text-delta') {
      this.addText(update.text);
      return;
    }
    switch (update.type) {
      case 'reasoning-delta':
        (this.reasoning ??= new TextBuilder()).append(update.text);
        break;
      case 'tool-call-delta': {
        let call = this.calls[update.index];
        if (!call) {
          call = { callId: '', name: '', argsText: '', announced: false };
          // The usual first call (index 0) in an array of one: an empty array stored into reserves 17 slots.
          if (this.calls !== NO_CALLS) this.calls[update.index] = call;
          else if (update.index === 0) this.calls = [call];
          else {
            this.calls = [];
            this.calls[update.index] = call;
          }
        }
        if (update.callId) call.callId = update.callId;
        if (update.name) call.name = update.name;
        if (update.argsDelta) call.argsText += update.argsDelta;
        break;
      }
      case 'usage':
        this.usage = new PlainUsage((this.usage?.inputTokens ?? 0) + update.inputTokens, (this.usage?.outputTokens ?? 0) + update.outputTokens);
        break;
      case 'finish':
        this.finishReason = update.reason;
        break;
    }
  }

  /** @internal The call being assembled at `index`, if any. */
  pendingCall(index: number): PendingCall | undefined {
    return this.calls[index];
  }

  /** Forgets everything added so far (a retried or replaced stream starts again); the answer keeps its id. */
  reset(): void {
    this.resets++;
    this.text = undefined;
    this.reasoning = undefined;
    this.calls = NO_CALLS;
    this.usage = undefined;
    this.finishReason = undefined;
  }

  /**
   * The tool calls gathered so far, arguments still as raw JSON text.
   * A call without an id gets `call_<index>`.
   */
  rawToolCalls(): Array<{ callId: string; name: string; argsText: string }> {
    const out: Array<{ callId: string; name: string; argsText: string }> = [];
    this.calls.forEach((call, index) => {
      if (call) out.push({ callId: callIdOf(call, index), name: call.name, argsText: call.argsText });
    });
    return out;
  }

  /**
   * The assistant message. Tool-call arguments are parsed as JSON; text that is not JSON
   * is kept as the raw string, and the runtime turns it into an error result the model reads.
   */
  message(): Message {
    const calls = this.calls;
    let count = 0;
    let first = -1;
    for (let i = 0; i < calls.length; i++) {
      if (calls[i] === undefined) continue;
      if (first < 0) first = i;
      count++;
    }
    const { reasoning, text } = this;
    // One part (the common answer: a text, or one call): the message and its content array are
    // literals made together, so V8 places them side by side (it moves a literal site's objects to
    // the old generation together once they all outlive the young one). A model reading a long
    // history then reads each message from one place: S2 at K = 20,000 (bench) went from 259-271
    // to 135-154 µs per iteration with this and the tool message's literal array.
    if (!reasoning && (text ? count === 0 : count === 1)) {
      const only: ContentPart = text ? { type: 'text', text: text.toString() } : toToolCallPart(calls[first], first);
      return { id: this.messageId, role: 'assistant', content: [only] };
    }
    // Sized up front: the message outlives the call (a pushed-to empty array reserves 17 slots).
    const content = new Array<ContentPart>((reasoning ? 1 : 0) + (text ? 1 : 0) + count);
    let at = 0;
    if (reasoning) content[at++] = { type: 'reasoning', text: reasoning.toString() };
    if (text) content[at++] = { type: 'text', text: text.toString() };
    for (let i = 0; i < calls.length; i++) if (calls[i] !== undefined) content[at++] = toToolCallPart(calls[i], i);
    return { id: this.messageId, role: 'assistant', content };
  }
}

/** @internal A call's id: as the model sent it, else `call_<index>` (the id its `tool-call` event and part carry). */
export function callIdOf(call: PendingCall, index: number): string {
  return call.callId || `call_${index}`;
}

function toToolCallPart(call: PendingCall, index: number): ToolCallPart {
  const callId = callIdOf(call, index);
  const text = call.argsText.trim();
  if (text === '') return { type: 'tool-call', callId, name: call.name, args: {} };
  try {
    return { type: 'tool-call', callId, name: call.name, args: JSON.parse(text) };
  } catch (error) {
    return {
      type: 'tool-call',
      callId,
      name: call.name,
      args: new UnparsedArguments(call.argsText, (error as Error).message),
    };
  }
}
