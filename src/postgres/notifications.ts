import type { SchedulerLike } from 'rxjs';
import type { PgPool as Pool, PgPoolClient as PoolClient } from './pgPool';

const noop = () => undefined;

/** One party interested in a run's notifications. */
export interface RunListener {
  /** A notification about the run: `kind` (`j` journal, `a` answer, `c` cancel) and its number (position, answer), if any. */
  message(kind: string, n: number): void;
  /** The listening connection was lost and is back: notifications may have been missed; read again. */
  resync(): void;
  /** The listening connection is gone for good: it could not be opened again. */
  lost(error: Error): void;
  /** The store was closed: nothing more will come. */
  end(): void;
}

/** A listener's hold on its run. */
export interface Listening {
  /** Settles once the connection listens: from then on no notification is missed. */
  readonly ready: Promise<unknown>;
  close(): void;
}

/** The listening connection, while there is one. */
interface Connection {
  readonly ready: Promise<PoolClient>;
  closed: boolean;
  /** Given back on purpose (the last listener left, or `close()`): its failure to open fails nobody. */
  shutDown: boolean;
  /** UNLISTEN, then back to the pool; settles when it is back. */
  shut(): Promise<void>;
}

/**
 * The waits, in ms, before each new try to open a listening connection after one failed (about 3 s
 * in all, six tries): after a restart, a failover or pg_terminate_backend, the pool may still hold
 * idle connections that were ended too and hand them out before it has heard; a try that fails
 * drops its connection, and the next one gets another (or a new one, once the server is back).
 */
export const LISTEN_RETRY_DELAYS_MS: readonly number[] = [100, 200, 400, 800, 1600];

/**
 * The LISTEN side of a store: one connection taken from the pool for every run this process
 * follows (a payload names a run by the hex of its key, so one channel serves them all), taken
 * when the first listener comes and given back when the last one goes, so that a process following
 * nothing holds no connection. When it is lost, another one is taken and every listener reads
 * again (what was notified meanwhile is lost). A connection that cannot be opened (or cannot
 * LISTEN) is given back with its error, so that the pool drops it, and another is tried after
 * each of {@link LISTEN_RETRY_DELAYS_MS} on the store's scheduler; when none can be had after the
 * last, every listener is told.
 */
export class Notifications {
  private connection: Connection | undefined;
  private readonly runs = new Map<string, Set<RunListener>>();

  constructor(
    private readonly pool: Pool,
    /** `LISTEN <channel>`, the identifier quoted. */
    private readonly listenSql: string,
    /** Runs the waits between tries. */
    private readonly scheduler: SchedulerLike,
  ) {}

  listen(run: string, listener: RunListener): Listening {
    const connection = this.open();
    let listeners = this.runs.get(run);
    if (!listeners) this.runs.set(run, (listeners = new Set()));
    listeners.add(listener);
    let closed = false;
    return {
      ready: connection.ready,
      close: () => {
        if (closed) return;
        closed = true;
        listeners.delete(listener);
        if (listeners.size === 0 && this.runs.get(run) === listeners) this.runs.delete(run);
        if (this.runs.size === 0) void this.shut();
      },
    };
  }

  /** Ends the listening: every listener ends; settles when the connection is back in the pool. */
  close(): Promise<void> {
    const listeners = [...this.runs.values()].flatMap((set) => [...set]);
    this.runs.clear();
    const shut = this.shut();
    for (const listener of listeners) listener.end();
    return shut;
  }

