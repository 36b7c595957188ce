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
  /** UNLISTEN, then back to the pool; settles when it is back. */
  shut(): Promise<void>;
}

/**
 * The LISTEN side of a store: one connection taken from the pool for every run this process
 * follows (a payload names a run by the hex of its key, so one channel serves them all), taken
 * when the first listener comes and given back when the last one goes, so that a process following
 * nothing holds no connection. When it is lost, another one is taken and every listener reads
 * again (what was notified meanwhile is lost); when none can be had, every listener is told.
 */
export class Notifications {
  private connection: Connection | undefined;
  private readonly runs = new Map<string, Set<RunListener>>();

  constructor(
    private readonly pool: Pool,
    /** `LISTEN <channel>`, the identifier quoted. */
    private readonly listenSql: string,
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
    let client: PoolClient | undefined;
    let released = false;
    let detach = () => undefined as void;
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
      this.open().ready.then(
        () => {
          for (const listener of [...this.runs.values()].flatMap((set) => [...set])) listener.resync();
        },
        (reopenError: Error) => this.fail(reopenError),
      );
    };
    const ready = this.pool.connect().then(async (connected) => {
      client = connected;
      const onNotification = (notification: { payload?: string }) => {
        if (this.connection === connection) this.route(notification.payload);
      };
      const onEnd = () => lost(new Error('postgresStore: the listening connection ended'));
      connected.on('notification', onNotification);
      connected.on('error', lost);
      connected.on('end', onEnd);
      detach = () => {
        connected.removeListener('notification', onNotification);
        connected.removeListener('error', lost);
        connected.removeListener('end', onEnd);
      };
      if (connection.closed) {
        giveBack();
        return connected;
      }
      await connected.query(this.listenSql);
      return connected;
    });
    const connection: Connection = {
      ready,
      closed: false,
      shut: () => {
        // Without a client yet, the connect under way gives it back.
        if (!client) return ready.then(noop, noop);
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
