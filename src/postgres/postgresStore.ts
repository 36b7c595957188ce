import { createHash } from 'node:crypto';
import { asyncScheduler, Observable, timer, type SchedulerLike, type Subscription } from 'rxjs';
import type { AgentResponse } from '../events/types';
import { withIds } from '../messages/message';
import { SessionConflictError, SessionDataError, storedTurns } from '../session/errors';
import { checkAt, checkLease, checkTurn, forkedError } from '../session/inMemorySessionStore';
import type { SessionAppend, SessionLeaseClaim, SessionTurn, StoredSession } from '../session/sessionStore';
import { foldTurns, SessionContent } from '../session/sessionTurns';
import type { StoredState } from '../state/stateBag';
import { isArray } from '../internal/isArray';
import { isScheduler } from '../internal/isScheduler';
import { show } from '../internal/show';
import { checkDelayMs } from '../internal/timers';
import { JournalConflictError, JournalFormatError, RunNotFoundError } from '../journal/errors';
import { checkAfter, checkOwner, checkRunId, checkSessionId, checkTtl } from '../journal/storeArguments';
import { checkRecord, recordText, type JournalEntry, type JournalRecord } from '../journal/records';
import type { AgentStore, LeaseClaim, RunLease, RunReceived } from '../journal/store';
import { idText, keyOf } from './keys';
import { LISTEN_RETRY_DELAYS_MS, Notifications, type Listening } from './notifications';
import type { PgPool } from './pgPool';
import { MIGRATIONS, quoted, SCHEMA_NAME, SCHEMA_VERSION } from './schema';
import { checkOptions, optionNames } from '../internal/optionNames';

/**
 * What {@link postgresStore} takes.
 *
 * @example
 * postgresStore({ pool, schema: 'agents', retainMs: 24 * 60 * 60 * 1000 });
 */
export interface PostgresStoreOptions {
  /**
   * A `pg` Pool. The store sends its statements through it and, while this process follows a run
   * (a live run hears its answers and cancels that way), holds one of its clients for LISTEN. The
   * pool stays yours: the store never ends it (end it after `store.close()`).
   */
  pool: PgPool;
  /**
   * The schema holding the store's tables (default `'rx_agent'`), created by `migrate()`: two
   * stores with different schemas share a database without seeing each other. Letters, digits
   * and `_`, up to 63; it also names the NOTIFY channel.
   */
  schema?: string;
  /**
   * How long a finished run's journal, answers and cancel flag are kept, in ms (default 7 days;
   * 0: dropped when the run ends; `Infinity`: kept). Past it the run reads as gone at once (`read`
   * answers undefined, `follow` subscribed from then on errors with `RunNotFoundError`, its id may
   * start a new run), but a follower subscribed before then still gets every record to the end:
   * the rows are kept 10 s more for those followers alone, then deleted by {@link PostgresStore.sweep}.
   */
  retainMs?: number;
  /**
   * How often the store sweeps by itself, in ms (default 60 000; 0: never, call `sweep()`
   * yourself; at most 2^31-1, setTimeout's longest delay). The timer starts when the store writes
   * the end of a run and stops at `close()`.
   */
  sweepEvery?: number;
  /**
   * Clock of the sweep timer, of the wait for a finished run's journal to expire, in `follow`, and
   * of the waits between tries of a listening connection and of the reads once it is back (default
   * `asyncScheduler`).
   */
  scheduler?: SchedulerLike;
}

/**
 * What {@link PostgresStore.migrate} found and left: the schema version before (0: no tables) and after.
 *
 * @example
 * const { from, to } = await store.migrate(); // { from: 0, to: 2 } on an empty database, then { from: 2, to: 2 }
 */
export interface MigrationResult {
  readonly from: number;
  readonly to: number;
}

/**
 * What one {@link PostgresStore.sweep} deleted.
 *
 * @example
 * const { runs, records } = await store.sweep();
 */
export interface SweepResult {
  /** Finished runs past their retention (with their answers). */
  readonly runs: number;
  /** Their journal records. */
  readonly records: number;
  /** Expired leases. */
  readonly leases: number;
}

/**
 * The store {@link postgresStore} makes: an {@link AgentStore} with the methods that manage its tables.
 *
 * @example
 * const store: PostgresStore = postgresStore({ pool });
 * await store.migrate();
 */
export interface PostgresStore extends AgentStore {
  /**
   * Creates the schema, tables and functions if they are missing (under an advisory lock: safe
   * from several processes at once) and resolves with the version found and the version left.
   * Fails when the tables were made by a newer version of this package.
   */
  migrate(): Promise<MigrationResult>;
  /**
   * Deletes the rows of finished runs past their retention, in batches of `batch` rows (default
   * 1000, one short transaction each), and expired leases. A run past its retention reads as gone
   * at once; its rows go at the first sweep 10 s or more later (a follower subscribed before then
   * still reads it to its end).
   */
  sweep(options?: { batch?: number }): Promise<SweepResult>;
  /**
   * Stops the sweep timer, completes what the store follows (`follow`, `answers`,
   * `cancellations`) and gives the listening connection back to the pool; resolves when it is
   * back and the statements in flight have settled (a run lets its lease go just after its end),
   * so `pool.end()` may follow. The pool is not ended: it is the caller's.
   */
  close(): Promise<void>;

