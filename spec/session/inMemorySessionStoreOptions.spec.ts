import { asyncScheduler } from 'rxjs';
import { InMemorySessionStore } from '../../src/index';

describe('InMemorySessionStore options', () => {
  it('refuses an unknown (misspelt) option, naming it and the known ones', () => {
    expect(() => new InMemorySessionStore({ schedular: asyncScheduler } as never)).toThrow(
      new TypeError("InMemorySessionStore: unknown option(s) 'schedular' (known: scheduler)"),
    );
    // memoryStore's retainMs is not one of its options.
    expect(() => new InMemorySessionStore({ scheduler: asyncScheduler, retainMs: 1000 } as never)).toThrow(
      new TypeError("InMemorySessionStore: unknown option(s) 'retainMs' (known: scheduler)"),
    );
  });

  it('refuses options that are not an object', () => {
    for (const [options, shown] of [
      [null, 'null'],
      [['async'], '["async"]'],
      ['async', '"async"'],
      [true, 'true'],
      [() => ({}), 'a function'],
    ] as const) {
      expect(() => new InMemorySessionStore(options as never)).toThrow(new TypeError(`InMemorySessionStore: options must be an object, got ${shown}`));
    }
  });

  it('takes no options, an empty object, or its known one', () => {
    expect(() => new InMemorySessionStore()).not.toThrow();
    expect(() => new InMemorySessionStore({})).not.toThrow();
    expect(() => new InMemorySessionStore({ scheduler: asyncScheduler })).not.toThrow();
    expect(() => new InMemorySessionStore({ scheduler: undefined })).not.toThrow();
  });
});
