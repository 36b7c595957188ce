import { asyncScheduler } from 'rxjs';
import { memoryStore } from '../../src/index';

describe('memoryStore options', () => {
  it('refuses an unknown (misspelt) option, naming it and the known ones', () => {
    expect(() => memoryStore({ retain: 1000 } as never)).toThrow(new TypeError("memoryStore: unknown option(s) 'retain' (known: retainMs, scheduler)"));
    expect(() => memoryStore({ retainMS: 1000, schedular: asyncScheduler } as never)).toThrow(
      new TypeError("memoryStore: unknown option(s) 'retainMS', 'schedular' (known: retainMs, scheduler)"),
    );
  });

  it('refuses options that are not an object', () => {
    for (const [options, shown] of [
      [null, 'null'],
      [[], '[]'],
      ['fast', '"fast"'],
      [60_000, '60000'],
      [() => ({}), 'a function'],
    ] as const) {
      expect(() => memoryStore(options as never)).toThrow(new TypeError(`memoryStore: options must be an object, got ${shown}`));
    }
  });

  it('takes no options, an empty object, or its known ones', () => {
    expect(() => memoryStore()).not.toThrow();
    expect(() => memoryStore(undefined)).not.toThrow();
    expect(() => memoryStore({})).not.toThrow();
    expect(() => memoryStore({ retainMs: 60_000, scheduler: asyncScheduler })).not.toThrow();
    expect(() => memoryStore({ retainMs: undefined, scheduler: undefined })).not.toThrow();
  });
});
