export * from './types';
export * from './contexts';
export type { RunScope } from './runScope';
export { hooksOf, runPhase, type PhaseHook } from './runPhase';
