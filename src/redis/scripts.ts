/**
 * The Lua scripts of the Redis store: each is one round trip and atomic (Redis runs a script to
 * its end before any other command). Keys are passed as KEYS (see ./keys), never built in Lua;
 * each script touches the keys of one run or one session (one slot of a Redis Cluster).
 * Stream entry ids are `0-<n>`: the journal's position, or the answer's number.
 */

/**
 * A run's start stamp, `startOf(key)`: the field `s` of the first entry (`0-1`) of a journal or
 * tail, 0 when it has none (a run started by an earlier version of this store, or a key that does
 * not exist). See `append`.
 */
const startOf = `
local function startOf(key)
  local first = redis.call('XRANGE', key, '0-1', '0-1')[1]
  if first then
    local fields = first[2]
    for i = 1, #fields - 1, 2 do
      if fields[i] == 's' then return tonumber(fields[i + 1]) end
    end
  end
  return 0
end
`;

/**
 * Appends a batch of records if the journal is at the expected position: one Stream entry per
 * batch, id `0-<position of its first record>`, field `r` the records as JSON lines (JSON holds no
 * raw newline); the journal's last position is the state's `pos`.
 * KEYS: journal, answers, state, tail. ARGV: expected, ends ('1' when the records hold `end`),
 * retainMs (-1: keep), channel, inline ('1': publish the records themselves), count, records,
 * tailMs, retainMs + tailMs. Answers `{1, last position}`, or `{0, actual position}` (nothing
 * written) on a conflict.
 * Publishes `j<first position>\n<records>`, or, for a batch too large to send to every follower,
 * `k<last position>` (followers then read it).
 * A run is dropped when its state goes: at its end with retainMs 0 (its answers and state
 * deleted, its journal renamed its tail and kept tailMs), else when its answers and state expire,
 * retainMs after its end (its journal expires tailMs later). Either way its journal is kept tailMs
 * past the drop for the followers that were there before it (see `read`); a new run of the id
 * meanwhile renames it the tail (with its expiry) and starts a journal of its own.
 * A new run is given a start stamp, which tells it apart from every other run of its id: Redis's
 * time in µs, above the stamp of the runs of the id still kept (journal, tail), written as the
 * state's `start` and as the field `s` of its first entry (which goes with the journal when it
 * becomes the tail).
 */
const append = `${startOf}
local n = tonumber(redis.call('HGET', KEYS[3], 'pos') or '0')
if n ~= tonumber(ARGV[1]) then return {0, n} end
local count = tonumber(ARGV[6])
if count == 0 then return {1, n} end
if redis.call('HEXISTS', KEYS[3], 'end') == 1 then return {0, n} end
if n == 0 then
  local t = redis.call('TIME')
  local start = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = math.max(startOf(KEYS[1]), startOf(KEYS[4]))
  if start <= last then start = last + 1 end
  if redis.call('PTTL', KEYS[1]) > 0 then redis.call('RENAME', KEYS[1], KEYS[4]) end
  redis.call('XADD', KEYS[1], '0-1', 'r', ARGV[7], 's', start)
  redis.call('HSET', KEYS[3], 'pos', count, 'start', start)
else
  redis.call('XADD', KEYS[1], '0-' .. (n + 1), 'r', ARGV[7])
  redis.call('HSET', KEYS[3], 'pos', n + count)
end
if ARGV[5] == '1' then
  redis.call('PUBLISH', ARGV[4], 'j' .. (n + 1) .. '\\n' .. ARGV[7])
else
  redis.call('PUBLISH', ARGV[4], 'k' .. (n + count))
end
if ARGV[2] == '1' then
  local retain = tonumber(ARGV[3])
  if retain == 0 then
    redis.call('UNLINK', KEYS[2], KEYS[3])
    redis.call('RENAME', KEYS[1], KEYS[4])
    redis.call('PEXPIRE', KEYS[4], ARGV[8])
  else
    redis.call('HSET', KEYS[3], 'end', '1')
    if retain > 0 then
      redis.call('PEXPIRE', KEYS[2], ARGV[3])
      redis.call('PEXPIRE', KEYS[3], ARGV[3])
      redis.call('PEXPIRE', KEYS[1], ARGV[9])
    end
  end
end
return {1, n + count}
`;

