export * from './message';
export * from './messageLog';
