export * from './defineTool';
export * from './parseArguments';
