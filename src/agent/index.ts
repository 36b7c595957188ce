export { createAgent, type Agent, type RunHandle } from './createAgent';
export type { AgentOptions } from './compileAgent';
export type { RunOptions, RunResult } from './runAgent';
export { ToolError } from './executeFunction';
export { SKIPPED_RESULT } from './runTools';
