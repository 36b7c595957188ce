/**
 * The core entry, `rx-agent`: the agent, messages, models, tools, events, state, sessions and the
 * stream bindings. It imports only rxjs and zod (fp-ts inside). Every public name is listed here;
 * what is not listed is internal.
 *
 * @module rx-agent
 */

// Messages
export {
  ContentPartSchema,
  MessageSchema,
  messageId,
  textMessage,
  textOf,
  toMessages,
  type ContentPart,
  type Message,
  type ReasoningPart,
  type Role,
  type RunInput,
  type TextPart,
  type ToolCallPart,
  type ToolResultPart,
} from './messages/message';
export { UnparsedArguments } from './messages/unparsedArguments';

// Models
export type { FinishReason, ModelClient, ModelRequest, ModelSettings, ModelUpdate, OutputFormat, ToolChoice, ToolSpec, Usage } from './model/types';
export { ModelError, ModelTimeoutError, isRetryableStatus, type ModelErrorOptions } from './model/errors';
export { ResponseAssembler } from './model/assembleResponse';

// Tools
export { defineTool, type NeedsApproval, type Tool, type ToolDefinition, type ToolExecutionContext } from './tools/defineTool';
export { defineClientTool, type ClientToolDefinition } from './tools/defineClientTool';
export { ToolError } from './tools/toolError';

// Events and answers
export {
  toErrorInfo,
  type AgentEvent,
  type AgentEventMap,
  type AgentEventType,
  type AgentResponse,
  type AgentResponseMap,
  type AgentResponseType,
  type ClientCall,
  type ContinuationResponse,
  type EmittedEvent,
  type ErrorInfo,
  type EventOf,
  type PermissionResponse,
  type ResponseOf,
  type PendingRequest,
  type RunEndReason,
  type TodoItem,
} from './events/types';

// Typed middleware state
export { defineState, StateError, type StateDef, type StateDefinition, type StateScope } from './state/defineState';
export type { StoredState } from './state/stateBag';

// Middleware
export { MiddlewareError, type AgentMiddleware, type PhaseName, type ToolOutcome } from './middleware/types';
export {
  AgentContext,
  ErrorContext,
  FunctionContext,
  FunctionResultContext,
  IterationContext,
  ToolBatchContext,
  TurnContext,
  type ErrorSource,
  type ModelCallContext,
  type RequestEvent,
  type Termination,
} from './middleware/contexts';
export type { RequestOptions } from './middleware/awaitResponse';
export { mapContext } from './middleware/mapContext';

// The agent
export { createAgent, type Agent, type OutputOf, type RunHandle } from './agent/createAgent';
export { OutputValidationError } from './agent/outputValidationError';
export type { AgentOptions } from './agent/compileAgent';
export type { RunOptions, RunResult } from './agent/runAgent';
export type { ResumeOptions, RunInfo } from './agent/durable';
export type { AgentToolInput, AsToolOptions } from './agent/asTool';

// Sessions
export { createSession, Session, type ForkOptions, type SessionOptions } from './session/session';
export { InMemorySessionStore, type InMemorySessionStoreOptions } from './session/inMemorySessionStore';
export { SessionSnapshotSchema, type SessionSnapshot } from './session/snapshot';
export type { LegacySessionStore, SessionAppend, SessionLeaseClaim, SessionStore, SessionTurn, StoredSession } from './session/sessionStore';
export { SessionBusyError, SessionConflictError, SessionDataError } from './session/errors';

// Durable runs: the journal and its stores
export { JournalConflictError, JournalFormatError, RunBusyError, RunFinishedError, RunNotFoundError, StoreRequiredError } from './journal/errors';
export {
  JOURNAL_FORMAT_VERSION,
  checkRecord,
  recordEvents,
  type JournalEntry,
  type JournalRecord,
  type JournalRecordKind,
  type UnparsedCalls,
} from './journal/records';
export type { AgentStore, Awaitable, LeaseClaim, LegacyAgentStore, RunLease, RunReceived } from './journal/store';
export { memoryStore, type MemoryStore, type MemoryStoreOptions } from './journal/memoryStore';

// Bindings: async iteration, Web streams, event filters
export { ofType } from './bindings/ofType';
export { toAsyncIterable } from './bindings/toAsyncIterable';
export { toReadableStream } from './bindings/toReadableStream';
export { fromReadableStream } from './bindings/fromReadableStream';
export { fromAsyncIterable, type AsyncIterableSource, type SubscriptionOptions } from './bindings/fromAsyncIterable';