  append(runId: string, expected: number, records: readonly JournalRecord[]): Promise<number>;
  read(runId: string, after?: number): Promise<readonly JournalEntry[] | undefined>;
  putAnswer(runId: string, response: AgentResponse): Promise<boolean>;
  requestCancel(runId: string): Promise<void>;
  acquireLease(runId: string, owner: string, ttlMs: number): Promise<LeaseClaim>;
  renewLease(runId: string, owner: string, ttlMs: number): Promise<boolean>;
  releaseLease(runId: string, owner: string): Promise<void>;
  getLease(runId: string): Promise<RunLease | undefined>;
  received(runId: string): Promise<RunReceived>;
  load(id: string): Promise<StoredSession | undefined>;
  revision(id: string): Promise<number | undefined>;
  appendTurn(id: string, expected: number, turn: SessionTurn): Promise<SessionAppend>;
  fork(parentId: string, forkId: string, at: number): Promise<void>;
  forks(id: string): Promise<readonly string[]>;
  delete(id: string): Promise<void>;
  acquireSession(id: string, owner: string, ttlMs: number): Promise<SessionLeaseClaim>;
  renewSession(id: string, owner: string, ttlMs: number): Promise<boolean>;
  releaseSession(id: string, owner: string): Promise<void>;
}

const DAY_MS = 86_400_000;
/** setTimeout's longest delay: a longer wait is made of several. */
const MAX_DELAY_MS = 2_147_483_647;
/**
 * How long past its retention a run's rows stay readable by the followers subscribed before then
 * (one whose first read, or whose read after a lost listening connection, comes late), in ms; the
 * sweep deletes them only after it (see {@link PostgresStore.sweep}).
 */
const TAIL_MS = 10_000;
/** Error codes of a missing schema, table or function: `migrate()` was not called. */
const MISSING = new Set(['3F000', '42P01', '42883']);

/** The options {@link postgresStore} knows (any other is refused). */
const POSTGRES_STORE_OPTIONS = optionNames<PostgresStoreOptions>({ pool: true, schema: true, retainMs: true, sweepEvery: true, scheduler: true });
/** The options {@link PostgresStore.sweep} knows. */
const SWEEP_OPTIONS = optionNames<NonNullable<Parameters<PostgresStore['sweep']>[0]>>({ batch: true });

/**
 * An `AgentStore` on PostgreSQL (through a `pg` Pool), for runs shared by any number of processes:
 * - a run is a row of `runs` (its id, last position, answer count, cancel flag, end and expiry);
 *   its journal is a row per record in `journal`, keyed by (run, position); an append is one
 *   function call, so one transaction, that checks the expected position under the run's row
 *   lock and writes the whole batch or nothing;
 * - answers (`answers`, the first per request kept) and cancels are written the same way; every
 *   write NOTIFYs the store's channel with the run's key and a number only, and the processes
 *   following the run read what is new (one LISTEN connection per store, for every run; no polling);
 * - a lease is a row of `leases` updated only on a condition on its owner and expiry, on the
 *   database's clock;
 * - a finished run reads as gone `retainMs` after its end (with 0: at its end), except to the
 *   followers subscribed before then, which read on to its end; `sweep()` (on a timer, or called)
 *   deletes its rows in batches;
 * - a session is a row of `sessions` (its revision; a fork's parent, fork point and copied state)
 *   and a row per turn in `session_turns`, keyed by (session, revision), one per run id: an append
 *   is one function call that checks the revision under the session's row lock; a fork shares its
 *   parent's first turns (a load reads them in the same statement); a session's lease is a row of
 *   `session_leases`, and its release is NOTIFYed, so a waiting run hears of it at once.
 *
 * Call `migrate()` once before use (at deploy or start-up), and `close()` at shutdown, before
 * `pool.end()`.
 *
 * @example
 * import pg from 'pg';
 * import { postgresStore } from 'rx-agent/postgres';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const store = postgresStore({ pool });
 * await store.migrate();
 * const agent = createAgent({ model, tools, store });
 * agent.run('Pay the invoice', { runId: 'run-1', onRequest: 'suspend' }).subscribe(render);
 * // in another process, later:
 * await agent.respond('run-1', { type: 'permission-response', requestId, approved: true });
 * agent.resume('run-1').subscribe(render);
 */
export function postgresStore(options: PostgresStoreOptions): PostgresStore {
  checkOptions('postgresStore', options, POSTGRES_STORE_OPTIONS);
  const { pool, schema = 'rx_agent', retainMs = 7 * DAY_MS, sweepEvery = 60_000, scheduler = asyncScheduler } = options;
  if (pool === null || typeof pool !== 'object' || typeof pool.query !== 'function' || typeof pool.connect !== 'function') {
    throw new TypeError(`postgresStore: 'pool' must be a pg Pool (new pg.Pool(…)), got ${show(pool)}`);
  }
  if (typeof schema !== 'string' || !SCHEMA_NAME.test(schema)) {
    throw new TypeError(`postgresStore: 'schema' must be letters, digits and _ (not first), up to 63, got ${show(schema)}`);
  }
  if (typeof retainMs !== 'number' || Number.isNaN(retainMs) || retainMs < 0 || (retainMs > Number.MAX_SAFE_INTEGER && retainMs !== Infinity)) {
    throw new TypeError(`postgresStore: 'retainMs' must be a number of ms from 0 to Number.MAX_SAFE_INTEGER, or Infinity, got ${show(retainMs)}`);
  }
  checkDelayMs('postgresStore', "'sweepEvery'", sweepEvery, 0, ' (0: never)'); // an interval's period: a timer must hold it
  if (!isScheduler(scheduler)) throw new TypeError("postgresStore: 'scheduler' must be an rxjs SchedulerLike");
  return new PgStore(pool, schema, retainMs === Infinity ? -1 : Math.ceil(retainMs), Math.ceil(sweepEvery), scheduler);
}

