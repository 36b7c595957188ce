export * from './types';
export * from './contexts';
export type { RunScope } from './runScope';
export { hooksOf, type PhaseHook } from './runPhase';
export { mapContext } from './mapContext';
export { LinkedSubscriber } from './linkedSubscriber';
