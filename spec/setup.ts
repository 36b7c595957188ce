// A promise rejection that nobody handles is a bug: fail the spec file that caused it.
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);
process.on('unhandledRejection', onUnhandled);

afterAll(() => {
  process.off('unhandledRejection', onUnhandled);
  if (unhandled.length > 0) {
    throw new Error(`Unhandled promise rejection: ${String((unhandled[0] as Error)?.stack ?? unhandled[0])}`);
  }
});
