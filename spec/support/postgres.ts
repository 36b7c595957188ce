// The PostgreSQL of the specs: 127.0.0.1:5432, user postgres, database `test` (DATABASE_URL
// overrides). A spec never skips when it is missing: it fails, saying how to start one.
import { randomUUID } from 'node:crypto';
import pg from 'pg';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A pool that answers; rejects with a clear message when PostgreSQL does not. */
export async function connectPool(options: pg.PoolConfig = {}): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, connectionTimeoutMillis: 3000, ...options });
  pool.on('error', () => undefined); // an idle client's error: the next query reports it
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw new Error(
      `These specs need PostgreSQL at ${DATABASE_URL} and it does not answer (${(error as Error).message}). ` +
        'Start one (user postgres, trust auth, database test), or set DATABASE_URL.',
    );
  }
  return pool;
}

/** A schema name of its own for one spec file's run, so that runs never see each other's tables. */
export function uniqueSchema(name: string): string {
  return `spec_${name}_${randomUUID().replace(/-/g, '').slice(0, 16)}`.toLowerCase();
}

/** Drops a schema made by a spec, with everything in it. */
export async function dropSchema(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}
