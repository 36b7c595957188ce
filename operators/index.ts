// From the seeds
export * from './circuitBreaker';
export * from './errorTracking';
export * from './iterationGuidance';
export * from './iterationLogging';
export * from './lifecycleEvents';
export * from './permissions';
// Resilience
export * from './modelRetry';
export * from './modelTimeout';
// Limits
export * from './modelCallLimit';
export * from './toolCallLimit';
// Content
export * from './contextEditing';
export * from './summarization';
export * from './toolSelector';
export * from './todoList';
