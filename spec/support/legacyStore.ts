import type { LegacySessionStore, SessionSnapshot } from '../../src/index';

/**
 * A session store of the earlier contract (whole snapshots saved over each other), kept as JSON:
 * what a user's own store written before appends looks like.
 */
export class LegacyMemoryStore implements LegacySessionStore {
  private readonly data = new Map<string, string>();

  load(id: string): SessionSnapshot | undefined {
    const text = this.data.get(id);
    return text === undefined ? undefined : (JSON.parse(text) as SessionSnapshot);
  }

  save(snapshot: SessionSnapshot): void {
    this.data.set(snapshot.id, JSON.stringify(snapshot));
  }

  delete(id: string): void {
    this.data.delete(id);
  }
}
