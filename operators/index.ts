/**
 * `rx-agent/operators`: the built-in middleware, one factory per policy. Each returns an
 * `AgentMiddleware` for `createAgent({ middleware })`.
 *
 * @module rx-agent/operators
 */

// Guards, questions to a person, guidance, logging, caching, skills, cost and lifecycle
export * from './circuitBreaker';
export * from './errorTracking';
export * from './continuationPermission';
export * from './permissions';
export * from './iterationGuidance';
export * from './iterationLogging';
export * from './responseCache';
export * from './skills';
export * from './costBudget';
export * from './lifecycleEvents';
// Resilience
export * from './modelRetry';
export * from './toolRetry';
export * from './modelTimeout';
export * from './toolTimeout';
export * from './modelFallback';
// Limits
export * from './modelCallLimit';
export * from './toolCallLimit';
// Content
export * from './piiRedaction';
export * from './contextEditing';
export * from './summarization';
export * from './toolSelector';
export * from './todoList';
