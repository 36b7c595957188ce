/**
 * `rx-agent/testing`: a scripted model, a fake OpenAI server and helpers for marble tests.
 *
 * @module rx-agent/testing
 */
export { scriptedModel, type ScriptedModel, type ScriptedModelOptions, type ScriptedTurn } from './scriptedModel';
export { eventLabel, eventLabels } from './eventLabels';
export {
  startFakeOpenAIServer,
  type FakeChatRequest,
  type FakeErrorTurn,
  type FakeOpenAIServer,
  type FakeOpenAIServerOptions,
  type FakeOpenAITurn,
  type FakeReplyTurn,
  type FakeToolCall,
} from './openAIServer';
export { collectEvents, eventsOfType } from './collectEvents';
export { describeSessionStoreConformance, describeStoreConformance, type StoreConformanceOptions } from './storeConformance';
