export * from './types';
export * from './errors';
export * from './assembleResponse';
export * from './openAIChat';
export * from './fromAsyncIterable';
