/** A schema name the store accepts: an unquoted PostgreSQL identifier (it also names the channel). */
export const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** A checked schema name, quoted as an identifier. */
export const quoted = (schema: string): string => `"${schema}"`;

/** A PL/pgSQL statement that NOTIFYs `channel` with `payload` (an SQL expression) at commit. */
const notifyOn = (channel: string) => (payload: string) => `PERFORM pg_notify('${channel}', ${payload});`;

/**
 * The `append` function (`create`: `CREATE`, or `CREATE OR REPLACE` in a later version), doing
 * `pastRetention` with the row `v_id` of a run past its retention before a new run of its id, and
 * timing a run's end with `endedAt` (an SQL expression).
 */
function appendFunction(s: string, notify: (payload: string) => string, create: string, pastRetention: string, endedAt: string): string {
  return `-- Appends p_count records, given as JSON lines (JSON text never holds a raw newline). The new
-- last position, or -1 - the actual one when the journal is not at p_expected (a conflict).
${create} FUNCTION ${s}.append(p_key bytea, p_run_id text, p_expected bigint, p_count integer, p_lines text, p_ends boolean, p_retain_ms double precision)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  n integer := p_count;
  v_id bigint;
  v_position bigint;
  v_ended timestamptz;
  v_expires timestamptz;
BEGIN
  SELECT id, position, ended_at, expires_at INTO v_id, v_position, v_ended, v_expires FROM ${s}.runs WHERE key = p_key FOR UPDATE;
  IF v_expires IS NOT NULL AND v_expires <= now() THEN
    ${pastRetention}
    v_id := NULL;
  END IF;
  IF v_id IS NULL THEN
    IF p_expected <> 0 THEN RETURN -1; END IF;
    IF n = 0 THEN RETURN 0; END IF;
    INSERT INTO ${s}.runs (key, run_id) VALUES (p_key, p_run_id) ON CONFLICT (key) DO NOTHING RETURNING id INTO v_id;
    IF v_id IS NULL THEN
      -- Created meanwhile by another append.
      SELECT position INTO v_position FROM ${s}.runs WHERE key = p_key;
      RETURN -1 - coalesce(v_position, 0);
    END IF;
  ELSIF v_position <> p_expected OR (v_ended IS NOT NULL AND n > 0) THEN
    RETURN -1 - v_position;
  ELSIF n = 0 THEN
    RETURN v_position;
  END IF;
  INSERT INTO ${s}.journal (run, seq, record)
    SELECT v_id, p_expected + o, t FROM unnest(string_to_array(p_lines, E'\\n')) WITH ORDINALITY AS u (t, o);
  IF p_ends THEN
    UPDATE ${s}.runs SET position = p_expected + n, ended_at = ${endedAt},
      expires_at = CASE WHEN p_retain_ms < 0 THEN NULL ELSE ${endedAt} + p_retain_ms * interval '1 millisecond' END
    WHERE id = v_id;
  ELSE
    UPDATE ${s}.runs SET position = p_expected + n WHERE id = v_id;
  END IF;
  ${notify(`'j' || encode(p_key, 'hex') || ':' || (p_expected + n)`)}
  RETURN p_expected + n;
END $$;
`;
}

/** Version 1: a run past its retention is deleted when its id starts a new run. */
const DROP_PAST_RETENTION = (s: string) => `-- Past its retention: the run is gone, and its id free for a new one.
    DELETE FROM ${s}.runs WHERE id = v_id;`;

/**
 * The tables and functions of version 1 in schema `s` (already quoted; validated by
 * {@link SCHEMA_NAME}, so no text of a caller is ever spliced into SQL), notifying on `channel`.
 *
 * Ids are never keys as they are: a run's, a request's and a session's key is the SHA-256 of the
 * id's JSON text (an id may be a megabyte long, more than a btree entry holds, and may hold NUL or
 * unpaired surrogates, which PostgreSQL text cannot). The id is kept beside it, readable.
 * Records, answers and messages are kept as JSON text: JSON escapes NUL (`\u0000`), which `jsonb`
 * refuses, and keeps every number and key order as written.
 *
 * Every write is one function call, so one statement and one transaction: an append checks the
 * expected position under the run's row lock and writes the whole batch or nothing, and its
 * NOTIFY goes out at commit, never before the rows are visible.
 */
