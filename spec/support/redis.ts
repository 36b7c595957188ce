// The Redis of the specs: 127.0.0.1:6379 (REDIS_URL overrides). A spec never skips when it is
// missing: it fails, saying how to start one.
import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * A connected client; rejects with a clear message when Redis does not answer (no retry loop:
 * the spec fails at once).
 */
export async function connectRedis(options: { connectionName?: string } = {}): Promise<Redis> {
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null, connectTimeout: 3000, ...options });
  client.on('error', () => undefined); // the failure is reported by connect() below
  try {
    await client.connect();
    await client.ping();
  } catch (error) {
    client.disconnect();
    throw new Error(
      `These specs need Redis at ${REDIS_URL} and it does not answer (${(error as Error).message}). ` +
        'Start one: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no',
    );
  }
  return client;
}

/** A key prefix of its own for one spec file's run, so that runs never see each other's keys. */
export function uniquePrefix(name: string): string {
  return `rx-agent-spec:${name}:${randomUUID()}:`;
}

/** Deletes every key under `prefix` (SCAN, not KEYS: the server may be shared). */
export async function deleteKeys(client: Redis, prefix: string): Promise<void> {
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
  let cursor = '0';
  do {
    const [nextCursor, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = nextCursor;
    if (keys.length > 0) await client.del(...keys);
  } while (cursor !== '0');
}
