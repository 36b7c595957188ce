import type { ParentCall } from '../middleware/runScope';

/**
 * @internal The call whose `agent.asTool()` subscribed `subscriber` to a run, if any: its
 * subscriber carries it, so the run learns it without a run option.
 */
export function parentCallOf(subscriber: object): ParentCall | undefined {
  // Read by name, not instanceof: the other build's (ESM beside CJS) subscriber is one too.
  return (subscriber as { readonly parentCall?: ParentCall }).parentCall;
}
