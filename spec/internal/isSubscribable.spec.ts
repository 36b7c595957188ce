import { of } from 'rxjs';
import { isSubscribable } from '../../src/internal/isSubscribable';

describe('isSubscribable', () => {
  it('is true for an rxjs Observable and for any object with a subscribe method (another copy of rxjs)', () => {
    expect(isSubscribable(of(1))).toBe(true);
    expect(isSubscribable({ subscribe: () => ({ unsubscribe() {} }) })).toBe(true);
  });

  it('is false for null, a Promise, a function, and an object whose subscribe is not a method', () => {
    expect([null, undefined, Promise.resolve(1), () => 1, {}, { subscribe: 1 }].map(isSubscribable)).toEqual([false, false, false, false, false, false]);
  });
});
