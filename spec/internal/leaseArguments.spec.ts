import { checkOwner, checkTtl } from '../../src/internal/leaseArguments';

describe('checkOwner', () => {
  it('takes a non-empty string, and names what else it got', () => {
    expect(() => checkOwner('acquireLease', 'process-1')).not.toThrow();
    expect(() => checkOwner('acquireLease', '')).toThrow(new TypeError('acquireLease: a lease owner must be a non-empty string, got ""'));
    expect(() => checkOwner('renewSession', 7)).toThrow(new TypeError('renewSession: a lease owner must be a non-empty string, got 7'));
  });
});

describe('checkTtl', () => {
  it('answers whole ms, rounded up', () => {
    expect(checkTtl('acquireLease', 1)).toBe(1);
    expect(checkTtl('acquireLease', 0.2)).toBe(1);
    expect(checkTtl('acquireLease', Number.MAX_SAFE_INTEGER)).toBe(Number.MAX_SAFE_INTEGER);
  });

  it('refuses what is not a finite number above 0, or more than every store can count', () => {
    expect(() => checkTtl('renewLease', 0)).toThrow(new TypeError('renewLease: ttlMs must be a finite number of ms above 0, got 0'));
    expect(() => checkTtl('renewLease', NaN)).toThrow(new TypeError('renewLease: ttlMs must be a finite number of ms above 0, got NaN'));
    expect(() => checkTtl('renewLease', '5')).toThrow(new TypeError('renewLease: ttlMs must be a finite number of ms above 0, got "5"'));
    expect(() => checkTtl('acquireSession', 2 ** 53)).toThrow(
      new TypeError('acquireSession: ttlMs must be at most Number.MAX_SAFE_INTEGER ms, got 9007199254740992'),
    );
  });
});