/**
 * Which run a follower subscribing now follows: `{1, start}`, the run held, by its start stamp
 * (see `append`); or `{0, start}` when none is: the first run started after the one of that stamp,
 * the newest run of the id whose journal or tail is still kept (-1: none is, so that any run found
 * later started after). A journal kept without expiry or state (one this store did not write) is
 * held. KEYS: journal, state, tail.
 * The follower sends it on subscribing, and its reads (see `read`) take that run whatever happens
 * to the id before they land: it subscribed when Redis ran this script, in Redis's own order of
 * commands, and no trip of its reads counts.
 */
const mark = `${startOf}
if redis.call('EXISTS', KEYS[2]) == 1 then return {1, tonumber(redis.call('HGET', KEYS[2], 'start') or '0')} end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return {1, startOf(KEYS[1])} end
if ttl ~= -2 then return {0, startOf(KEYS[1])} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {0, startOf(KEYS[3])} end
return {0, -1}
`;

/**
 * The journal's batches from the one holding a position on, as `{start, id, records, id,
 * records…}`, or nil when there is no such run. KEYS: journal, state, tail. ARGV: position,
 * position + 1 (added in JS: Lua's numbers are floats, which it writes as 1e+14 from there on),
 * which run (see `mark`), a start stamp, the run's channel, a marker.
 * Which run: '' for a reader, the run held: a journal is held with its state; without it, it is a
 * dropped run's, kept for its followers (it expires), or one this store did not write (it does
 * not, and is read as it is). For a follower, whether dropped or not, from the journal or from the
 * tail (see `append`): 'run', the run with that start stamp; 'after', the first run started after
 * that stamp (the tail's, else the journal's). `start` is the stamp of the run read (0 for a reader).
 * A marker (not '') is published on the channel first: what a follower hears on the channel after
 * it was published after this read.
 */
const read = `${startOf}
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[6]) end
local key = KEYS[1]
local start = 0
local ttl = redis.call('PTTL', key)
local held = redis.call('EXISTS', KEYS[2]) == 1
if ARGV[3] == '' then
  if ttl == -2 or (ttl ~= -1 and not held) then return false end
else
  local stamp = tonumber(ARGV[4])
  local journal = -1
  if held then
    journal = tonumber(redis.call('HGET', KEYS[2], 'start') or '0')
  elseif ttl ~= -2 then
    journal = startOf(key)
  end
  local tail = -1
  if redis.call('EXISTS', KEYS[3]) == 1 and (ARGV[3] == 'after' or journal ~= stamp) then tail = startOf(KEYS[3]) end
  if ARGV[3] == 'run' then
    if journal == stamp then
      start = stamp
    elseif tail == stamp then
      key = KEYS[3]
      start = stamp
    else
      return false
    end
  elseif tail > stamp then
    key = KEYS[3]
    start = tail
  elseif journal > stamp then
    start = journal
  else
    return false
  end
end
local batches = {start}
local holding = redis.call('XREVRANGE', key, '0-' .. ARGV[1], '-', 'COUNT', 1)
if holding[1] then
  batches[2] = holding[1][1]
  batches[3] = holding[1][2][2]
end
local rest = redis.call('XRANGE', key, '0-' .. ARGV[2], '+')
for i = 1, #rest do
  batches[#batches + 1] = rest[i][1]
  batches[#batches + 1] = rest[i][2][2]
end
return batches
`;