type Statement = (typeof STATEMENTS)[number];

/** The statements, by name, in schema `s` (quoted). */
function statements(s: string): Record<Statement, string> {
  const live = '(r.expires_at IS NULL OR r.expires_at > now())';
  // Still readable by a follower subscribed before its expiry: never touched by a sweep (its cutoff is the same).
  const tail = `(r.expires_at IS NULL OR r.expires_at > now() - interval '${TAIL_MS} milliseconds')`;
  const run = `r.id::text AS run, (extract(epoch FROM r.expires_at - now()) * 1000)::float8 AS expires_in`;
  const journal = `j.seq::float8 AS seq, j.record FROM ${s}.runs r LEFT JOIN ${s}.journal j ON j.run = r.id AND j.seq > $2`;
  const entries = `SELECT ${run}, ${journal}`;
  return {
    append: `SELECT ${s}.append($1, $2, $3, $4, $5, $6, $7)::float8 AS position`,
    read: `${entries} WHERE r.key = $1 AND ${live} ORDER BY j.seq`,
    // A follower's first read: the journal of the run of its key, and (without their journals,
    // `dropped`, first dropped first) the runs of its id ($3) past their retention whose id started
    // a new run since, still readable: one dropped since the follower subscribed was its run.
    follow: `SELECT ${run}, false AS dropped, ${journal} WHERE r.key = $1 AND ${tail}
      UNION ALL
      SELECT ${run}, true, NULL, NULL FROM ${s}.runs r
        WHERE r.key IS NULL AND r.run_id = $3 AND r.expires_at <= now() AND r.expires_at > now() - interval '${TAIL_MS} milliseconds'
      ORDER BY dropped, seq, expires_in`,
    readRun: `${entries} WHERE r.id = $1::bigint AND ${tail} ORDER BY j.seq`,
    answers: `SELECT a.n, a.response FROM ${s}.answers a JOIN ${s}.runs r ON r.id = a.run WHERE r.key = $1 AND ${live} AND a.n >= $2 ORDER BY a.n`,
    putAnswer: `SELECT ${s}.put_answer($1, $2, $3) AS n`,
    requestCancel: `SELECT ${s}.request_cancel($1) AS done`,
    cancelled: `SELECT r.cancelled FROM ${s}.runs r WHERE r.key = $1 AND ${live}`,
    // The answers and the cancel flag, as they stand together.
    received: `SELECT r.cancelled, a.response FROM ${s}.runs r LEFT JOIN ${s}.answers a ON a.run = r.id WHERE r.key = $1 AND ${live} ORDER BY a.n`,
    acquireLease: `SELECT o_acquired, o_owner, o_expires_at FROM ${s}.acquire_lease($1, $2, $3, $4)`,
    renewLease: `UPDATE ${s}.leases SET expires_at = now() + $3::float8 * interval '1 millisecond' WHERE key = $1 AND owner = $2 AND expires_at > now()`,
    releaseLease: `DELETE FROM ${s}.leases WHERE key = $1 AND owner = $2`,
    getLease: `SELECT owner, floor(extract(epoch FROM expires_at) * 1000)::float8 AS expires_at FROM ${s}.leases WHERE key = $1 AND expires_at > now()`,
    // The session and the sessions it was forked from (depth 1, 2…), each with the turns it shares
    // (a fork: the parent's first parent_revision), in one snapshot.
    load: `WITH RECURSIVE chain AS (
        SELECT 0 AS depth, key, session_id, revision, last_run, parent, forked_at, fork_state, parent_revision, revision AS upto
          FROM ${s}.sessions WHERE key = $1
        UNION ALL
        SELECT c.depth + 1, p.key, p.session_id, p.revision, p.last_run, p.parent, p.forked_at, p.fork_state, p.parent_revision, c.parent_revision
          FROM ${s}.sessions p JOIN chain c ON p.key = c.parent
      )
      SELECT c.depth, c.session_id, c.revision, c.last_run, c.forked_at, c.fork_state, t.turn
        FROM chain c LEFT JOIN ${s}.session_turns t ON t.session = c.key AND t.seq <= c.upto
        ORDER BY c.depth DESC, t.seq`,
    revision: `SELECT revision FROM ${s}.sessions WHERE key = $1`,
    appendTurn: `SELECT o_status, o_revision FROM ${s}.append_turn($1, $2, $3, $4, $5, $6)`,
    fork: `SELECT ${s}.fork_session($1, $2, $3, $4, $5, $6) AS status`,
    forks: `SELECT session_id FROM ${s}.sessions WHERE parent = $1 ORDER BY id`,
    deleteSession: `SELECT ${s}.delete_session($1) AS forks`,
    acquireSession: `SELECT o_acquired, o_owner, o_expires_at FROM ${s}.acquire_session($1, $2, $3, $4)`,
    renewSession: `UPDATE ${s}.session_leases SET expires_at = now() + $3::float8 * interval '1 millisecond' WHERE key = $1 AND owner = $2 AND expires_at > now()`,
    releaseSession: `SELECT ${s}.release_session($1, $2) AS released`,
    sweep: `SELECT o_records, o_runs, o_leases FROM ${s}.sweep($1, $2)`,
  };
}

