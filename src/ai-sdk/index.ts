// `rx-agent/ai-sdk`: a run spoken as the AI SDK UI message stream v1 (out), chat requests (in).
// No `ai` at run time or in the types: the protocol's shapes are declared here.
export { toUIMessageStream, type ToUIMessageStreamOptions, type UIMessageChunk } from './toUIMessageStream';
export { aiSdkHandler, approvalsAnswered, UI_MESSAGE_STREAM_HEADERS, type AiSdkHandlerOptions, type ChatRequestBody, type RequestAnswer } from './aiSdkHandler';
export { fromUIMessages, type UIMessageLike, type UIMessagePartLike } from './fromUIMessages';
