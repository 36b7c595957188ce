import { Observable, asyncScheduler, type SchedulerAction, type SchedulerLike } from 'rxjs';
import { ModelError } from '../model/errors';
import type { FinishReason, ModelClient, ModelRequest, ModelUpdate, Usage } from '../model/types';
import { show } from '../internal/show';
import { isArray } from '../internal/isArray';
import { checkOptions, optionNames } from '../internal/optionNames';

/** One scripted model answer. A string is a text answer. */
export type ScriptedTurn =
  | string
  | {
      /** Text, as one delta or as the given deltas. */
      text?: string | readonly string[];
      reasoning?: string | readonly string[];
      toolCalls?: ReadonlyArray<{ name: string; args: unknown; callId?: string }>;
      usage?: Usage;
      finish?: FinishReason;
      /** Fail the stream (after the updates before it, or after `errorAfter` of them). */
      error?: unknown;
      errorAfter?: number;
      /** Virtual ms before each update, on the scheduler (default: all at once, synchronously). */
      delay?: number;
    }
  | ((request: ModelRequest, call: number) => ScriptedTurn);

/** A scripted model: the turns it answers and the requests it received. */
export interface ScriptedModel extends ModelClient {
  /** Every request, in order, each with a copy of the messages it was sent. */
  readonly requests: ModelRequest[];
  /** How many calls were made (subscriptions). */
  readonly calls: number;
}

/** Options of {@link scriptedModel}. */
export interface ScriptedModelOptions {
  /** Runs the delays (default asyncScheduler; pass the TestScheduler in marble tests). */
  scheduler?: SchedulerLike;
  /** Start again from the first turn when the script runs out (default: fail the call). */
  loop?: boolean;
}

/** The keys of {@link ScriptedModelOptions}: any other is refused. */
const OPTIONS = optionNames<ScriptedModelOptions>({ scheduler: true, loop: true });

/**
 * A model that answers from a script, one turn per call: text deltas, reasoning, tool calls
 * (arguments streamed in two pieces, as real models do), usage, errors and delays in
 * scheduler time. No Promise is involved, so it runs in virtual time under `TestScheduler`.
 *
 * @example
 * const model = scriptedModel([
 *   { toolCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] },
 *   { text: ['It is ', '21°C.'], usage: { inputTokens: 50, outputTokens: 6 } },
 * ]);
 */
export function scriptedModel(turns: readonly ScriptedTurn[], options: ScriptedModelOptions = {}): ScriptedModel {
  if (!isArray(turns)) {
    // A lone string would be read as one turn per character.
    throw new TypeError(`scriptedModel: 'turns' must be an array of turns (e.g. ['Hello']), got ${show(turns)}`);
  }
  checkOptions('scriptedModel', options, OPTIONS);
  const scheduler = options.scheduler ?? asyncScheduler;
  const requests: ModelRequest[] = [];
  let calls = 0;
  const client = ((request: ModelRequest) =>
    new Observable<ModelUpdate>((subscriber) => {
      const call = calls++;
      // A run hands the model its own history array, which grows after the call: keep a copy.
      requests.push({ ...request, messages: Object.freeze(request.messages.slice()) });
      if (call >= turns.length && !(options.loop && turns.length > 0)) {
        subscriber.error(new ModelError(`scriptedModel: no turn left (${turns.length} scripted, call ${call + 1})`, { retryable: false }));
        return;
      }
      let turn = turns[call % turns.length];
      while (typeof turn === 'function') turn = turn(request, call);
      let script: ReturnType<typeof toUpdates>;
      try {
        script = toUpdates(turn, call);
      } catch (bad) {
        subscriber.error(bad);
        return;
      }
      const { updates, error, errorAfter, delay } = script;
      const stopAt = errorAfter ?? updates.length;
      if (!delay) {
        for (let i = 0; i < stopAt && !subscriber.closed; i++) subscriber.next(updates[i]);
        if (error !== undefined) subscriber.error(error);
        else subscriber.complete();
        return;
      }
      return scheduler.schedule<number>(
        function (this: SchedulerAction<number>, state?: number) {
          const i = state ?? 0;
          if (i < stopAt) {
            subscriber.next(updates[i]);
            if (i + 1 < stopAt || error === undefined) return this.schedule(i + 1, i + 1 < stopAt ? delay : 0);
          }
          if (error !== undefined) subscriber.error(error);
          else subscriber.complete();
        },
        delay,
        0,
      );
    })) as ScriptedModel;
  Object.defineProperty(client, 'requests', { value: requests });
  Object.defineProperty(client, 'calls', { get: () => calls });
  return client;
}

/** The keys a turn object may have: any other is a typo that would script an empty answer. */
const TURN_KEYS = new Set(['text', 'reasoning', 'toolCalls', 'usage', 'finish', 'error', 'errorAfter', 'delay']);

function toUpdates(turn: Exclude<ScriptedTurn, (...args: never[]) => unknown>, call: number) {
  if (turn === null || (typeof turn !== 'string' && typeof turn !== 'object')) {
    throw new TypeError(`scriptedModel: turn ${call + 1} must be a string, an object or a function, got ${show(turn)}`);
  }
  const spec = typeof turn === 'string' ? { text: turn } : turn;
  const unknown = Object.keys(spec).filter((key) => !TURN_KEYS.has(key));
  if (unknown.length > 0) {
    throw new TypeError(`scriptedModel: turn ${call + 1} has unknown keys ${unknown.map((k) => `'${k}'`).join(', ')} (${[...TURN_KEYS].join(', ')})`);
  }
  const updates: ModelUpdate[] = [];
  for (const text of pieces(spec.reasoning)) updates.push({ type: 'reasoning-delta', text });
  for (const text of pieces(spec.text)) updates.push({ type: 'text-delta', text });
  (spec.toolCalls ?? []).forEach((tc, index) => {
    const json = typeof tc.args === 'string' ? tc.args : (JSON.stringify(tc.args) ?? '{}');
    const half = Math.ceil(json.length / 2);
    const callId = tc.callId ?? `call_${call}_${index}`;
    updates.push({ type: 'tool-call-delta', index, callId, name: tc.name, argsDelta: json.slice(0, half) });
    updates.push({ type: 'tool-call-delta', index, argsDelta: json.slice(half) });
  });
  if (spec.usage) updates.push({ type: 'usage', ...spec.usage });
  if (spec.error === undefined) {
    updates.push({ type: 'finish', reason: spec.finish ?? (spec.toolCalls?.length ? 'tool-calls' : 'stop') });
  }
  const { errorAfter, delay } = spec;
  if (errorAfter !== undefined && (spec.error === undefined || !Number.isInteger(errorAfter) || errorAfter < 0 || errorAfter > updates.length)) {
    throw new TypeError(
      `scriptedModel: turn ${call + 1}: 'errorAfter' needs 'error' and must be an integer from 0 to ${updates.length} (its updates), got ${show(errorAfter)}`,
    );
  }
  if (delay !== undefined && !(delay >= 0)) throw new TypeError(`scriptedModel: turn ${call + 1}: 'delay' must be a number >= 0, got ${show(delay)}`);
  return { updates, error: spec.error, errorAfter, delay };
}

function pieces(value: string | readonly string[] | undefined): readonly string[] {
  if (value === undefined) return [];
  return typeof value === 'string' ? [value] : value;
}
