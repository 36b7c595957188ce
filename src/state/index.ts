export * from './defineState';
export * from './stateBag';
export * from './loopState';
