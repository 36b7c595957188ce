export * from './ofType';
export * from './toAsyncIterable';
export * from './toReadableStream';
export * from './fromReadableStream';
export * from './sse';
