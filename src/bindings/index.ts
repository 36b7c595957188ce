export * from './ofType';
export * from './toAsyncIterable';
