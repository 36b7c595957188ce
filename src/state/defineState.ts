import { z } from 'zod';
import { show } from '../internal/show';

/** Where a state lives: for one run, or for the session (saved with it). */
export type StateScope = 'run' | 'session';

/**
 * A typed piece of middleware state. State is keyed by the definition, never kept in a
 * middleware instance, so one middleware instance serves any number of concurrent runs.
 */
export interface StateDef<T> {
  readonly key: string;
  readonly schema: z.ZodType<T>;
  readonly initial: () => T;
  readonly scope: StateScope;
  readonly version: number;
  /** Turns a stored value of an older version into the current shape (a newer one is a StateError). */
  readonly migrate?: (stored: unknown, fromVersion: number) => unknown;
  /**
   * Shared with the UI: each change is a `state-changed { key, value }` event (AG-UI STATE_DELTA),
   * and a run may start from the UI's value (`run(input, { state })`) when a middleware lists it.
   */
  readonly shared?: boolean;
}

/** What {@link defineState} takes. */
export interface StateDefinition<S extends z.ZodType> {
  key: string;
  schema: S;
  initial: () => z.output<S>;
  scope?: StateScope;
  version?: number;
  migrate?: (stored: unknown, fromVersion: number) => unknown;
  /**
   * Shared with the UI (default false): every `updateState` that changes the value emits
   * `state-changed { key, value }`, which the UI protocols carry (AG-UI `STATE_DELTA`). Listed in
   * a middleware's `state`, it may also be given a starting value by a run's `state` option (the
   * state an AG-UI client sends). Share only what a user may see and set.
   */
  shared?: boolean;
}

/**
 * Defines typed middleware state. A session-scoped value is stored as it is held (the schema's
 * output) and parsed with the schema again when a later run reads it back, so the schema must
 * accept its own output: no transform that changes the type (`z.string().transform(Number)`).
 *
 * @example
 * const Counter = defineState({ key: 'my.counter', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }) });
 * ctx.state(Counter).n;                             // typed read
 * ctx.updateState(Counter, s => ({ n: s.n + 1 }));  // a new context
 */
export function defineState<S extends z.ZodType>(definition: StateDefinition<S>): StateDef<z.output<S>> {
  if (definition === null || typeof definition !== 'object') throw new TypeError(`defineState: expected a definition object, got ${show(definition)}`);
  const { key, schema, initial, scope = 'run', version = 1, migrate, shared } = definition;
  if (typeof key !== 'string' || key === '') throw new TypeError('defineState: a non-empty string key is required');
  if (!(schema instanceof z.ZodType)) throw new TypeError(`defineState('${key}'): 'schema' must be a zod schema`);
  if (typeof initial !== 'function') throw new TypeError(`defineState('${key}'): 'initial' must be a function`);
  if (scope !== 'run' && scope !== 'session') {
    throw new TypeError(`defineState('${key}'): scope must be 'run' or 'session', got ${JSON.stringify(scope)}`);
  }
  if (!Number.isInteger(version) || version < 1) {
    throw new TypeError(`defineState('${key}'): version must be a positive integer`);
  }
  if (migrate !== undefined && typeof migrate !== 'function') {
    throw new TypeError(`defineState('${key}'): 'migrate' must be a function`);
  }
  if (shared !== undefined && typeof shared !== 'boolean') throw new TypeError(`defineState('${key}'): 'shared' must be a boolean`);
  const def = { key, schema: schema as z.ZodType<z.output<S>>, initial, scope, version, migrate };
  return Object.freeze(shared ? { ...def, shared } : def);
}

/**
 * A stored state that does not fit its definition (or a key used by two definitions of
 * different scope). Names the key.
 */
export class StateError extends Error {
  override readonly name = 'StateError';
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(`State '${key}': ${message}`);
  }
}
