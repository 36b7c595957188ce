import { Subscription, UnsubscriptionError } from 'rxjs';
import { unsubscribeQuietly } from '../../src/internal/unsubscribeQuietly';

describe('unsubscribeQuietly', () => {
  it('runs every finalizer and returns what one threw instead of throwing it', () => {
    const ran: string[] = [];
    const subscription = new Subscription(() => ran.push('first'));
    subscription.add(() => {
      throw new Error('bad teardown');
    });
    subscription.add(() => ran.push('last'));
    const error = unsubscribeQuietly(subscription);
    expect(error).toBeInstanceOf(UnsubscriptionError);
    expect((error as UnsubscriptionError).errors.map((e) => (e as Error).message)).toEqual(['bad teardown']);
    expect(ran).toEqual(['first', 'last']);
    expect(subscription.closed).toBe(true);
  });

  it('returns undefined when every finalizer ran cleanly', () => {
    const subscription = new Subscription(() => undefined);
    expect(unsubscribeQuietly(subscription)).toBeUndefined();
    expect(subscription.closed).toBe(true);
  });
});
