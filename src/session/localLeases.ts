import { Observable, Subject } from 'rxjs';
import type { SessionLeaseClaim } from './sessionStore';

type Lease = SessionLeaseClaim['lease'];

/**
 * @internal Session leases kept in one process: the lease half of the in-memory session stores, and
 * of a store written for the earlier contract (whose leases can only be kept where it runs).
 */
export class LocalLeases {
  private readonly held = new Map<string, Lease>();
  private readonly released = new Map<string, Subject<void>>();

  constructor(private readonly now: () => number) {}

  acquire(id: string, owner: string, ttlMs: number): SessionLeaseClaim {
    const now = this.now();
    const held = this.held.get(id);
    if (held && held.owner !== owner && held.expiresAt > now) return { acquired: false, lease: held };
    const lease = { owner, expiresAt: now + ttlMs };
    this.held.set(id, lease);
    return { acquired: true, lease };
  }

  renew(id: string, owner: string, ttlMs: number): boolean {
    const now = this.now();
    const held = this.held.get(id);
    if (!held || held.owner !== owner || held.expiresAt <= now) return false;
    this.held.set(id, { owner, expiresAt: now + ttlMs });
    return true;
  }

  release(id: string, owner: string): void {
    if (this.held.get(id)?.owner !== owner) return;
    this.held.delete(id);
    this.released.get(id)?.next();
  }

  releases(id: string): Observable<void> {
    return new Observable<void>((subscriber) => {
      let subject = this.released.get(id);
      if (!subject) this.released.set(id, (subject = new Subject<void>()));
      const subscription = subject.subscribe(subscriber);
      subscriber.next(); // listening: from now on no release is missed
      return () => {
        subscription.unsubscribe();
        if (!subject.observed && this.released.get(id) === subject) this.released.delete(id);
      };
    });
  }
}
