/**
 * `rx-agent/openai`: model clients over the `openai` SDK (an optional peer dependency).
 *
 * @module rx-agent/openai
 */
export { openAIChat, type OpenAIChatClient, type OpenAIChatOptions } from './openAIChat';
export { openAIResponses, type OpenAIResponsesClient, type OpenAIResponsesOptions } from './openAIResponses';