export function schemaSql(s: string, channel: string): string {
  const notify = notifyOn(channel);
  const live = `(expires_at IS NULL OR expires_at > now())`;
  // A run's lease and a session's: the same function on their own table.
  const acquire = (
    name: string,
    table: string,
    idColumn: string,
  ) => `CREATE FUNCTION ${s}.${name}(p_key bytea, p_${idColumn} text, p_owner text, p_ttl_ms double precision,
  OUT o_acquired boolean, OUT o_owner text, OUT o_expires_at double precision)
LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    INSERT INTO ${s}.${table} AS l (key, ${idColumn}, owner, expires_at)
      VALUES (p_key, p_${idColumn}, p_owner, now() + p_ttl_ms * interval '1 millisecond')
      ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
        WHERE l.owner = EXCLUDED.owner OR l.expires_at <= now()
      RETURNING true, l.owner, floor(extract(epoch FROM l.expires_at) * 1000) INTO o_acquired, o_owner, o_expires_at;
    IF FOUND THEN RETURN; END IF;
    SELECT false, l.owner, floor(extract(epoch FROM l.expires_at) * 1000) INTO o_acquired, o_owner, o_expires_at
      FROM ${s}.${table} l WHERE l.key = p_key;
    IF FOUND THEN RETURN; END IF;
    -- Released between the two statements: try again.
  END LOOP;
END $$;
`;
  return `
CREATE TABLE ${s}.runs (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  key bytea NOT NULL UNIQUE,
  run_id text NOT NULL,
  position bigint NOT NULL DEFAULT 0,
  answers integer NOT NULL DEFAULT 0,
  cancelled boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  ended_at timestamptz,
  expires_at timestamptz
);
CREATE INDEX runs_expires_at ON ${s}.runs (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE ${s}.journal (
  run bigint NOT NULL REFERENCES ${s}.runs (id) ON DELETE CASCADE,
  seq bigint NOT NULL,
  record text NOT NULL,
  PRIMARY KEY (run, seq)
);

CREATE TABLE ${s}.answers (
  run bigint NOT NULL REFERENCES ${s}.runs (id) ON DELETE CASCADE,
  n integer NOT NULL,
  request_key bytea NOT NULL,
  response text NOT NULL,
  PRIMARY KEY (run, n),
  UNIQUE (run, request_key)
);

CREATE TABLE ${s}.leases (
  key bytea PRIMARY KEY,
  run_id text NOT NULL,
  owner text NOT NULL,
  expires_at timestamptz NOT NULL
);

-- A session is a row (its revision, last run, and for a fork: its parent, the parent's revision
-- and message count shared, the state copied) and a row per turn, keyed by (session, seq).
CREATE TABLE ${s}.sessions (
  id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
  key bytea PRIMARY KEY,
  session_id text NOT NULL,
  revision integer NOT NULL DEFAULT 0,
  last_run text,
  parent bytea REFERENCES ${s}.sessions (key),
  parent_revision integer,
  forked_at integer,
  fork_state text,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_parent ON ${s}.sessions (parent, id) WHERE parent IS NOT NULL;

CREATE TABLE ${s}.session_turns (
  session bytea NOT NULL REFERENCES ${s}.sessions (key) ON DELETE CASCADE,
  seq integer NOT NULL,
  run_key bytea NOT NULL,
  turn text NOT NULL,
  PRIMARY KEY (session, seq),
  UNIQUE (session, run_key)
);

CREATE TABLE ${s}.session_leases (
  key bytea PRIMARY KEY,
  session_id text NOT NULL,
  owner text NOT NULL,
  expires_at timestamptz NOT NULL
);

${appendFunction(s, notify, 'CREATE', DROP_PAST_RETENTION(s), 'now()')}
-- The answer's number (1, 2, 3… per run) when kept; 0 when the run is missing or the request has one.
CREATE FUNCTION ${s}.put_answer(p_key bytea, p_request bytea, p_response text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  SELECT id, answers INTO r FROM ${s}.runs WHERE key = p_key AND ${live} FOR UPDATE;
  IF NOT FOUND THEN RETURN 0; END IF;
  INSERT INTO ${s}.answers (run, n, request_key, response) VALUES (r.id, r.answers + 1, p_request, p_response)
    ON CONFLICT (run, request_key) DO NOTHING;
  IF NOT FOUND THEN RETURN 0; END IF;
  UPDATE ${s}.runs SET answers = r.answers + 1 WHERE id = r.id;
  ${notify(`'a' || encode(p_key, 'hex') || ':' || (r.answers + 1)`)}
  RETURN r.answers + 1;
END $$;

CREATE FUNCTION ${s}.request_cancel(p_key bytea)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE ${s}.runs SET cancelled = true WHERE key = p_key AND NOT cancelled AND ${live};
  IF NOT FOUND THEN RETURN false; END IF;
  ${notify(`'c' || encode(p_key, 'hex')`)}
  RETURN true;
END $$;

-- Takes the lease when it is free, expired or the owner's already; else answers the holder's.
${acquire('acquire_lease', 'leases', 'run_id')}
-- Appends a turn when the session is at p_expected (0: a missing session is made), unless the
-- run's turn is kept already. o_status 1: appended, 2: the run's turn was kept before (nothing
-- written), 0: a conflict (nothing written); o_revision: the revision after.
CREATE FUNCTION ${s}.append_turn(p_key bytea, p_session_id text, p_expected integer, p_run_key bytea, p_run_id text, p_turn text,
  OUT o_status integer, OUT o_revision integer)
LANGUAGE plpgsql AS $$
BEGIN
  IF p_expected = 0 THEN
    INSERT INTO ${s}.sessions (key, session_id) VALUES (p_key, p_session_id) ON CONFLICT (key) DO NOTHING;
  END IF;
  SELECT revision INTO o_revision FROM ${s}.sessions WHERE key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    o_status := 0;
    o_revision := 0;
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM ${s}.session_turns WHERE session = p_key AND run_key = p_run_key) THEN
    o_status := 2;
    RETURN;
  END IF;
  IF o_revision <> p_expected THEN
    o_status := 0;
    RETURN;
  END IF;
  o_revision := p_expected + 1;
  INSERT INTO ${s}.session_turns (session, seq, run_key, turn) VALUES (p_key, o_revision, p_run_key, p_turn);
  UPDATE ${s}.sessions SET revision = o_revision, last_run = p_run_id WHERE key = p_key;
  o_status := 1;
END $$;

-- Makes a fork of p_parent sharing its first p_parent_revision turns, cut at p_at messages.
-- 1: made; 0: the parent is gone; 2: p_key exists already.
CREATE FUNCTION ${s}.fork_session(p_parent bytea, p_parent_revision integer, p_at integer, p_state text, p_key bytea, p_session_id text)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  -- Locked against a delete of the parent while the fork is made.
  PERFORM 1 FROM ${s}.sessions WHERE key = p_parent FOR KEY SHARE;
  IF NOT FOUND THEN RETURN 0; END IF;
  INSERT INTO ${s}.sessions (key, session_id, parent, parent_revision, forked_at, fork_state)
    VALUES (p_key, p_session_id, p_parent, p_parent_revision, p_at, p_state) ON CONFLICT (key) DO NOTHING;
  IF NOT FOUND THEN RETURN 2; END IF;
  RETURN 1;
END $$;

-- Deletes a session that has no forks (its turns with it): NULL when deleted or missing, else the
-- ids of its forks.
CREATE FUNCTION ${s}.delete_session(p_key bytea)
RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
  v_forks text[];
BEGIN
  PERFORM 1 FROM ${s}.sessions WHERE key = p_key FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  SELECT array_agg(session_id ORDER BY id) INTO v_forks FROM ${s}.sessions WHERE parent = p_key;
  IF v_forks IS NOT NULL THEN RETURN v_forks; END IF;
  DELETE FROM ${s}.sessions WHERE key = p_key;
  RETURN NULL;
END $$;

-- Takes a session's lease when it is free, expired or the owner's already; else answers the holder's.
${acquire('acquire_session', 'session_leases', 'session_id')}
-- Drops a session's lease if p_owner holds it (expired or not), and tells the waiters at commit.
CREATE FUNCTION ${s}.release_session(p_key bytea, p_owner text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM ${s}.session_leases WHERE key = p_key AND owner = p_owner;
  IF NOT FOUND THEN RETURN false; END IF;
  ${notify(`'r' || encode(p_key, 'hex')`)}
  RETURN true;
END $$;

-- Deletes up to p_batch journal rows of runs past their retention since p_grace_ms, then (when
-- those are all gone) up to p_batch such runs (their answers with them) and expired leases.
CREATE FUNCTION ${s}.sweep(p_batch integer, p_grace_ms double precision,
  OUT o_records integer, OUT o_runs integer, OUT o_leases integer)
LANGUAGE plpgsql AS $$
DECLARE
  cutoff timestamptz := now() - p_grace_ms * interval '1 millisecond';
  n integer;
BEGIN
  DELETE FROM ${s}.journal WHERE ctid = ANY (ARRAY(
    SELECT j.ctid FROM ${s}.runs r JOIN ${s}.journal j ON j.run = r.id WHERE r.expires_at <= cutoff LIMIT p_batch));
  GET DIAGNOSTICS o_records = ROW_COUNT;
  o_runs := 0;
  o_leases := 0;
  IF o_records < p_batch THEN
    DELETE FROM ${s}.runs WHERE id = ANY (ARRAY(SELECT id FROM ${s}.runs WHERE expires_at <= cutoff LIMIT p_batch));
    GET DIAGNOSTICS o_runs = ROW_COUNT;
    DELETE FROM ${s}.leases WHERE key = ANY (ARRAY(SELECT key FROM ${s}.leases WHERE expires_at <= cutoff LIMIT p_batch));
    GET DIAGNOSTICS o_leases = ROW_COUNT;
    DELETE FROM ${s}.session_leases WHERE key = ANY (ARRAY(SELECT key FROM ${s}.session_leases WHERE expires_at <= cutoff LIMIT p_batch));
    GET DIAGNOSTICS n = ROW_COUNT;
    o_leases := o_leases + n;
  END IF;
END $$;
`;
}

