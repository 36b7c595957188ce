import { Observable, Subject } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { InMemorySessionStore, type SessionLeaseClaim } from '../../src/index';
import { claimSession, type SessionLeases } from '../../src/session/claimSession';

const newScheduler = () => new TestScheduler((a, b) => expect(a).toEqual(b));

describe('claimSession', () => {
  it('takes a free session at once', () => {
    const scheduler = newScheduler();
    scheduler.run(({ expectObservable }) => {
      const store = new InMemorySessionStore({ scheduler });
      expectObservable(claimSession(store, 's', 'run-a', 1000, 100, scheduler)).toBe('(x|)', { x: undefined });
    });
  });

  it('waits for the holder to release it, woken by the release', () => {
    const scheduler = newScheduler();
    scheduler.run(({ cold, expectObservable }) => {
      const store = new InMemorySessionStore({ scheduler });
      store.acquireSession('s', 'run-a', 1000);
      cold('30ms x').subscribe(() => store.releaseSession('s', 'run-a'));
      expectObservable(claimSession(store, 's', 'run-b', 1000, 100, scheduler)).toBe('30ms (x|)', { x: undefined });
    });
  });

  it('waits for a lease nobody releases until it expires', () => {
    const scheduler = newScheduler();
    scheduler.run(({ expectObservable }) => {
      const store = new InMemorySessionStore({ scheduler });
      store.acquireSession('s', 'gone', 40);
      expectObservable(claimSession(store, 's', 'run-b', 1000, 100, scheduler)).toBe('40ms (x|)', { x: undefined });
    });
  });

  it('fails with SessionBusyError naming the holder after waitMs; at once for 0', () => {
    const scheduler = newScheduler();
    scheduler.run(({ expectObservable }) => {
      const store = new InMemorySessionStore({ scheduler });
      store.acquireSession('s', 'run-a', 10_000);
      const busy = (waited: number) => ({ sessionId: 's', holder: 'run-a', waitedMs: waited, name: 'SessionBusyError' });
      const errorOf = (claim: Observable<void>) =>
        new Observable<string>((subscriber) =>
          claim.subscribe({ error: (e: Error & object) => (subscriber.next(JSON.stringify({ ...e, name: e.name })), subscriber.complete()) }),
        );
      expectObservable(errorOf(claimSession(store, 's', 'run-b', 1000, 100, scheduler))).toBe('100ms (e|)', { e: JSON.stringify(busy(100)) });
      expectObservable(errorOf(claimSession(store, 's', 'run-c', 1000, 0, scheduler))).toBe('(e|)', { e: JSON.stringify(busy(0)) });
    });
  });

  it('a waiter that leaves holds nothing, and a claim answered after it left is let go', () => {
    let answer: ((claim: SessionLeaseClaim) => void) | undefined;
    const released: string[] = [];
    const store: SessionLeases = {
      acquireSession: () => new Promise<SessionLeaseClaim>((resolve) => (answer = resolve)),
      releaseSession: (_id, owner) => void released.push(owner),
      sessionReleases: () => new Subject<void>().pipe(),
    };
    const scheduler = newScheduler();
    const subscription = claimSession(store, 's', 'run-a', 1000, 100, scheduler).subscribe();
    subscription.unsubscribe();
    expect(answer).toBeUndefined(); // the releases never emitted: no attempt was made
    const eager: SessionLeases = { ...store, sessionReleases: () => new Observable<void>((s) => s.next()) };
    const left = claimSession(eager, 's', 'run-b', 1000, 100, scheduler).subscribe();
    left.unsubscribe();
    answer?.({ acquired: true, lease: { owner: 'run-b', expiresAt: 1000 } });
    return Promise.resolve()
      .then(() => Promise.resolve())
      .then(() => expect(released).toEqual(['run-b']));
  });
});
