/**
 * The Redis keys and the channel of one run, and the keys of a session. A run's keys share one
 * hash tag (`{<run id>}`), and a session's keys theirs (`{<session id>}`), so every script, which
 * touches the keys of one run or one session only, runs on one slot of a Redis Cluster too.
 *
 * - `<prefix>run:{<id>}:journal`: a Stream, one entry per appended batch of records, entry id
 *   `0-<position of its first record>` (positions 1, 2, 3…), field `r` the records as JSON lines;
 *   the first entry also has `s`, the run's start stamp (as the state's `start`).
 * - `<prefix>run:{<id>}:answers`: a Stream of the answers kept, entry id `0-<n>`, field `r` JSON.
 * - `<prefix>run:{<id>}:state`: a Hash: `pos` (the journal's last position), `end` (the journal
 *   holds its `end` record), `cancel` (a cancel was asked), `a:<requestId>` (an answer to that
 *   request is kept: the first wins), `start` (the run's start stamp: Redis's time in µs when it
 *   started, above the stamps of the runs of the id still kept, so that a follower tells its run
 *   from a later one of the id; none for a run started by an earlier version of this store). The
 *   run is held while it exists: when a finished run's state expires (`retainMs` after its end),
 *   the run is dropped, and its journal, which expires a few seconds later, is for the followers
 *   that were there before (no reader sees it).
 * - `<prefix>run:{<id>}:lease`: a String, the owner of the run's lease, expiring with it.
 * - `<prefix>run:{<id>}:tail`: the journal of a dropped run, kept a few seconds past the drop for
 *   the followers that were there before it (no reader sees it): renamed at its end with retainMs
 *   0, or when a new run of the id starts within those seconds.
 * - `<prefix>session:{<id>}:turns`: a List, the session's turns as JSON, oldest first.
 * - `<prefix>session:{<id>}:meta`: a Hash: `rev` (the number of turns), `parent` (a fork: JSON of
 *   the parent's id and revision, the messages shared and the state copied), `r:<run id as JSON>`
 *   (that run's turn is kept), `f:<fork id as JSON>` (when that fork was listed, ms on Redis's clock).
 * - `<prefix>session:{<id>}:forks`: a List of the ids (JSON) of the sessions forked from it.
 * - `<prefix>session:{<id>}:lease`: a String, the owner (JSON) of the session's lease, expiring with it.
 * - channel `<prefix>session:{<id>}`: `r` when the session's lease is released.
 * - channel `<prefix>run:{<id>}`: what happens to the run, for the processes that follow it, and
 *   the markers of followers' reads (`m<marker>`, each for the follower that read).
 */
export interface RunKeys {
  readonly journal: string;
  readonly answers: string;
  readonly state: string;
  readonly lease: string;
  readonly tail: string;
  readonly channel: string;
}

/** `%`, the braces of a hash tag, and UTF-16 surrogates (lone ones cannot be written as UTF-8). */
const SPECIAL = /[%{}\uD800-\uDFFF]/;
const ESCAPED = /%|\{|\}|[\uD800-\uDBFF][\uDC00-\uDFFF]|[\uD800-\uDFFF]/g;

/**
 * An id as a part of a key: unchanged unless it holds `%`, `{`, `}` or a lone surrogate, which
 * are escaped (`%25`, `%7B`, `%7D`, `%uD800`), so that distinct ids never share a key, the hash
 * tag is the whole id, and an id that is not well-formed UTF-16 is not merged with another one by
 * its UTF-8 encoding.
 */
export function keyPart(id: string): string {
  if (!SPECIAL.test(id)) return id;
  return id.replace(ESCAPED, (match) => {
    if (match.length === 2) return match; // a surrogate pair: a well-formed character
    if (match === '%') return '%25';
    if (match === '{') return '%7B';
    if (match === '}') return '%7D';
    return `%u${match.charCodeAt(0).toString(16).toUpperCase()}`;
  });
}

/** The keys and channel of one run. */
export function runKeys(prefix: string, runId: string): RunKeys {
  const base = `${prefix}run:{${keyPart(runId)}}`;
  return { journal: `${base}:journal`, answers: `${base}:answers`, state: `${base}:state`, lease: `${base}:lease`, tail: `${base}:tail`, channel: base };
}

/** The keys and channel of one session (see {@link RunKeys}). */
export interface SessionKeys {
  readonly turns: string;
  readonly meta: string;
  readonly forks: string;
  readonly lease: string;
  readonly channel: string;
}

/** The keys and channel of one session. */
export function sessionKeys(prefix: string, sessionId: string): SessionKeys {
  const base = `${prefix}session:{${keyPart(sessionId)}}`;
  return { turns: `${base}:turns`, meta: `${base}:meta`, forks: `${base}:forks`, lease: `${base}:lease`, channel: base };
}
