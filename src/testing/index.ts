export * from './scriptedModel';
export * from './eventLabels';
export * from './openAIServer';
export * from './collectEvents';
