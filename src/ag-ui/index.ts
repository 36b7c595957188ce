// `rx-agent/ag-ui`: a run spoken as AG-UI 1.0 events (out), `RunAgentInput` and its resume entries (in).
export { toAgUi, AG_UI_METADATA_KEY, type ToAgUiOptions } from './toAgUi';
export { agUiHandler, type AgUiHandlerOptions } from './agUiHandler';
export { AgUiAgent, type AgUiAgentConfig } from './AgUiAgent';
export { fromAgUiMessages } from './fromAgUiMessages';
