import { asyncScheduler, queueScheduler } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import {
  checkFunction,
  checkMaxRetries,
  checkNestedOptionNames,
  checkOptionNames,
  checkOptions,
  checkScheduler,
  checkToolNames,
  optionNames,
} from '../../../operators/internal/checkOptions';

describe('checkOptions', () => {
  const known = ['a', 'b', 'scheduler'];

  it('accepts an object or nothing', () => {
    expect(() => checkOptions('op', undefined, known)).not.toThrow();
    expect(() => checkOptions('op', { a: 1, b: undefined }, known)).not.toThrow();
  });

  it('refuses what is not an object, and a null option (which `??` would take for the default)', () => {
    expect(() => checkOptions('op', null, known)).toThrow(new TypeError('op: options must be an object, got null'));
    expect(() => checkOptions('op', [], known)).toThrow(/^op: options must be an object/);
    expect(() => checkOptions('op', 'x', known)).toThrow(/^op: options must be an object/);
    expect(() => checkOptions('op', { scheduler: null }, known)).toThrow(new TypeError('op: scheduler must not be null (leave it out for the default)'));
  });

  it('refuses an unknown option (a misspelt one would be left out in silence), naming it and the known ones', () => {
    expect(() => checkOptions('op', { a: 1, c: 2 }, known)).toThrow(new TypeError("op: unknown option(s) 'c' (known: a, b, scheduler)"));
    expect(() => checkOptions('op', { c: undefined, d: null }, known)).toThrow(new TypeError("op: unknown option(s) 'c', 'd' (known: a, b, scheduler)"));
    // An inherited key is no option; a key named like an Object.prototype member is unknown.
    expect(() => checkOptions('op', Object.create({ c: 1 }) as object, known)).not.toThrow();
    expect(() => checkOptions('op', { constructor: 1 }, known)).toThrow(/^op: unknown option\(s\) 'constructor'/);
  });
});

describe('checkOptionNames', () => {
  it('checks the names only (the operator checks the values itself)', () => {
    expect(() => checkOptionNames('op', { a: null }, ['a'])).not.toThrow();
    expect(() => checkOptionNames('op', { b: 1 }, ['a'])).toThrow(new TypeError("op: unknown option(s) 'b' (known: a)"));
  });
});

describe('checkNestedOptionNames', () => {
  it('checks the names of a nested options object, naming each by its path, in the words of checkOptionNames', () => {
    expect(() => checkNestedOptionNames('op', 'trigger', { tokens: 1 }, ['tokens', 'messages'])).not.toThrow();
    expect(() => checkNestedOptionNames('op', 'trigger', { tokenz: 1 }, ['tokens', 'messages'])).toThrow(
      new TypeError("op: unknown option(s) 'trigger.tokenz' (known: trigger.tokens, trigger.messages)"),
    );
    expect(() => checkNestedOptionNames('op', 'skills[1]', { a: 1, b: 2, c: 3 }, ['a'])).toThrow(
      new TypeError("op: unknown option(s) 'skills[1].b', 'skills[1].c' (known: skills[1].a)"),
    );
    expect(() => checkNestedOptionNames('op', 'trigger', Object.create({ c: 1 }) as object, ['a'])).not.toThrow();
  });
});

describe('optionNames', () => {
  interface Options {
    a?: number;
    b: string;
  }

  it('lists the keys of the options interface, which TypeScript checks (npm run typecheck)', () => {
    expect(optionNames<Options>({ a: true, b: true })).toEqual(['a', 'b']);
    expect(Object.isFrozen(optionNames<Options>({ a: true, b: true }))).toBe(true);
    // @ts-expect-error -- a key of the interface is missing
    optionNames<Options>({ a: true });
    // @ts-expect-error -- not a key of the interface
    optionNames<Options>({ a: true, b: true, c: true });
  });
});

describe('checkMaxRetries', () => {
  it('takes an integer >= 0', () => {
    expect([0, 3].map((n) => checkMaxRetries('op', n))).toEqual([0, 3]);
    for (const bad of [-1, 1.5, Number.NaN, '2']) expect(() => checkMaxRetries('op', bad)).toThrow(/^op: maxRetries must be an integer >= 0, got /);
  });
});

describe('checkFunction', () => {
  it('takes a function or nothing, naming the option otherwise', () => {
    const f = () => true;
    expect(checkFunction('op', 'retryOn', f)).toBe(f);
    expect(checkFunction('op', 'retryOn', undefined)).toBeUndefined();
    expect(() => checkFunction('op', 'retryOn', 'yes')).toThrow(new TypeError('op: retryOn must be a function, got "yes"'));
  });
});

describe('checkScheduler', () => {
  it('takes an rxjs scheduler (virtual time included) or nothing', () => {
    const ts = new TestScheduler(() => undefined);
    expect([asyncScheduler, queueScheduler, ts].map((s) => checkScheduler('op', s))).toEqual([asyncScheduler, queueScheduler, ts]);
    expect(checkScheduler('op', undefined)).toBeUndefined();
    expect(() => checkScheduler('op', {} as never)).toThrow(/^op: scheduler must be an rxjs SchedulerLike, got /);
  });
});

describe('checkToolNames', () => {
  it('makes a Set of tool names, or undefined for every tool', () => {
    expect(checkToolNames('op', ['a', 'b', 'a'])).toEqual(new Set(['a', 'b']));
    expect(checkToolNames('op', undefined)).toBeUndefined();
    expect(() => checkToolNames('op', 'a' as never)).toThrow(/^op: tools must be an array of tool names/);
    expect(() => checkToolNames('op', ['a', 1] as never)).toThrow(/^op: tools must be an array of tool names/);
  });
});
