import { asyncScheduler, queueScheduler } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { checkFunction, checkMaxRetries, checkOptions, checkScheduler, checkToolNames } from '../../../operators/internal/checkOptions';

describe('checkOptions', () => {
  it('accepts an object or nothing', () => {
    expect(() => checkOptions('op', undefined)).not.toThrow();
    expect(() => checkOptions('op', { a: 1, b: undefined })).not.toThrow();
  });

  it('refuses what is not an object, and a null option (which `??` would take for the default)', () => {
    expect(() => checkOptions('op', null)).toThrow(new TypeError('op: options must be an object, got null'));
    expect(() => checkOptions('op', [])).toThrow(/^op: options must be an object/);
    expect(() => checkOptions('op', 'x')).toThrow(/^op: options must be an object/);
    expect(() => checkOptions('op', { scheduler: null })).toThrow(new TypeError('op: scheduler must not be null (leave it out for the default)'));
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
