/**
 * `rx-agent/operators`: the built-in middleware, one factory per policy. Each returns an
 * `AgentMiddleware` for `createAgent({ middleware })`.
 *
 * @module rx-agent/operators
 */

// Guards, questions to a person, guidance, logging, caching, skills, cost and lifecycle
export { CIRCUIT_BREAKER_MESSAGE, circuitBreaker, type CircuitBreakerOptions } from './circuitBreaker';
export { ERROR_TRACKING_MESSAGE, errorTracking, type ErrorTrackingOptions, type TrackedToolResult } from './errorTracking';
export { CONTINUATION_DENIED_MESSAGE, continuationPermission, type ContinuationPermissionOptions } from './continuationPermission';
export { permissionDeniedMessage, permissions, type PermissionPolicy, type PermissionsOptions } from './permissions';
export {
  DEFAULT_FIRST_ITERATION_GUIDANCE,
  defaultAfterToolsGuidance,
  defaultIterationWarning,
  iterationGuidance,
  type IterationGuidanceOptions,
} from './iterationGuidance';
export { INSTRUCTIONS_PREVIEW_LENGTH, iterationLogging, type IterationLogger, type IterationLoggingOptions, type IterationLogLevel } from './iterationLogging';
export { responseCache, responseCacheKey, type ResponseCacheOptions, type ResponseCacheStore } from './responseCache';
export { ACTIVATE_SKILL_TOOL, skills, type Skill, type SkillsOptions } from './skills';
export { budgetExhaustedMessage, costBudget, type CostBudgetOptions } from './costBudget';
export { lifecycleEvents, type LifecycleEventsOptions } from './lifecycleEvents';
// Resilience
export { isRetryableModelError, modelRetry, type ModelRetryOptions } from './modelRetry';
export { toolRetry, type ToolRetryOptions } from './toolRetry';
export { modelTimeout, type ModelTimeoutOptions } from './modelTimeout';
export { toolTimeout, ToolTimeoutError, type ToolTimeoutOptions } from './toolTimeout';
export { modelFallback } from './modelFallback';
// Limits
export { modelCallLimit, ModelCallLimitExceededError, type ModelCallLimitOptions } from './modelCallLimit';
export { toolCallLimit, ToolCallLimitExceededError, type ToolCallLimitOptions } from './toolCallLimit';
// Content
export { PiiDetectedError, piiRedaction, type CustomPiiDetector, type PiiRedactionOptions, type PiiStrategy, type PiiType } from './piiRedaction';
export { contextEditing, type ContextEditingOptions } from './contextEditing';
export { DEFAULT_SUMMARY_PROMPT, summarization, type SummarizationOptions } from './summarization';
export { toolSelector, type ToolSelectorOptions } from './toolSelector';
export { PARALLEL_WRITE_TODOS_ERROR, todoList, WRITE_TODOS_DESCRIPTION, WRITE_TODOS_SYSTEM_PROMPT, type TodoListOptions } from './todoList';
