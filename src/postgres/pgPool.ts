/**
 * The part of a `pg` Pool that {@link postgresStore} uses: a `new pg.Pool(…)` is one. Declared
 * here so that the entry's types need neither `pg` nor `@types/pg`.
 *
 * @example
 * import pg from 'pg';
 * const pool: PgPool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 */
export interface PgPool {
  query(config: { name: string; text: string; values: unknown[] }): Promise<PgResult>;
  connect(): Promise<PgPoolClient>;
}

/**
 * A statement's result, as `pg` gives it.
 *
 * @example
 * const { rows, rowCount } = await pool.query({ name: 'one', text: 'SELECT 1 AS one', values: [] });
 */
export interface PgResult {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- pg's rows are untyped; the store checks what it reads
  readonly rows: any[];
  readonly rowCount: number | null;
}

/**
 * A client checked out of a {@link PgPool} (the store holds one for LISTEN).
 *
 * @example
 * const client: PgPoolClient = await pool.connect();
 * client.release();
 */
export interface PgPoolClient {
  query(text: string, values?: unknown[]): Promise<PgResult>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- an EventEmitter's listener
  on(event: string, listener: (...args: any[]) => void): unknown;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- an EventEmitter's listener
  removeListener(event: string, listener: (...args: any[]) => void): unknown;
  release(error?: Error | boolean): void;
}
