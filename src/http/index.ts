/**
 * `rx-agent/http`: a run's events over HTTP. Server-Sent Events both ways, a fetch-style handler
 * that serves journaled runs (start, follow with resume, answer, cancel) from any process sharing
 * the store, its `node:http` adapter, and a browser client for it. Loads in a browser as well as
 * in Node (no Node built-in is imported).
 *
 * @module rx-agent/http
 */
export { decodeSSE, encodeSSE, sseHeaders, toSSEStream, type SSESource, type SSEStreamOptions } from './sse';
export { runsHandler, type RunsHandlerOptions, type StartRunBody } from './runsHandler';
export { toNodeHandler, type NodeRequestLike, type NodeResponseLike } from './toNodeHandler';
export { runsClient, RunsHttpError, type RunsClient, type RunsClientOptions } from './runsClient';
