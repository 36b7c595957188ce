// rx-agent/openai: the OpenAI chat completions adapter, an entry of its own because `openai` is an
// optional peer dependency: an app that talks to another provider does not carry the adapter.
export * from '../model/openAIChat';
