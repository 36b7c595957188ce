import type { Message } from '../messages/message';
import type { StoredState } from '../state/stateBag';
import type { SessionTurn } from './sessionStore';

/**
 * @internal A session's content while its turns are applied in order: what a store that keeps
 * turns (in memory, or in Redis) folds them into on load.
 */
export class SessionContent {
  constructor(
    public messages: Message[],
    public state: Record<string, StoredState>,
  ) {}

  apply(turn: SessionTurn): void {
    if (turn.replace) {
      this.messages = turn.messages.slice();
      this.state = copyState(turn.state);
      return;
    }
    for (const m of turn.messages) this.messages.push(m);
    for (const key of Object.keys(turn.state)) define(this.state, key, turn.state[key]);
  }
}

/** A state record copied with its own keys defined (a key named `__proto__` is data, not the prototype). */
export function copyState(state: Readonly<Record<string, StoredState>>): Record<string, StoredState> {
  const out: Record<string, StoredState> = {};
  for (const key of Object.keys(state)) define(out, key, state[key]);
  return out;
}

function define(out: Record<string, StoredState>, key: string, value: StoredState): void {
  Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * @internal Folds `turns` over `start` and answers the content, with the state as it stood after
 * the last step (the start, or a turn) that left at most `at` messages: what a fork at `at` copies.
 * `before` is that state in the history before `start` (a fork's: its parent's `stateAt` for the
 * same `at`, folded up to the fork), taken when `start` already holds more than `at` messages.
 */
export function foldTurns(start: SessionContent, turns: Iterable<SessionTurn>, at = Infinity, before = '{}'): { content: SessionContent; stateAt: string } {
  let stateAt = start.messages.length <= at ? JSON.stringify(start.state) : before;
  for (const turn of turns) {
    start.apply(turn);
    if (at !== Infinity && start.messages.length <= at) stateAt = JSON.stringify(start.state);
  }
  if (at === Infinity) stateAt = JSON.stringify(start.state);
  return { content: start, stateAt };
}