/**
 * Keeps an answer unless the run is not held (no state) or its request is answered already.
 * KEYS: answers, state. ARGV: requestId, response (JSON), channel.
 * Answers the answer's number (1, 2, 3…) when kept, else 0. Publishes `a<n>\n<response>`. A run
 * that has ended passes its expiry on.
 */
const putAnswer = `
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[2], 'a:' .. ARGV[1], '1') == 0 then return 0 end
local n = redis.call('XLEN', KEYS[1]) + 1
redis.call('XADD', KEYS[1], '0-' .. n, 'r', ARGV[2])
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call('PUBLISH', ARGV[3], 'a' .. n .. '\\n' .. ARGV[2])
return n
`;

/**
 * Sets the run's cancel flag (once) and publishes `c`. KEYS: state. ARGV: channel.
 * Answers 1 when set now, 2 when it was set before, 0 when the run is not held (no state).
 */
const requestCancel = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], 'cancel', '1') == 0 then return 2 end
redis.call('PUBLISH', ARGV[1], 'c')
return 1
`;

/** The server's clock in ms (TIME: seconds, microseconds). */
const now = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`;

/**
 * Takes the lease for an owner when it is free, expired (Redis dropped it) or the owner's.
 * KEYS: lease. ARGV: owner, ttlMs. Answers `{1 | 0, owner, expiresAt}`.
 */
const acquireLease = `${now}
local held = redis.call('GET', KEYS[1])
if held == false or held == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, ARGV[1], now + tonumber(ARGV[2])}
end
return {0, held, now + redis.call('PTTL', KEYS[1])}
`;

/** Extends the lease if the owner holds it. KEYS: lease. ARGV: owner, ttlMs. Answers 1 or 0. */
const renewLease = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/** Drops the lease if the owner holds it. KEYS: lease. ARGV: owner. */
const releaseLease = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`;

/** The lease held: `{owner, expiresAt}`, or nil. KEYS: lease. */
const getLease = `
local held = redis.call('GET', KEYS[1])
if held == false then return false end
${now}
return {held, now + redis.call('PTTL', KEYS[1])}
`;

/**
 * Appends a session's turn if its revision is the expected one, unless the run's turn is kept
 * already. KEYS: turns, meta. ARGV: expected, run id (JSON), turn (JSON).
 * Answers `{1, new revision}`, `{2, revision}` (the run's turn was kept before: nothing written) or
 * `{0, revision}` (a conflict: nothing written).
 */
const appendTurn = `
local n = tonumber(redis.call('HGET', KEYS[2], 'rev') or '0')
if redis.call('HEXISTS', KEYS[2], 'r:' .. ARGV[2]) == 1 then return {2, n} end
if n ~= tonumber(ARGV[1]) then return {0, n} end
redis.call('RPUSH', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[2], 'rev', n + 1, 'r:' .. ARGV[2], n + 1)
return {1, n + 1}
`;

/**
 * A session's first turns: `{revision, parent, {turn, turn…}}`, or nil when there is no session.
 * KEYS: turns, meta. ARGV: how many turns (-1: all).
 */
const loadSession = `
if redis.call('EXISTS', KEYS[2]) == 0 then return false end
local n = tonumber(redis.call('HGET', KEYS[2], 'rev') or '0')
local upto = tonumber(ARGV[1])
if upto < 0 or upto > n then upto = n end
local turns = {}
if upto > 0 then turns = redis.call('LRANGE', KEYS[1], 0, upto - 1) end
return {n, redis.call('HGET', KEYS[2], 'parent') or '', turns}
`;

/**
 * Lists a fork on its parent (first, so that the parent cannot be deleted while the fork is made),
 * with the time it was listed (field `f:<fork id>` of the parent's meta, on Redis's clock).
 * KEYS: parent's meta, parent's forks. ARGV: fork id (JSON). Answers 0 when the parent is gone.
 */
const addFork = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local now = redis.call('TIME')
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'f:' .. ARGV[1], now[1] * 1000 + math.floor(now[2] / 1000))
return 1
`;

