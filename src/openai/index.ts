// `rx-agent/openai`: model clients over the `openai` SDK (an optional peer dependency).
export { openAIChat, type OpenAIChatClient, type OpenAIChatOptions } from './openAIChat';