/**
 * Version 2, from version 1: the journal of a run past its retention stays readable for a while by
 * the followers subscribed before its expiry (see `follow`), so a run's end is timed when its rows
 * are written, close to its commit (not when its transaction began), and a run past its retention
 * whose id starts a new run is not deleted then but keeps its rows, without its key, for those
 * followers (which read it by its row id) until the sweep deletes them.
 */
export function tailsSql(s: string, channel: string): string {
  const retire = `-- Past its retention: the run is gone, and its id free for a new one; its rows stay, keyless,
    -- for its followers until the sweep.
    UPDATE ${s}.runs SET key = NULL WHERE id = v_id;`;
  return `
ALTER TABLE ${s}.runs ALTER COLUMN key DROP NOT NULL;

${appendFunction(s, notifyOn(channel), 'CREATE OR REPLACE', retire, 'clock_timestamp()')}`;
}

/**
 * The SQL of each version in schema `s` notifying on `channel`, in order (version 1 first): each
 * brings the tables and functions from the version before. `migrate()` runs those above the version
 * it finds.
 */
export const MIGRATIONS: readonly ((s: string, channel: string) => string)[] = [schemaSql, tailsSql];

/** The version of the tables and functions {@link MIGRATIONS} leave; `migrate()` records it. */
export const SCHEMA_VERSION = MIGRATIONS.length;