  private open(): Connection {
    if (this.connection) return this.connection;
    /** The client that listens (or is being tried). */
    let client: PoolClient | undefined;
    let released = true;
    /** LISTEN went through on `client`: an error of it from then on is a lost connection. */
    let listening = false;
    let detach = () => undefined as void;
    /** Ends the wait before the next try at once (the connection is shut meanwhile). */
    let stopWaiting: (() => void) | undefined;
    /** Gives the client back to the pool (an error: drops it), once. */
    const giveBack = (error?: Error) => {
      if (!client || released) return;
      released = true;
      detach();
      client.release(error);
    };
    const lost = (error: Error) => {
      if (connection.closed) return;
      connection.closed = true;
      giveBack(error);
      if (this.connection !== connection) return;
      this.connection = undefined;
      if (this.runs.size === 0) return;
      // Another connection; then every listener reads what it may have missed.
      const next = this.open();
      next.ready.then(
        () => {
          for (const listener of [...this.runs.values()].flatMap((set) => [...set])) listener.resync();
        },
        (reopenError: Error) => {
          if (!next.shutDown) this.fail(reopenError);
        },
      );
    };
    /** One try: a client from the pool, listening; one that fails is given back with its error (the pool drops it). */
    const attempt = async (): Promise<PoolClient> => {
      const connected = await this.pool.connect();
      client = connected;
      released = false;
      listening = false;
      const onNotification = (notification: { payload?: string }) => {
        if (this.connection === connection && listening) this.route(notification.payload);
      };
      // Before LISTEN went through, an error fails this try (its query fails with it).
      const onError = (error: Error) => (listening ? lost(error) : giveBack(error));
      const onEnd = () => onError(new Error('postgresStore: the listening connection ended'));
      connected.on('notification', onNotification);
      connected.on('error', onError);
      connected.on('end', onEnd);
      detach = () => {
        connected.removeListener('notification', onNotification);
        connected.removeListener('error', onError);
        connected.removeListener('end', onEnd);
      };
      if (connection.closed) {
        giveBack();
        return connected;
      }
      try {
        await connected.query(this.listenSql);
      } catch (error) {
        giveBack(error as Error);
        throw error;
      }
      if (released) throw new Error('postgresStore: the listening connection ended'); // it failed as LISTEN went through
      listening = true;
      return connected;
    };
    const wait = (ms: number) =>
      new Promise<void>((resolve) => {
        const action = this.scheduler.schedule(() => resolve(), ms);
        stopWaiting = () => {
          action.unsubscribe();
          resolve();
        };
      });
    const tries = async (): Promise<PoolClient> => {
      for (let retry = 0; ; retry++) {
        try {
          return await attempt();
        } catch (error) {
          if (connection.closed || retry >= LISTEN_RETRY_DELAYS_MS.length) throw error;
          await wait(LISTEN_RETRY_DELAYS_MS[retry]);
          stopWaiting = undefined;
          if (connection.closed) throw error;
        }
      }
    };
    const ready = tries();
    const connection: Connection = {
      ready,
      closed: false,
      shutDown: false,
      shut: () => {
        connection.shutDown = true;
        stopWaiting?.();
        // Without a client, the try under way gives it back; one that is listening, or about to
        // (UNLISTEN waits for LISTEN), is given back after UNLISTEN.
        if (!client || released) return ready.then(noop, noop);
        return client.query('UNLISTEN *').then(
          () => giveBack(),
          (error: Error) => giveBack(error),
        );
      },
    };
    ready.catch((error: Error) => {
      if (this.connection === connection) this.connection = undefined;
      connection.closed = true;
      giveBack(error);
    });
    this.connection = connection;
    return connection;
  }

  private fail(error: Error): void {
    const listeners = [...this.runs.values()].flatMap((set) => [...set]);
    this.runs.clear();
    const reason = new Error(`postgresStore: the listening connection was lost and could not be opened again (${error.message})`, { cause: error });
    for (const listener of listeners) listener.lost(reason);
  }

  private route(payload: string | undefined): void {
    if (!payload) return;
    const kind = payload[0];
    const colon = payload.indexOf(':');
    const run = colon === -1 ? payload.slice(1) : payload.slice(1, colon);
    const listeners = this.runs.get(run);
    if (!listeners) return;
    const n = colon === -1 ? 0 : Number(payload.slice(colon + 1));
    for (const listener of [...listeners]) listener.message(kind, n);
  }

  /** Gives the connection back to the pool (after UNLISTEN), or drops it if it cannot be cleaned. */
  private shut(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    if (!connection || connection.closed) return Promise.resolve();
    connection.closed = true;
    return connection.shut();
  }
}