const STATEMENTS = [
  'append',
  'read',
  'follow',
  'readRun',
  'answers',
  'putAnswer',
  'requestCancel',
  'cancelled',
  'received',
  'acquireLease',
  'renewLease',
  'releaseLease',
  'getLease',
  'load',
  'revision',
  'appendTurn',
  'fork',
  'forks',
  'deleteSession',
  'acquireSession',
  'renewSession',
  'releaseSession',
  'sweep',
] as const;

/** A run's journal as one read finds it: the run's row id, the ms left of its retention (null: kept; below 0: past it), the entries. */
interface JournalRead {
  readonly run: string;
  readonly expiresIn: number | null;
  readonly entries: JournalEntry[];
}

/** A run of an id past its retention, keyless since its id started a new run: its row id, the ms left of its retention (below 0). */
interface DroppedRun {
  readonly run: string;
  readonly expiresIn: number;
}

/** A row of a journal read: the run's, and a record's (none when the run has none after the position read from). */
interface JournalRow {
  run: string;
  expires_in: number | null;
  seq: number | null;
  record: string | null;
}

/** The journal the rows of one run make (undefined: no rows, no run). */
function journalOf(runId: string, rows: readonly JournalRow[]): JournalRead | undefined {
  if (rows.length === 0) return undefined;
  const entries: JournalEntry[] = [];
  for (const row of rows) if (row.seq !== null) entries.push({ position: row.seq, record: parseRecord(runId, row.seq, row.record as string) });
  return { run: rows[0].run, expiresIn: rows[0].expires_in, entries };
}

class PgStore implements PostgresStore {
  private readonly sql: Record<Statement, string>;
  /** Prepared-statement names (per connection, by pg): unique per schema, short enough not to be truncated. */
  private readonly names: Record<Statement, string>;
  private readonly notifications: Notifications;
  private readonly schemaName: string;
  private sweeper: { unsubscribe(): void } | undefined;
  private sweeping = false;
  private closed = false;
  /** Statements sent and not settled: `close()` waits for them (a run lets its lease go just after its end). */
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(
    private readonly pool: PgPool,
    private readonly schema: string,
    /** ms; -1: kept. */
    private readonly retainMs: number,
    private readonly sweepEvery: number,
    private readonly scheduler: SchedulerLike,
  ) {
    this.schemaName = quoted(schema);
    this.sql = statements(this.schemaName);
    const tag = createHash('sha256').update(schema).digest('hex').slice(0, 12);
    this.names = Object.fromEntries(STATEMENTS.map((name) => [name, `rxa_${tag}_${name}`])) as Record<Statement, string>;
    this.notifications = new Notifications(pool, `LISTEN ${this.schemaName}`, scheduler);
  }

  private query<R>(name: Statement, values: unknown[]): Promise<{ rows: R[]; rowCount: number | null }> {
    const sent = this.pool.query({ name: this.names[name], text: this.sql[name], values });
    this.inFlight.add(sent);
    const forget = () => void this.inFlight.delete(sent);
    sent.then(forget, forget);
    return sent.catch((error: unknown) => {
      throw this.explain(error);
    });
  }

