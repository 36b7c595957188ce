// `rx-agent/http`: Server-Sent Events, both ways, for a run's events over HTTP.
export { decodeSSE, encodeSSE, sseHeaders, toSSEStream, type SSESource, type SSEStreamOptions } from './sse';
