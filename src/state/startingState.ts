import type { StateDef } from './defineState';
import { StateBag } from './stateBag';
import { errorMessage } from '../internal/errorMessage';
import { isArray } from '../internal/isArray';
import { show } from '../internal/show';
import { zodIssues } from '../internal/zodIssues';

/**
 * @internal A run's starting values of shared state (its `state` option), as a bag of those
 * entries alone: each value parsed by the schema of the definition its key names (so its defaults
 * and transforms apply). `states` are the definitions the agent's middleware list, by key. Throws a
 * TypeError naming the key and why for a key none of them shares, a value its schema refuses, or a
 * `state` that is not an object.
 *
 * @example
 * startingState(agent.states, { 'shop.cart': { items: 2 } }); // a bag holding the parsed cart
 */
export function startingState(states: ReadonlyMap<string, StateDef<unknown>>, state: unknown): StateBag {
  if (state === null || typeof state !== 'object' || isArray(state)) {
    throw new TypeError(`run: 'state' must be an object of starting values by state key, got ${show(state)}`);
  }
  let bag = StateBag.empty;
  for (const key of Object.keys(state)) {
    const def = states.get(key);
    if (def === undefined) {
      throw new TypeError(
        `run: state '${key}' cannot be given: no middleware of this agent shares state with that key (only state defined with shared: true, in a middleware's 'state', can be)`,
      );
    }
    if (!def.shared) throw new TypeError(`run: state '${key}' cannot be given: it is not shared (defined without shared: true), so it is its middleware's own`);
    let parsed: ReturnType<StateDef<unknown>['schema']['safeParse']>;
    try {
      parsed = def.schema.safeParse((state as Record<string, unknown>)[key]);
    } catch (error) {
      throw new TypeError(`run: state '${key}' could not be parsed: ${errorMessage(error)}`); // a transform or refinement that throws
    }
    if (!parsed.success) throw new TypeError(`run: state '${key}' does not fit its schema: ${zodIssues(parsed.error)}`);
    bag = bag.set(def, parsed.data);
  }
  return bag;
}
