/**
 * `rx-agent/http`: Server-Sent Events, both ways, for a run's events over HTTP.
 *
 * @module rx-agent/http
 */
export { decodeSSE, encodeSSE, sseHeaders, toSSEStream, type SSESource, type SSEStreamOptions } from './sse';