  /** A missing table or function says what to do. */
  private explain(error: unknown): unknown {
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code === 'string' && MISSING.has(code)) {
      return new Error(`postgresStore: schema "${this.schema}" does not hold this store's tables; call store.migrate() first (${(error as Error).message})`, {
        cause: error,
      });
    }
    return error;
  }

  async migrate(): Promise<MigrationResult> {
    const s = this.schemaName;
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`rx-agent:${this.schema}`]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
      await client.query(`CREATE TABLE IF NOT EXISTS ${s}.schema_version (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now())`);
      const { rows } = await client.query(`SELECT max(version) AS version FROM ${s}.schema_version`);
      const from = (rows[0] as { version: number | null } | undefined)?.version ?? 0;
      if (from > SCHEMA_VERSION) {
        throw new Error(
          `postgresStore: schema "${this.schema}" is at version ${from}, made by a newer rx-agent; this one knows up to ${SCHEMA_VERSION} (upgrade it)`,
        );
      }
      for (let version = from + 1; version <= SCHEMA_VERSION; version++) {
        await client.query(MIGRATIONS[version - 1](s, this.schema));
        await client.query(`INSERT INTO ${s}.schema_version (version) VALUES ($1)`, [version]);
      }
      await client.query('COMMIT');
      return { from, to: SCHEMA_VERSION };
    } catch (error) {
      await client.query('ROLLBACK').catch((rollback: Error) => (broken = rollback));
      throw error;
    } finally {
      // A connection that cannot roll back is not given back to the pool for reuse.
      client.release(broken);
    }
  }

  async sweep(options: { batch?: number } = {}): Promise<SweepResult> {
    checkOptions('sweep', options, SWEEP_OPTIONS);
    const { batch = 1000 } = options;
    if (typeof batch !== 'number' || !Number.isSafeInteger(batch) || batch < 1 || batch > 2 ** 31 - 1) {
      throw new TypeError(`sweep: 'batch' must be an integer from 1 to 2^31 - 1, got ${show(batch)}`);
    }
    const total = { runs: 0, records: 0, leases: 0 };
    for (;;) {
      const { rows } = await this.query<{ o_records: number; o_runs: number; o_leases: number }>('sweep', [batch, TAIL_MS]);
      const { o_records, o_runs, o_leases } = rows[0];
      total.records += o_records;
      total.runs += o_runs;
      total.leases += o_leases;
      if (o_records < batch && o_runs < batch && o_leases < batch) return total;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.sweeper?.unsubscribe();
    this.sweeper = undefined;
    await Promise.all([this.notifications.close(), Promise.allSettled([...this.inFlight])]);
  }

  /** Starts the sweep timer (at the first end this store writes). */
  private startSweeping(): void {
    if (this.sweeper || this.closed || this.sweepEvery === 0) return;
    const tick = () => {
      if (this.sweeping) return;
      this.sweeping = true;
      // A failed sweep is tried again at the next tick.
      this.sweep().then(
        () => (this.sweeping = false),
        () => (this.sweeping = false),
      );
    };
    if (this.scheduler === asyncScheduler) {
      // Housekeeping must not keep a process alive whose pool the app has ended without close().
      const interval = setInterval(tick, this.sweepEvery);
      interval.unref();
      this.sweeper = { unsubscribe: () => clearInterval(interval) };
    } else {
      this.sweeper = timer(this.sweepEvery, this.sweepEvery, this.scheduler).subscribe(tick);
    }
  }

  async append(runId: string, expected: number, records: readonly JournalRecord[]): Promise<number> {
    checkRunId('append', runId);
    if (typeof expected !== 'number' || !Number.isSafeInteger(expected) || expected < 0) {
      throw new TypeError(`append: the expected position must be an integer >= 0, got ${show(expected)}`);
    }
    if (!isArray(records)) throw new TypeError(`append: records must be an array, got ${show(records)}`);
    // Serialised first, all of them: a record that cannot be written leaves the journal untouched.
    const texts = new Array<string>(records.length);
    let ends = false;
    for (let i = 0; i < records.length; i++) {
      const record = records[i];
      if (record === null || typeof record !== 'object') throw new TypeError(`append: record ${i} is not a journal record: ${show(record)}`);
      texts[i] = recordText(runId, record);
      if (record.kind === 'end') ends = true;
    }
    // As JSON lines: one text, not an array literal for the driver to escape record by record.
    const { rows } = await this.query<{ position: number }>('append', [
      keyOf(runId),
      idText(runId),
      expected,
      texts.length,
      texts.join('\n'),
      ends,
      this.retainMs,
    ]);
    const position = rows[0].position;
    if (position < 0) throw new JournalConflictError(runId, expected, -1 - position);
    if (ends && texts.length > 0) this.startSweeping();
    return position;
  }

  async read(runId: string, after = 0): Promise<readonly JournalEntry[] | undefined> {
    checkRunId('read', runId);
    checkAfter('read', after);
    return (await this.readJournal(runId, 'read', keyOf(runId), after))?.entries;
  }

  /**
   * The journal after `after`: with `read`, by the run's key (undefined: none, or past its
   * retention); with `readRun`, by its row id (undefined: deleted, or past its retention for
   * {@link TAIL_MS}).
   */
  private async readJournal(runId: string, statement: 'read' | 'readRun', key: Buffer | string, after: number): Promise<JournalRead | undefined> {
    const { rows } = await this.query<JournalRow>(statement, [key, after]);
    return journalOf(runId, rows);
  }

  /**
   * A follower's first read: the journal after `after` of the run of the key, past its retention
   * too for {@link TAIL_MS} (undefined: none, or past that), and the runs of the id past their
   * retention that lost their key to a new run since, still readable, first dropped first.
   */
  private async readFollow(runId: string, key: Buffer, after: number): Promise<{ journal: JournalRead | undefined; dropped: DroppedRun[] }> {
    const { rows } = await this.query<JournalRow & { dropped: boolean }>('follow', [key, after, idText(runId)]);
    const start = rows.findIndex((row) => row.dropped);
    const keyed = start === -1 ? rows : rows.slice(0, start);
    const dropped = start === -1 ? [] : rows.slice(start).map(({ run, expires_in }) => ({ run, expiresIn: expires_in as number }));
    return { journal: journalOf(runId, keyed), dropped };
  }

  /**
   * Listens for a follower: each notification of the run to `message`, a read once listening and
   * after the connection came back (`retried`: that one is tried again while it fails, see
   * {@link PgStore.retried}).
   */
  private listenTo(
    key: Buffer,
    subscriber: { readonly closed: boolean; error(e: unknown): void; complete(): void },
    message: (kind: string, n: number) => void,
    read: (retried: boolean) => void,
  ): Listening {
    const listening = this.notifications.listen(key.toString('hex'), {
      message,
      resync: () => read(true),
      lost: (error) => subscriber.error(error),
      end: () => subscriber.complete(),
    });
    listening.ready.then(
      () => {
        if (!subscriber.closed) read(false);
      },
      (error: unknown) => subscriber.error(this.explain(error)),
    );
    return listening;
  }

  /**
   * `attempt()`, tried again while it fails after each of {@link LISTEN_RETRY_DELAYS_MS} on the
   * scheduler, as LISTEN is: once listening again after a restart, a failover or
   * pg_terminate_backend, the pool may hand a follower's read an idle connection that was ended
   * too (and drop it with the failure; the next try gets another). Rejects with the last failure;
   * no more tries once `follower` is closed.
   */
  private retried<T>(attempt: () => Promise<T>, follower: Subscription): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const tryAt = (retry: number) => {
        attempt().then(resolve, (error: unknown) => {
          if (follower.closed || retry >= LISTEN_RETRY_DELAYS_MS.length) return reject(error);
          // Cancelled with the follower; once done, it leaves it.
          follower.add(timer(LISTEN_RETRY_DELAYS_MS[retry], this.scheduler).subscribe(() => tryAt(retry + 1)));
        });
      };
      tryAt(0);
    });
  }

  follow(runId: string, after: number): Observable<JournalEntry> {
    return new Observable<JournalEntry>((subscriber) => {
      checkRunId('follow', runId);
      checkAfter('follow', after);
      const key = keyOf(runId);
      let next = after + 1;
      /** The run's row, once read: later reads go by it (a run past its retention is still read for {@link TAIL_MS}). */
      let run: string | undefined;
      const subscribedAt = performance.now();
      let reading = false;
      /** Something was notified while reading: read again (`againRetried`: the connection came back, a read to try again while it fails). */
      let again = false;
      let againRetried = false;
      let expiry: Subscription | undefined;
      const fail = (error: unknown) => subscriber.error(error);

      const read = (retried = false) => {
        if (reading) {
          again = true;
          againRetried ||= retried;
          return;
        }
        reading = true;
        again = againRetried = false;
        const first = run === undefined;
        const attempt = (): Promise<{ journal: JournalRead | undefined; dropped: readonly DroppedRun[] }> =>
          run === undefined
            ? this.readFollow(runId, key, next - 1)
            : this.readJournal(runId, 'readRun', run, next - 1).then((journal) => ({ journal, dropped: [] }));
        (retried ? this.retried(attempt, subscriber) : attempt()).then(({ journal, dropped }) => {
          reading = false;
          if (subscriber.closed) return;
          if (first) {
            // A run past its retention is read by the followers subscribed before its expiry only (give
            // or take the read's trip back, and a ms of rounding): for a later one it was gone already.
            const age = performance.now() - subscribedAt + 1;
            // The first run of the id dropped since it subscribed is the follower's, though a new run holds the key now.
            const own = dropped.find((candidate) => -candidate.expiresIn <= age);
            if (own) {
              run = own.run;
              return read(retried || againRetried);
            }
            if (journal && journal.expiresIn !== null && -journal.expiresIn > age) journal = undefined;
          }
          if (journal === undefined) return first ? fail(new RunNotFoundError(runId)) : subscriber.complete();
          run = journal.run;
          for (const entry of journal.entries) {
            if (subscriber.closed) return;
            if (entry.position !== next) continue;
            next++;
            subscriber.next(entry);
            if (entry.record.kind === 'end' && !subscriber.closed) awaitExpiry(journal.expiresIn);
          }
          if (again) read(againRetried);
        }, fail);
      };
      /** After `end`, the journal is dropped at its expiry: complete then. */
      const awaitExpiry = (ms: number | null) => {
        if (expiry || ms === null) return; // kept
        const wait = (left: number) => {
          expiry = timer(Math.max(0, Math.min(left, MAX_DELAY_MS)), this.scheduler).subscribe(() => {
            if (left > MAX_DELAY_MS) wait(left - MAX_DELAY_MS);
            else subscriber.complete();
          });
        };
        wait(ms);
      };

      const listening = this.listenTo(
        key,
        subscriber,
        (kind, n) => {
          if (kind === 'j' && n >= next) read();
        },
        read,
      );
      return () => {
        listening.close();
        expiry?.unsubscribe();
      };
    });
  }

  async putAnswer(runId: string, response: AgentResponse): Promise<boolean> {
    checkRunId('putAnswer', runId);
    if (response === null || typeof response !== 'object' || typeof response.requestId !== 'string') {
      throw new TypeError(`putAnswer: a response must be an object with a string requestId, got ${show(response)}`);
    }
    const text = JSON.stringify(response);
    const { rows } = await this.query<{ n: number }>('putAnswer', [keyOf(runId), keyOf(response.requestId), text]);
    return rows[0].n !== 0;
  }

  async received(runId: string): Promise<RunReceived> {
    checkRunId('received', runId);
    const { rows } = await this.query<{ cancelled: boolean; response: string | null }>('received', [keyOf(runId)]);
    const answers: AgentResponse[] = [];
    for (const row of rows) if (row.response !== null) answers.push(parseResponse(runId, answers.length + 1, row.response));
    return { answers, cancelled: rows.length > 0 && rows[0].cancelled };
  }

  answers(runId: string): Observable<AgentResponse> {
    return new Observable<AgentResponse>((subscriber) => {
      checkRunId('answers', runId);
      const key = keyOf(runId);
      let next = 1;
      let reading = false;
      let again = false;
      let againRetried = false;
      const read = (retried = false) => {
        if (reading) {
          again = true;
          againRetried ||= retried;
          return;
        }
        reading = true;
        again = againRetried = false;
        const attempt = () => this.query<{ n: number; response: string }>('answers', [key, next]);
        (retried ? this.retried(attempt, subscriber) : attempt()).then(
          ({ rows }) => {
            reading = false;
            for (const { n, response } of rows) {
              if (subscriber.closed) return;
              if (n !== next) continue;
              next++;
              let answer: AgentResponse;
              try {
                answer = parseResponse(runId, n, response);
              } catch (error) {
                return subscriber.error(error); // a stored answer that is no response: an error, not a rejection
              }
              subscriber.next(answer);
            }
            if (again && !subscriber.closed) read(againRetried);
          },
          (error: unknown) => subscriber.error(error),
        );
      };
      const listening = this.listenTo(
        key,
        subscriber,
        (kind, n) => {
          if (kind === 'a' && n >= next) read();
        },
        read,
      );
      return () => listening.close();
    });
  }

  async requestCancel(runId: string): Promise<void> {
    checkRunId('requestCancel', runId);
    await this.query('requestCancel', [keyOf(runId)]);
  }

  cancellations(runId: string): Observable<void> {
    return new Observable<void>((subscriber) => {
      checkRunId('cancellations', runId);
      const key = keyOf(runId);
      const cancelled = () => {
        subscriber.next();
        subscriber.complete();
      };
      const check = (retried: boolean) => {
        const attempt = () => this.query<{ cancelled: boolean }>('cancelled', [key]);
        (retried ? this.retried(attempt, subscriber) : attempt()).then(
          ({ rows }) => {
            if (rows[0]?.cancelled === true && !subscriber.closed) cancelled();
          },
          (error: unknown) => subscriber.error(error),
        );
      };
      const listening = this.listenTo(
        key,
        subscriber,
        (kind) => {
          if (kind === 'c') cancelled();
        },
        check,
      );
      return () => listening.close();
    });
  }

  async acquireLease(runId: string, owner: string, ttlMs: number): Promise<LeaseClaim> {
    checkRunId('acquireLease', runId);
    checkOwner('acquireLease', owner);
    const ttl = checkTtl('acquireLease', ttlMs);
    const { rows } = await this.query<{ o_acquired: boolean; o_owner: string; o_expires_at: number }>('acquireLease', [
      keyOf(runId),
      idText(runId),
      JSON.stringify(owner),
      ttl,
    ]);
    const { o_acquired, o_owner, o_expires_at } = rows[0];
    return { acquired: o_acquired, lease: { owner: parseOwner(o_owner), expiresAt: o_expires_at } };
  }

  async renewLease(runId: string, owner: string, ttlMs: number): Promise<boolean> {
    checkRunId('renewLease', runId);
    checkOwner('renewLease', owner);
    const ttl = checkTtl('renewLease', ttlMs);
    return (await this.query('renewLease', [keyOf(runId), JSON.stringify(owner), ttl])).rowCount === 1;
  }

  async releaseLease(runId: string, owner: string): Promise<void> {
    checkRunId('releaseLease', runId);
    checkOwner('releaseLease', owner);
    await this.query('releaseLease', [keyOf(runId), JSON.stringify(owner)]);
  }

  async getLease(runId: string): Promise<RunLease | undefined> {
    checkRunId('getLease', runId);
    const { rows } = await this.query<{ owner: string; expires_at: number }>('getLease', [keyOf(runId)]);
    return rows.length === 0 ? undefined : { owner: parseOwner(rows[0].owner), expiresAt: rows[0].expires_at };
  }

  /**
   * A session as its turns and those it shares make it, undefined when there is none; with `at`,
   * also its state as a fork at `at` copies it.
   */
  private async sessionContent(id: string, at?: number) {
    const { rows } = await this.query<{
      depth: number;
      session_id: string;
      revision: number;
      last_run: string | null;
      forked_at: number | null;
      fork_state: string | null;
      turn: string | null;
    }>('load', [keyOf(id)]);
    if (rows.length === 0) return undefined;
    let content = new SessionContent([], {});
    let folded: ReturnType<typeof foldTurns> | undefined;
    for (let i = 0; i < rows.length;) {
      const level = rows[i];
      if (level.forked_at !== null) {
        const { messages } = content;
        messages.length = Math.min(messages.length, level.forked_at);
        content = new SessionContent(messages, parseStored<Record<string, StoredState>>(id, level.fork_state ?? '{}', 'its fork record'));
      }
      const turns: SessionTurn[] = [];
      for (; i < rows.length && rows[i].depth === level.depth; i++) {
        const text = rows[i].turn;
        if (text !== null) turns.push(parseStored<SessionTurn>(id, text, 'a turn'));
      }
      // Each level's state as of `at` carries down: a fork inside the history it shares reads its parent's.
      folded = storedTurns(id, () => foldTurns(content, turns, at, folded?.stateAt));
      content = folded.content;
    }
    const own = rows[rows.length - 1];
    if (own.depth !== 0 || !folded) throw new Error(`Session '${id}' in the store could not be read whole`);
    const parent = own.forked_at === null ? undefined : rows.find((row) => row.depth === 1);
    return {
      revision: own.revision,
      lastRunId: own.last_run === null ? undefined : idOf(own.last_run),
      parent: parent && own.forked_at !== null ? { id: idOf(parent.session_id), at: own.forked_at } : undefined,
      folded,
    };
  }

  async load(id: string): Promise<StoredSession | undefined> {
    checkSessionId('load', id);
    const loaded = await this.sessionContent(id);
    if (!loaded) return undefined;
    const { content } = loaded.folded;
    const base: StoredSession = { version: 1 as const, id, messages: withIds(content.messages), state: content.state, revision: loaded.revision };
    const withRun = loaded.lastRunId === undefined ? base : { ...base, lastRunId: loaded.lastRunId };
    return loaded.parent ? { ...withRun, parentId: loaded.parent.id, forkedAt: loaded.parent.at } : withRun;
  }

  async revision(id: string): Promise<number | undefined> {
    checkSessionId('revision', id);
    const { rows } = await this.query<{ revision: number }>('revision', [keyOf(id)]);
    return rows.length === 0 ? undefined : rows[0].revision;
  }

  async appendTurn(id: string, expected: number, turn: SessionTurn): Promise<SessionAppend> {
    checkSessionId('appendTurn', id);
    checkTurn(expected, turn);
    if (expected > MAX_REVISION) throw new TypeError(`appendTurn: the expected revision must be at most ${MAX_REVISION}, got ${expected}`);
    const { runId, messages, state } = turn;
    const text = JSON.stringify(turn.replace === true ? { runId, messages, state, replace: true } : { runId, messages, state });
    const { rows } = await this.query<{ o_status: number; o_revision: number }>('appendTurn', [
      keyOf(id),
      idText(id),
      expected,
      keyOf(runId),
      idText(runId),
      text,
    ]);
    const { o_status, o_revision } = rows[0];
    if (o_status === 0) throw new SessionConflictError(id, expected, o_revision);
    return { revision: o_revision, appended: o_status === 1 };
  }

  async fork(parentId: string, forkId: string, at: number): Promise<void> {
    checkSessionId('fork', parentId);
    checkSessionId('fork', forkId);
    const parent = await this.sessionContent(parentId, typeof at === 'number' ? at : undefined);
    if (!parent) throw new TypeError(`fork: no session '${parentId}' in the store`);
    checkAt(at, parent.folded.content.messages.length);
    const { rows } = await this.query<{ status: number }>('fork', [keyOf(parentId), parent.revision, at, parent.folded.stateAt, keyOf(forkId), idText(forkId)]);
    const status = rows[0].status;
    if (status === 0) throw new TypeError(`fork: no session '${parentId}' in the store`);
    if (status === 2) throw new SessionConflictError(forkId, 0, 0, `Session '${forkId}' exists already`);
  }

  async forks(id: string): Promise<readonly string[]> {
    checkSessionId('forks', id);
    const { rows } = await this.query<{ session_id: string }>('forks', [keyOf(id)]);
    return rows.map((row) => idOf(row.session_id));
  }

  async delete(id: string): Promise<void> {
    checkSessionId('delete', id);
    const { rows } = await this.query<{ forks: string[] | null }>('deleteSession', [keyOf(id)]);
    const forks = rows[0].forks;
    if (forks !== null) throw new SessionConflictError(id, 0, 0, forkedError(id, forks.map(idOf)));
  }

  async acquireSession(id: string, owner: string, ttlMs: number): Promise<SessionLeaseClaim> {
    checkLease('acquireSession', id, owner, ttlMs);
    const { rows } = await this.query<{ o_acquired: boolean; o_owner: string; o_expires_at: number }>('acquireSession', [
      keyOf(id),
      idText(id),
      JSON.stringify(owner),
      Math.ceil(ttlMs),
    ]);
    const { o_acquired, o_owner, o_expires_at } = rows[0];
    return { acquired: o_acquired, lease: { owner: parseOwner(o_owner), expiresAt: o_expires_at } };
  }

  async renewSession(id: string, owner: string, ttlMs: number): Promise<boolean> {
    checkLease('renewSession', id, owner, ttlMs);
    return (await this.query('renewSession', [keyOf(id), JSON.stringify(owner), Math.ceil(ttlMs)])).rowCount === 1;
  }

  async releaseSession(id: string, owner: string): Promise<void> {
    checkSessionId('releaseSession', id);
    checkOwner('releaseSession', owner);
    await this.query('releaseSession', [keyOf(id), JSON.stringify(owner)]);
  }

  sessionReleases(id: string): Observable<void> {
    return new Observable<void>((subscriber) => {
      checkSessionId('sessionReleases', id);
      const listening = this.notifications.listen(keyOf(id).toString('hex'), {
        message: (kind) => {
          if (kind === 'r') subscriber.next();
        },
        // Back after a lost connection: a release may have been missed; the waiter tries again.
        resync: () => subscriber.next(),
        lost: (error) => subscriber.error(error),
        end: () => subscriber.complete(),
      });
      listening.ready.then(
        () => {
          if (!subscriber.closed) subscriber.next();
        },
        (error: unknown) => subscriber.error(this.explain(error)),
      );
      return () => listening.close();
    });
  }
}

