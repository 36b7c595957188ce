import { Observable } from 'rxjs';
import { withIds } from '../messages/message';
import { chain } from '../internal/chain';
import { SessionConflictError, SessionDataError } from './errors';
import { errorMessage } from '../internal/errorMessage';
import { LocalLeases } from './localLeases';
import { checkAt, checkId, checkLease, checkTurn, forkedError } from './inMemorySessionStore';
import { parseSnapshot, type SessionSnapshot } from './snapshot';
import type { Awaitable, LegacySessionStore, SessionAppend, SessionLeaseClaim, SessionStore, SessionTurn, StoredSession } from './sessionStore';
import { SessionContent } from './sessionTurns';

/**
 * What a store of the earlier contract keeps besides the snapshot: its revision, the runs whose
 * turns it holds, its forks and where it was forked from (extra fields of the saved object).
 */
interface Bookkeeping {
  readonly revision?: number;
  readonly runs?: readonly string[];
  readonly forks?: readonly string[];
  readonly parentId?: string;
  readonly forkedAt?: number;
}

type Saved = SessionSnapshot & Bookkeeping;

const adapted = new WeakMap<object, SessionStore>();
let warned = false;

/**
 * True for a store of the earlier contract: `save(snapshot)` without `appendTurn`.
 *
 * @example
 * isLegacySessionStore({ load, save }); // true
 */
export function isLegacySessionStore(store: unknown): store is LegacySessionStore {
  const s = store as Partial<Record<string, unknown>> | null;
  return !!s && typeof s === 'object' && typeof s.save === 'function' && typeof s.load === 'function' && typeof s.appendTurn !== 'function';
}

/**
 * The {@link SessionStore} methods over a store of the earlier contract (`load` answering a
 * snapshot, `save(snapshot)`), made once per store. An append loads the snapshot, checks its
 * revision, applies the turn and saves the whole snapshot back: correct within one process, but
 * not atomic across processes, and O(the history) per turn. Leases are kept in this process. A
 * fork copies its parent's prefix and current state (such a store keeps no turns to share). The
 * first adaptation in a process emits a deprecation warning.
 *
 * @example
 * const store = adaptSessionStore({ load: (id) => files.read(id), save: (s) => files.write(s.id, s) });
 */
export function adaptSessionStore(legacy: LegacySessionStore): SessionStore {
  const known = adapted.get(legacy);
  if (known) return known;
  if (!warned) {
    warned = true;
    const proc = (globalThis as { process?: { emitWarning?: (message: string, options: { type: string; code: string }) => void } }).process;
    proc?.emitWarning?.(
      'rx-agent: a session store with save(snapshot) and no appendTurn() is adapted: each turn rewrites the whole session, and one run at a time is kept in this process only. See docs/upgrading.md.',
      { type: 'DeprecationWarning', code: 'RX_AGENT_SESSION_SAVE' },
    );
  }
  const leases = new LocalLeases(() => Date.now());
  const read = (id: string): Awaitable<Saved | undefined> =>
    chain(legacy.load(id), (raw) => {
      if (raw === undefined || raw === null) return undefined;
      let snapshot: SessionSnapshot;
      try {
        snapshot = parseSnapshot(raw, `session '${id}' in the store`);
      } catch (error) {
        throw new SessionDataError(id, errorMessage(error), { cause: error });
      }
      const extra = raw as Bookkeeping;
      return { ...snapshot, revision: extra.revision, runs: extra.runs, forks: extra.forks, parentId: extra.parentId, forkedAt: extra.forkedAt };
    });
  const write = (saved: Saved): Awaitable<void> => legacy.save(saved);
  const store: SessionStore = {
    load: (id) => {
      checkId('load', id);
      return chain(read(id), (saved): StoredSession | undefined => {
        if (!saved) return undefined;
        const lastRunId = saved.runs?.at(-1);
        const base: StoredSession = {
          version: 1 as const,
          id,
          messages: withIds(saved.messages),
          state: saved.state,
          revision: saved.revision ?? 0,
          ...(lastRunId === undefined ? {} : { lastRunId }),
        };
        return saved.parentId === undefined ? base : { ...base, parentId: saved.parentId, forkedAt: saved.forkedAt ?? 0 };
      });
    },
    revision: (id) => {
      checkId('revision', id);
      return chain(read(id), (saved) => (saved ? (saved.revision ?? 0) : undefined));
    },
    appendTurn: (id: string, expected: number, turn: SessionTurn) => {
      checkId('appendTurn', id);
      checkTurn(expected, turn);
      return chain(read(id), (saved): Awaitable<SessionAppend> => {
        const revision = saved?.revision ?? 0;
        if (saved?.runs?.includes(turn.runId)) return { revision, appended: false };
        if (revision !== expected) throw new SessionConflictError(id, expected, revision);
        const content = new SessionContent(saved ? saved.messages.slice() : [], saved ? { ...saved.state } : {});
        content.apply(JSON.parse(JSON.stringify(turn)) as SessionTurn);
        const next: Saved = {
          ...(saved ?? {}),
          version: 1,
          id,
          messages: content.messages,
          state: content.state,
          revision: revision + 1,
          runs: [...(saved?.runs ?? []), turn.runId],
        };
        return chain(write(next), () => ({ revision: revision + 1, appended: true }));
      });
    },
    fork: (parentId, forkId, at) => {
      checkId('fork', parentId);
      checkId('fork', forkId);
      return chain(read(parentId), (parent) => {
        if (!parent) throw new TypeError(`fork: no session '${parentId}' in the store`);
        checkAt(at, parent.messages.length);
        return chain(read(forkId), (existing) => {
          if (existing) throw new SessionConflictError(forkId, 0, existing.revision ?? 0, `Session '${forkId}' exists already`);
          const fork: Saved = { version: 1, id: forkId, messages: parent.messages.slice(0, at), state: parent.state, revision: 0, parentId, forkedAt: at };
          return chain(write(fork), () => write({ ...parent, forks: [...(parent.forks ?? []), forkId] }));
        });
      });
    },
    forks: (id) => {
      checkId('forks', id);
      return chain(read(id), (saved) => saved?.forks?.slice() ?? []);
    },
    delete: (id) => {
      checkId('delete', id);
      return chain(read(id), (saved) => {
        if (!saved) return;
        if (saved.forks && saved.forks.length > 0) throw new SessionConflictError(id, saved.revision ?? 0, saved.revision ?? 0, forkedError(id, saved.forks));
        if (typeof legacy.delete !== 'function') throw new TypeError(`delete: the session store has no delete(id) method`);
        return chain(legacy.delete(id), () => {
          const parentId = saved.parentId;
          if (parentId === undefined) return;
          return chain(read(parentId), (parent) => (parent ? write({ ...parent, forks: (parent.forks ?? []).filter((f) => f !== id) }) : undefined));
        });
      });
    },
    acquireSession: (id, owner, ttlMs): SessionLeaseClaim => {
      checkLease('acquireSession', id, owner, ttlMs);
      return leases.acquire(id, owner, ttlMs);
    },
    renewSession: (id, owner, ttlMs) => {
      checkLease('renewSession', id, owner, ttlMs);
      return leases.renew(id, owner, ttlMs);
    },
    releaseSession: (id, owner) => leases.release(id, owner),
    sessionReleases: (id): Observable<void> => leases.releases(id),
  };
  adapted.set(legacy, store);
  return store;
}