/**
 * Takes a fork's listing off its parent. With a minimum age (ms, -1: none), only a listing at
 * least that old: one whose fork does not exist is then left by a process that died between
 * `addFork` and `createFork` (or between a fork's delete and this), not a fork being made. A
 * listing without its time (written before listings had one) gets it now, and is taken off once
 * that is old enough. The time goes with the last listing of the id.
 * KEYS: parent's meta, parent's forks. ARGV: fork id (JSON), minimum age. Answers 1, or 0 when
 * the listing is younger.
 */
const unlistFork = `
local field = 'f:' .. ARGV[1]
local min = tonumber(ARGV[2])
if min >= 0 then
  local now = redis.call('TIME')
  now = now[1] * 1000 + math.floor(now[2] / 1000)
  local listed = redis.call('HGET', KEYS[1], field)
  if not listed then
    redis.call('HSET', KEYS[1], field, now)
    return 0
  end
  if now - tonumber(listed) < min then return 0 end
end
redis.call('LREM', KEYS[2], 1, ARGV[1])
if not redis.call('LPOS', KEYS[2], ARGV[1]) then redis.call('HDEL', KEYS[1], field) end
return 1
`;

/** Makes a fork's meta unless the session exists. KEYS: meta. ARGV: parent (JSON). Answers 1, or 0. */
const createFork = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'rev', 0, 'parent', ARGV[1])
return 1
`;

/**
 * Deletes a session that has no forks. KEYS: turns, meta, forks. Answers `{1, parent}` (parent:
 * the meta's, or ''), `{0, fork, fork…}` when it has forks, `{2}` when there is no session.
 */
const deleteSession = `
local forks = redis.call('LRANGE', KEYS[3], 0, -1)
if #forks > 0 then
  local out = {0}
  for i = 1, #forks do out[i + 1] = forks[i] end
  return out
end
if redis.call('EXISTS', KEYS[2]) == 0 then return {2} end
local parent = redis.call('HGET', KEYS[2], 'parent') or ''
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {1, parent}
`;

/** Drops a session's lease if the owner holds it, and publishes `r`. KEYS: lease. ARGV: owner, channel. */
const releaseSession = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'r')
return 1
`;

/** Every script with its number of keys. */
export const SCRIPTS = {
  append: { lua: append, keys: 4 },
  mark: { lua: mark, keys: 3 },
  read: { lua: read, keys: 3 },
  putAnswer: { lua: putAnswer, keys: 2 },
  requestCancel: { lua: requestCancel, keys: 1 },
  acquireLease: { lua: acquireLease, keys: 1 },
  renewLease: { lua: renewLease, keys: 1 },
  releaseLease: { lua: releaseLease, keys: 1 },
  getLease: { lua: getLease, keys: 1 },
  appendTurn: { lua: appendTurn, keys: 2 },
  loadSession: { lua: loadSession, keys: 2 },
  addFork: { lua: addFork, keys: 2 },
  unlistFork: { lua: unlistFork, keys: 2 },
  createFork: { lua: createFork, keys: 1 },
  deleteSession: { lua: deleteSession, keys: 3 },
  releaseSession: { lua: releaseSession, keys: 1 },
} as const;

export type ScriptName = keyof typeof SCRIPTS;

/** FNV-1a of a text, as 8 hex digits. */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16).padStart(8, '0');
}

/**
 * The name each script is defined under on the client (`defineCommand`): it holds a hash of the
 * script, so two copies of this package with different scripts sharing a client (an ESM and a CJS
 * build, two versions) never run each other's.
 */
export const COMMAND_NAMES: { readonly [N in ScriptName]: string } = Object.freeze(
  Object.fromEntries(Object.entries(SCRIPTS).map(([name, { lua }]) => [name, `rxAgent_${name}_${fnv1a(lua)}`])) as { [N in ScriptName]: string },
);