/** A session's revision fits a PostgreSQL integer. */
const MAX_REVISION = 2 ** 31 - 2;

/** An id back from the text {@link idText} made of it. */
function idOf(text: string): string {
  return JSON.parse(`"${text}"`) as string;
}

function parseStored<T>(id: string, text: string, what: string): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new SessionDataError(id, `Session '${id}' in the store: ${what} is not JSON`);
  }
}

/** Parses and checks one record read back; a text that is not JSON is a {@link JournalFormatError}. */
function parseRecord(runId: string, position: number, text: string): JournalRecord {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new JournalFormatError(runId, position, 'the record is not JSON');
  }
  return checkRecord(runId, position, value);
}

function parseResponse(runId: string, n: number, text: string): AgentResponse {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (value === null || typeof value !== 'object' || typeof (value as { requestId?: unknown }).requestId !== 'string') {
    throw new Error(`Run '${runId}': answer ${n} in the store is not a response`);
  }
  return value as AgentResponse;
}

/** A lease's owner is kept as JSON text (an owner may hold NUL or unpaired surrogates). */
function parseOwner(text: string): string {
  try {
    const owner: unknown = JSON.parse(text);
    if (typeof owner === 'string') return owner;
  } catch {
    // reported below
  }
  throw new Error(`A run's lease in the store holds ${show(text)}, not an owner written by this store`);
}
