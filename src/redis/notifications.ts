import type { Redis } from 'ioredis';

/** One party interested in a channel. */
export interface ChannelListener {
  /** A message published on the channel. */
  message(message: string): void;
  /**
   * The connection was lost and is back, its channels subscribed again (Redis confirmed it):
   * messages may have been missed; read the state again.
   */
  resync(): void;
  /** The connection was lost for good (the client gave up reconnecting): nothing more will come. */
  lost(error: Error): void;
}

/** A listener's hold on its channel. */
export interface Listening {
  /** Settles once Redis has confirmed the subscription: from then on no message is missed. */
  readonly ready: Promise<unknown>;
  close(): void;
}

/**
 * The pub/sub side of a store: one subscriber connection (a `duplicate()` of the store's client)
 * for every channel this process follows, opened when the first listener comes and closed when
 * the last one goes, so that a process with nothing to follow holds no extra connection and a
 * test ends with no socket open. Each channel is subscribed once, however many listeners it has.
 */
export class Notifications {
  private connection: Redis | undefined;
  private readonly channels = new Map<string, { readonly listeners: Set<ChannelListener>; readonly ready: Promise<unknown> }>();

  constructor(private readonly client: Redis) {}

  listen(channel: string, listener: ChannelListener): Listening {
    const connection = this.open();
    let entry = this.channels.get(channel);
    if (!entry) {
      const ready = connection.subscribe(channel);
      ready.catch(() => undefined); // reported to each listener through `ready`
      entry = { listeners: new Set(), ready };
      this.channels.set(channel, entry);
    }
    entry.listeners.add(listener);
    const { listeners, ready } = entry;
    let closed = false;
    return {
      ready,
      close: () => {
        if (closed) return;
        closed = true;
        listeners.delete(listener);
        if (listeners.size > 0 || this.channels.get(channel)?.listeners !== listeners) return;
        this.channels.delete(channel);
        if (this.channels.size === 0) this.shut();
        else connection.unsubscribe(channel).catch(() => undefined);
      },
    };
  }

  private open(): Redis {
    if (this.connection) return this.connection;
    const connection = this.client.duplicate();
    this.connection = connection;
    let connectedOnce = false;
    connection.on('message', (channel: string, message: string) => {
      if (this.connection !== connection) return;
      const entry = this.channels.get(channel);
      if (!entry) return;
      for (const listener of [...entry.listeners]) listener.message(message);
    });
    connection.on('ready', () => {
      if (!connectedOnce) {
        connectedOnce = true;
        return;
      }
      // Back after a loss (ioredis subscribes again by itself): what was published meanwhile is lost.
      // The listeners are told once Redis confirms the channels (subscribed again here, after
      // ioredis's own), so that a read they make then is followed by whatever is published after it.
      if (this.connection !== connection) return;
      const channels = [...this.channels.keys()];
      if (channels.length === 0) return;
      connection.subscribe(...channels).then(
        () => {
          if (this.connection !== connection) return;
          for (const { listeners } of [...this.channels.values()]) for (const listener of [...listeners]) listener.resync();
        },
        () => undefined, // lost again: the next 'ready' or 'end' tells
      );
    });
    // ioredis reconnects by itself; an error event without a listener would be printed as unhandled.
    let lastError: Error | undefined;
    connection.on('error', (error: Error) => (lastError = error));
    connection.on('end', () => {
      // No reconnection (the client's retryStrategy gave up): every listener is told.
      if (this.connection !== connection) return;
      this.connection = undefined;
      const channels = [...this.channels.entries()];
      this.channels.clear();
      const error = new Error(`redisStore: the pub/sub connection closed and will not reconnect${lastError ? ` (${lastError.message})` : ''}`);
      for (const [, { listeners }] of channels) for (const listener of [...listeners]) listener.lost(error);
    });
    return connection;
  }

  private shut(): void {
    const connection = this.connection;
    this.connection = undefined;
    if (!connection) return;
    connection.quit().catch(() => connection.disconnect());
  }
}
