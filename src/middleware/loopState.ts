import type { Message } from '../messages/message';
import { MessageLog } from '../messages/messageLog';
import type { ModelSettings, ToolChoice, Usage } from '../model/types';
import { PlainUsage } from '../model/usage';
import type { Tool } from '../tools/defineTool';
import type { RunEndReason } from '../events/types';
import type { StateBag } from '../state/stateBag';

/**
 * Everything a run knows, as one immutable value that flows through the loop. Each iteration
 * returns a new LoopState; nothing in it is shared with another run.
 */
export interface LoopState {
  /** The iteration that runs next (0-based); after the loop, the number of iterations run. */
  readonly iteration: number;
  /** History and this turn's messages. */
  readonly log: MessageLog;
  /** Index in `log` where this turn's messages begin. */
  readonly turnStart: number;
  /** The turn's instructions, tools and settings (an iteration may change them for its own call). */
  readonly instructions: string | undefined;
  readonly tools: readonly Tool[];
  readonly toolChoice: ToolChoice | undefined;
  readonly settings: ModelSettings;
  readonly state: StateBag;
  readonly usage: Usage;
  /** Tool calls executed so far in this run. */
  readonly functionCalls: number;
  readonly done: boolean;
  readonly endReason: RunEndReason | undefined;
  readonly terminationReason: string | undefined;
}

/**
 * A LoopState with `patch` applied. Always one object literal with the fields in one order, so
 * every LoopState shares one hidden class and copying it stays a fast path.
 */
export function loopWith(s: LoopState, p: Partial<LoopState>): LoopState {
  return {
    iteration: p.iteration ?? s.iteration,
    log: p.log ?? s.log,
    turnStart: p.turnStart ?? s.turnStart,
    instructions: 'instructions' in p ? p.instructions : s.instructions,
    tools: p.tools ?? s.tools,
    toolChoice: 'toolChoice' in p ? p.toolChoice : s.toolChoice,
    settings: p.settings ?? s.settings,
    state: p.state ?? s.state,
    usage: p.usage ?? s.usage,
    functionCalls: p.functionCalls ?? s.functionCalls,
    done: p.done ?? s.done,
    endReason: 'endReason' in p ? p.endReason : s.endReason,
    terminationReason: 'terminationReason' in p ? p.terminationReason : s.terminationReason,
  };
}

/** Replaces the message list; the turn's own messages are assumed to stay at its end. */
export function replaceMessages(state: LoopState, messages: readonly Message[]): LoopState {
  const turnLength = state.log.length - state.turnStart;
  return loopWith(state, { log: MessageLog.of(messages), turnStart: Math.max(0, messages.length - turnLength) });
}

/** Adds two usages. */
export function addUsage(a: Usage, b: Usage | undefined): Usage {
  return b ? new PlainUsage(a.inputTokens + b.inputTokens, a.outputTokens + b.outputTokens) : a;
}

export const zeroUsage: Usage = Object.freeze({ inputTokens: 0, outputTokens: 0 });
