/**
 * The floors of S1 and S2 written by hand with rxjs (bench/lib/rxjsLoop.ts): the same stream
 * through a minimal pipeline of five forwarding wrappers, and the same loop with only what the
 * contract asks. bench/run.ts measures them in a process of their own (`--floors-child`), so
 * that neither they nor the agent find the other's types at rxjs's call sites.
 */
import { runS1RxjsPipeline, type S1Result } from './s1';
import { runS2RxjsLoop, type S2Result } from './s2';

export interface FloorsResult {
  readonly s1: { readonly warm: S1Result; readonly gc: S1Result };
  readonly s2: S2Result;
}

export async function runFloors(): Promise<FloorsResult> {
  const s1 = { warm: await runS1RxjsPipeline('warm'), gc: await runS1RxjsPipeline('gc') };
  return { s1, s2: await runS2RxjsLoop() };
}
