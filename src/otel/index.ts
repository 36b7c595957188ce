// `rx-agent/otel`: OpenTelemetry spans and metrics for agent runs, after the GenAI semantic
// conventions. It imports only `@opentelemetry/api` (an optional peer dependency): bring your own SDK.
export { telemetry, type TelemetryOptions } from './telemetry';
