// `rx-agent/testing`: a scripted model, a fake OpenAI server and helpers for marble tests.
export { scriptedModel, type ScriptedModel, type ScriptedModelOptions, type ScriptedTurn } from './scriptedModel';
export { eventLabel, eventLabels } from './eventLabels';
export {
  startFakeOpenAIServer,
  type FakeChatRequest,
  type FakeErrorTurn,
  type FakeOpenAIServer,
  type FakeOpenAITurn,
  type FakeReplyTurn,
  type FakeToolCall,
} from './openAIServer';
export { collectEvents, eventsOfType } from './collectEvents';
export { describeStoreConformance, type StoreConformanceOptions } from './storeConformance';
