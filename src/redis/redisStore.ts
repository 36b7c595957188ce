import type { Redis } from 'ioredis';
import { asyncScheduler, Observable, timer, type SchedulerLike, type Subscription } from 'rxjs';
import type { AgentResponse } from '../events/types';
import { withIds } from '../messages/message';
import type { StoredState } from '../state/stateBag';
import { SessionConflictError, SessionDataError, storedTurns } from '../session/errors';
import { checkAt, checkLease, checkTurn, forkedError } from '../session/inMemorySessionStore';
import type { SessionAppend, SessionLeaseClaim, SessionTurn, StoredSession } from '../session/sessionStore';
import { SessionContent, foldTurns } from '../session/sessionTurns';
import { isArray } from '../internal/isArray';
import { isScheduler } from '../internal/isScheduler';
import { show } from '../internal/show';
import { JournalConflictError, JournalFormatError, RunNotFoundError } from '../journal/errors';
import { checkAfter, checkOwner, checkRunId, checkSessionId, checkTtl } from '../journal/storeArguments';
import { checkRecord, recordText, type JournalEntry, type JournalRecord } from '../journal/records';
import type { AgentStore, LeaseClaim, RunLease, RunReceived } from '../journal/store';
import { keyPart, runKeys, sessionKeys, type RunKeys } from './keys';
import { Notifications, type Listening } from './notifications';
import { COMMAND_NAMES, SCRIPTS, type ScriptName } from './scripts';
import { checkOptions, optionNames } from '../internal/optionNames';

/** What {@link redisStore} takes. */
export interface RedisStoreOptions {
  /**
   * An ioredis client. The store sends its commands on it and opens one more connection of its
   * own (`client.duplicate()`) for pub/sub while it follows a run; it never closes the client.
   */
  client: Redis;
  /** Prepended to every key and channel (default `'rx-agent:'`). */
  prefix?: string;
  /**
   * How long a finished run's journal, answers and cancel flag are kept, in ms (default 7 days;
   * 0: dropped when the run ends; `Infinity`: kept). Redis drops them itself (key expiry). Once
   * dropped (with 0: once its end is written), a run reads as gone (`read` answers undefined, its
   * id may start a new run, `follow` subscribed from then on errors with `RunNotFoundError` unless
   * a new run of the id starts before its first read, which it follows then), but a follower
   * subscribed before the drop (so before the end, whatever the retention) still gets every record
   * to the end: the journal is kept 10 s past the drop for those followers alone, so a retention of
   * a few ms is as safe for them as 0. A follower subscribes when Redis runs the command `follow`
   * sends at once: which run it follows is settled then, in Redis's order, however late its reads
   * come.
   */
  retainMs?: number;
  /** Clock of the wait for a finished run's journal to expire, in `follow` (default `asyncScheduler`). */
  scheduler?: SchedulerLike;
}

const DAY_MS = 86_400_000;
/** setTimeout's longest delay: a longer wait is made of several. */
const MAX_DELAY_MS = 2_147_483_647;
/**
 * How long a run's journal is kept past its drop (its end with `retainMs: 0`, else its retention)
 * for the followers subscribed before the drop (a follower whose first read, or whose read after
 * a lost pub/sub connection, comes after the drop), in ms.
 */
const TAIL_MS = 10_000;
/**
 * How old, in ms, a parent's listing of a fork that does not exist must be for `delete` to take it
 * back: a fork is made in two scripts (see `fork`), a few ms apart unless its process died between.
 */
const LEFT_LISTING_MS = 60_000;

type ScriptCommands = { readonly [N in ScriptName as (typeof COMMAND_NAMES)[N]]: (...args: (string | number)[]) => Promise<unknown> };

/**
 * A batch up to this size (UTF-16 units of JSON) goes to followers inside the notification;
 * a larger one is announced only, and read by each follower (a pub/sub client whose output
 * buffer grows past Redis's limit, 32 MB by default, is disconnected).
 */
const INLINE_BYTES = 1 << 20;

/** The options {@link redisStore} knows (any other is refused). */
const REDIS_STORE_OPTIONS = optionNames<RedisStoreOptions>({ client: true, prefix: true, retainMs: true, scheduler: true });

/**
 * An `AgentStore` on Redis (through ioredis), for runs shared by any number of processes:
 * - each run's journal is a Stream with one entry per appended batch (entry id `0-<position of its
 *   first record>`, the records as JSON lines): an append is one Lua script that checks the
 *   expected position and writes the whole batch or nothing; a read is one script (XRANGE);
 * - answers and cancels are kept by Lua scripts, which also publish them on the run's channel, so
 *   a live run anywhere hears of them at once (pub/sub, no polling); a follower hears of new
 *   records the same way, with the records in the message (up to 1 MB a batch; a larger one is
 *   announced, and read);
 * - a run's lease is a key that expires with it (SET NX PX semantics in a script, renewed and
 *   released only by its owner);
 * - a finished run's keys expire `retainMs` after its end (Redis key expiry), its journal 10 s
 *   later: it reads as gone from its retention on (with `retainMs: 0`, from its end), and only the
 *   followers subscribed before then read on to its end, however short the retention (each run
 *   of an id has a start stamp, and a follower's reads take the run it subscribed to by it);
 * - a session is a List of its turns (an append is one Lua script that checks the revision and
 *   the run id), a Hash of its revision and fork record, a List of its forks, and a lease key (SET
 *   PX semantics) whose release is published, so a run waiting for the session hears of it at once.
 *
 * @example
 * import Redis from 'ioredis';
 * import { redisStore } from 'rx-agent/redis';
 *
 * const store = redisStore({ client: new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') });
 * const agent = createAgent({ model, tools, store });
 * agent.run('Pay the invoice', { runId: 'run-1', onRequest: 'suspend' }).subscribe(render);
 * // in another process, later:
 * await agent.respond('run-1', { type: 'permission-response', requestId, approved: true });
 * agent.resume('run-1').subscribe(render);
 */
export function redisStore(options: RedisStoreOptions): AgentStore {
  checkOptions('redisStore', options, REDIS_STORE_OPTIONS, "with 'client'");
  const { client, prefix = 'rx-agent:', retainMs = 7 * DAY_MS, scheduler = asyncScheduler } = options;
  if (client === null || typeof client !== 'object' || typeof client.defineCommand !== 'function' || typeof client.duplicate !== 'function') {
    throw new TypeError(`redisStore: 'client' must be an ioredis client (new Redis(…)), got ${show(client)}`);
  }
  if (typeof prefix !== 'string') throw new TypeError(`redisStore: 'prefix' must be a string, got ${show(prefix)}`);
  if (typeof retainMs !== 'number' || Number.isNaN(retainMs) || retainMs < 0 || (retainMs > Number.MAX_SAFE_INTEGER && retainMs !== Infinity)) {
    throw new TypeError(`redisStore: 'retainMs' must be a number of ms from 0 to Number.MAX_SAFE_INTEGER, or Infinity, got ${show(retainMs)}`);
  }
  if (!isScheduler(scheduler)) throw new TypeError("redisStore: 'scheduler' must be an rxjs SchedulerLike");
  for (const name of Object.keys(SCRIPTS) as ScriptName[]) {
    const command = COMMAND_NAMES[name];
    if (typeof (client as unknown as Record<string, unknown>)[command] !== 'function') {
      client.defineCommand(command, { lua: SCRIPTS[name].lua, numberOfKeys: SCRIPTS[name].keys });
    }
  }
  restoreFastStrings();
  return new RedisStore(client, prefix, retainMs === Infinity ? -1 : Math.ceil(retainMs), scheduler);
}

let stringsRestored = false;
restoreFastStrings();

/**
 * Makes one `VerbatimString` (ioredis 6; ioredis 5 has none), on loading this module and on creating a store.
 */
function restoreFastStrings(): void {
  if (stringsRestored) return;
  stringsRestored = true;
  import('ioredis/built/resp/verbatim-string.js').then(
    ({ VerbatimString }: { VerbatimString?: new (format: string, value: string) => unknown }) => {
      // Loading `class VerbatimString extends String` slows String.prototype process-wide on Node 20 until one instance exists (charCodeAt loop: 46 ms -> 230 ms -> 46 ms; bench/verbatimString.ts).
      if (typeof VerbatimString === 'function') void new VerbatimString('txt', '');
    },
    () => undefined,
  );
}

/** What the store read of a journal: its entries, and the run's start stamp (see the `mark` script; 0 for a reader). */
interface JournalRead {
  readonly entries: JournalEntry[];
  readonly start: number;
}

/** A stream entry as XRANGE answers it: `[id, [field, value, …]]`. */
type StreamEntry = [id: string, fields: string[]];

/** The number in a stream entry id `0-<n>`. */
const numberOf = (id: string): number => Number(id.slice(2));

/** The record text of an entry (field `r`). */
function textOf(fields: string[]): string | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === 'r') return fields[i + 1];
  return undefined;
}

/**
 * Adds to `out` the entries of a batch (its records as JSON lines, the first at position
 * `first`) from position `from` on.
 */
function batchEntries(runId: string, first: number, lines: string | undefined, from: number, out: JournalEntry[]): JournalEntry[] {
  if (typeof lines !== 'string') throw new JournalFormatError(runId, first, 'the entry holds no record');
  let start = 0;
  for (let position = first; ; position++) {
    const end = lines.indexOf('\n', start);
    if (position >= from) out.push({ position, record: parseRecord(runId, position, end === -1 ? lines.slice(start) : lines.slice(start, end)) });
    if (end === -1) return out;
    start = end + 1;
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

function parseResponse(runId: string, n: number, text: string | undefined): AgentResponse {
  let value: unknown;
  try {
    value = text === undefined ? undefined : JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (value === null || typeof value !== 'object' || typeof (value as { requestId?: unknown }).requestId !== 'string') {
    throw new Error(`Run '${runId}': answer ${n} in the store is not a response`);
  }
  return value as AgentResponse;
}

class RedisStore implements AgentStore {
  private readonly commands: ScriptCommands;
  private readonly notifications: Notifications;
  /** Markers of followers' reads (see `follow`): this store's tag and a count, unique on a channel. */
  private readonly markerTag = crypto.randomUUID();
  private markers = 0;

  constructor(
    private readonly client: Redis,
    private readonly prefix: string,
    /** ms; -1: kept. */
    private readonly retainMs: number,
    private readonly scheduler: SchedulerLike,
  ) {
    this.commands = client as unknown as ScriptCommands;
    this.notifications = new Notifications(client);
  }

  private keys(runId: string): RunKeys {
    return runKeys(this.prefix, runId);
  }

  private nextMarker(): string {
    return `m${this.markerTag}.${++this.markers}`;
  }

  private run(name: ScriptName, ...args: (string | number)[]): Promise<unknown> {
    return this.commands[COMMAND_NAMES[name]](...args);
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
    let size = 0;
    for (let i = 0; i < records.length; i++) {
      const record = records[i];
      if (record === null || typeof record !== 'object') throw new TypeError(`append: record ${i} is not a journal record: ${show(record)}`);
      const text = recordText(runId, record);
      texts[i] = text;
      size += text.length;
      if (record.kind === 'end') ends = true;
    }
    const keys = this.keys(runId);
    const inline = size <= INLINE_BYTES ? '1' : '0';
    const [ok, position] = (await this.run(
      'append',
      keys.journal,
      keys.answers,
      keys.state,
      keys.tail,
      expected,
      ends ? '1' : '0',
      this.retainMs,
      keys.channel,
      inline,
      texts.length,
      texts.join('\n'),
      TAIL_MS,
      this.retainMs > 0 ? this.retainMs + TAIL_MS : 0,
    )) as [number, number];
    if (ok !== 1) throw new JournalConflictError(runId, expected, position);
    return position;
  }

  async read(runId: string, after = 0): Promise<readonly JournalEntry[] | undefined> {
    checkRunId('read', runId);
    checkAfter('read', after);
    return (await this.readFrom(runId, this.keys(runId), after + 1))?.entries;
  }

  /**
   * The journal's entries from `first` on (undefined: no such run). For a reader (`which` ''),
   * the run held; for a follower, the run it follows, dropped or not, from the journal or its tail
   * (see the `mark` and `read` scripts): `which` 'run', the run with start stamp `stamp`; 'after',
   * the first run started after `stamp`. A `marker` is published on the run's channel as it reads.
   */
  private async readFrom(
    runId: string,
    keys: RunKeys,
    first: number,
    which: '' | 'run' | 'after' = '',
    stamp = -1,
    marker = '',
  ): Promise<JournalRead | undefined> {
    const batches = (await this.run('read', keys.journal, keys.state, keys.tail, first, first + 1, which, stamp, keys.channel, marker)) as
      [number, ...string[]] | null;
    if (batches === null) return undefined;
    const entries: JournalEntry[] = [];
    for (let i = 1; i + 1 < batches.length; i += 2) batchEntries(runId, numberOf(batches[i] as string), batches[i + 1] as string, first, entries);
    return { entries, start: batches[0] };
  }

  /**
   * Listens on a run's channel for a follower: each message to `onMessage` (a throw fails the
   * follower), a catch-up once listening (and after a reconnection, unless one is under way).
   */
  private listenTo(
    channel: string,
    subscriber: { readonly closed: boolean },
    follower: {
      onMessage: (message: string) => void;
      catchUp: () => void;
      isReading: () => boolean;
      fail: (error: unknown) => void;
    },
  ): Listening {
    const { onMessage, catchUp, isReading, fail } = follower;
    const listening = this.notifications.listen(channel, {
      message: (message) => {
        try {
          onMessage(message);
        } catch (error) {
          fail(error);
        }
      },
      resync: () => {
        if (!isReading()) catchUp();
      },
      lost: fail,
    });
    listening.ready.then(() => {
      if (!subscriber.closed) catchUp();
    }, fail);
    return listening;
  }

  follow(runId: string, after: number): Observable<JournalEntry> {
    return new Observable<JournalEntry>((subscriber) => {
      checkRunId('follow', runId);
      checkAfter('follow', after);
      const keys = this.keys(runId);
      let next = after + 1;
      /** A read of the journal is in flight, or its marker has not come on the channel yet: messages wait in `held`. */
      let reading = true;
      let held: string[] = [];
      /** The number of the latest read (an earlier one's answer is left: a later read covers it). */
      let reads = 0;
      /** The latest read's marker until it comes on the channel ('' then), and whether that read answered. */
      let marker = '';
      let answered = false;
      let started = false;
      let ended = false;
      let expiry: Subscription | undefined;
      /**
       * The run followed: `which` 'run', the run with start stamp `stamp`; 'after', the first run
       * started after `stamp` (none was held on subscription). The `mark` script, sent at once,
       * says which: the follower subscribed when Redis ran it, whatever happens to the id before
       * its reads land (its first comes once the channel is listened to). A run found is followed
       * by its stamp from then on.
       */
      let which: 'run' | 'after' = 'after';
      let stamp = -1;
      const marked = (this.run('mark', keys.journal, keys.state, keys.tail) as Promise<[number, number]>).then(([isHeld, start]) => {
        which = isHeld === 1 ? 'run' : 'after';
        stamp = start;
      });
      marked.catch(() => undefined); // reported by the first read

      const fail = (error: unknown) => subscriber.error(error);
      /** Hands out entries in order from `next`; false when one is missing (read the journal again). */
      const deliver = (entries: readonly JournalEntry[]): boolean => {
        for (const entry of entries) {
          // After `end`, what the channel brings is a new run's of the id: not this follower's.
          if (subscriber.closed || ended) return true;
          if (entry.position < next) continue;
          if (entry.position > next) return false;
          next++;
          subscriber.next(entry);
          if (entry.record.kind === 'end') {
            ended = true;
            awaitExpiry();
          }
        }
        return true;
      };
      const onMessage = (message: string) => {
        const kind = message.charCodeAt(0);
        if (kind === 109 /* m */) {
          // The latest read's marker: what came before it was published before that read, which
          // has it (or it is another run's of the id: not this follower's).
          if (message !== marker) return;
          marker = '';
          held = [];
          if (answered) release();
          return;
        }
        if (kind !== 106 /* j */ && kind !== 107 /* k */) return;
        if (reading) return void held.push(message);
        if (kind === 107) {
          // A batch too large to be sent inline: read it.
          if (Number(message.slice(1)) >= next) catchUp();
          return;
        }
        const newline = message.indexOf('\n');
        const entries = batchEntries(runId, Number(message.slice(1, newline)), message.slice(newline + 1), next, []);
        if (!deliver(entries)) catchUp();
      };
      /** The latest read answered and its marker came: hands out what came since the marker. */
      const release = () => {
        reading = false;
        while (!reading && held.length > 0 && !subscriber.closed) onMessage(held.shift() as string);
      };
      /** Reads the run from `next` (on subscription, after a gap, and once back from a lost connection). */
      const catchUp = () => {
        reading = true;
        answered = false;
        const read = ++reads;
        const mine = (marker = this.nextMarker());
        marked
          .then(() => this.readFrom(runId, keys, next, which, stamp, mine))
          .then((journal) => {
            if (subscriber.closed || read !== reads) return;
            if (journal === undefined) {
              // Not held on subscription, and none started since; or dropped since (10 s past its drop).
              return started ? subscriber.complete() : fail(new RunNotFoundError(runId));
            }
            started = true;
            which = 'run';
            stamp = journal.start;
            deliver(journal.entries);
            answered = true;
            if (marker === '') release();
          })
          .catch(fail);
      };
      /** After `end`, the run is dropped at its expiry (its state's): complete then. */
      const awaitExpiry = () => {
        if (expiry) return;
        const check = () => {
          // One transaction: the state's expiry, and whether it is still this run's, as they stood together.
          this.client
            .multi()
            .pttl(keys.state)
            .hmget(keys.state, 'end', 'start')
            .exec()
            .then((replies) => {
              if (subscriber.closed) return;
              if (!replies) throw new Error(`follow: the transaction reading run '${runId}' was aborted`);
              for (const [error] of replies) if (error) throw error;
              const ms = replies[0][1] as number;
              const [ends, start] = replies[1][1] as [string | null, string | null];
              // Gone, or the state is a new run's of the id.
              if (ms === -2 || ends === null || Number(start ?? 0) !== stamp) return subscriber.complete();
              if (ms < 0) return; // kept without expiry
              expiry = timer(Math.min(ms + 1, MAX_DELAY_MS), this.scheduler).subscribe(check);
            })
            .catch(fail);
        };
        expiry = timer(0, this.scheduler).subscribe(check);
      };

      // Once back from a lost connection, a read under way may wait for a marker lost with it: read again.
      const listening = this.listenTo(keys.channel, subscriber, { onMessage, catchUp, isReading: () => false, fail });
      return () => {
        listening.close();
        expiry?.unsubscribe();
        held = [];
      };
    });
  }

  async putAnswer(runId: string, response: AgentResponse): Promise<boolean> {
    checkRunId('putAnswer', runId);
    if (response === null || typeof response !== 'object' || typeof response.requestId !== 'string') {
      throw new TypeError(`putAnswer: a response must be an object with a string requestId, got ${show(response)}`);
    }
    const keys = this.keys(runId);
    const text = JSON.stringify(response);
    const n = (await this.run('putAnswer', keys.answers, keys.state, keyPart(response.requestId), text, keys.channel)) as number;
    return n !== 0;
  }

  async received(runId: string): Promise<RunReceived> {
    checkRunId('received', runId);
    const keys = this.keys(runId);
    // One transaction: the answers and the flag as they stood together.
    const replies = await this.client.multi().xrange(keys.answers, '-', '+').hexists(keys.state, 'cancel').exec();
    if (!replies) throw new Error(`received: the transaction reading run '${runId}' was aborted`);
    for (const [error] of replies) if (error) throw error;
    const entries = replies[0][1] as StreamEntry[];
    return { answers: entries.map(([id, fields]) => parseResponse(runId, numberOf(id), textOf(fields))), cancelled: replies[1][1] === 1 };
  }

  answers(runId: string): Observable<AgentResponse> {
    return new Observable<AgentResponse>((subscriber) => {
      checkRunId('answers', runId);
      const keys = this.keys(runId);
      let next = 1;
      let reading = true;
      let held: string[] = [];

      const fail = (error: unknown) => subscriber.error(error);
      const deliver = (n: number, text: string): boolean => {
        if (n < next) return true;
        if (n > next) return false;
        next++;
        subscriber.next(parseResponse(runId, n, text));
        return true;
      };
      const onMessage = (message: string) => {
        if (message.charCodeAt(0) !== 97 /* a */) return;
        if (reading) return void held.push(message);
        const newline = message.indexOf('\n');
        if (!deliver(Number(message.slice(1, newline)), message.slice(newline + 1))) catchUp();
      };
      const catchUp = () => {
        reading = true;
        this.client
          .xrange(keys.answers, `0-${next}`, '+')
          .then((entries) => {
            if (subscriber.closed) return;
            for (const [id, fields] of entries as StreamEntry[]) {
              if (subscriber.closed) return;
              deliver(numberOf(id), textOf(fields) as string);
            }
            reading = false;
            while (!reading && held.length > 0 && !subscriber.closed) onMessage(held.shift() as string);
          }, fail)
          .catch(fail);
      };

      const listening = this.listenTo(keys.channel, subscriber, { onMessage, catchUp, isReading: () => reading, fail });
      return () => {
        listening.close();
        held = [];
      };
    });
  }

  async requestCancel(runId: string): Promise<void> {
    checkRunId('requestCancel', runId);
    const keys = this.keys(runId);
    await this.run('requestCancel', keys.state, keys.channel);
  }

  cancellations(runId: string): Observable<void> {
    return new Observable<void>((subscriber) => {
      checkRunId('cancellations', runId);
      const keys = this.keys(runId);
      const cancelled = () => {
        subscriber.next();
        subscriber.complete();
      };
      const check = () => {
        this.client.hexists(keys.state, 'cancel').then(
          (set) => {
            if (set === 1 && !subscriber.closed) cancelled();
          },
          (error) => subscriber.error(error),
        );
      };
      const listening = this.notifications.listen(keys.channel, {
        message: (message) => {
          if (message === 'c') cancelled();
        },
        resync: check,
        lost: (error) => subscriber.error(error),
      });
      listening.ready.then(
        () => {
          if (!subscriber.closed) check();
        },
        (error) => subscriber.error(error),
      );
      return () => listening.close();
    });
  }

  async acquireLease(runId: string, owner: string, ttlMs: number): Promise<LeaseClaim> {
    checkRunId('acquireLease', runId);
    checkOwner('acquireLease', owner);
    const ttl = checkTtl('acquireLease', ttlMs);
    const [acquired, holder, expiresAt] = (await this.run('acquireLease', this.keys(runId).lease, JSON.stringify(owner), ttl)) as [number, string, number];
    return { acquired: acquired === 1, lease: { owner: parseOwner(holder), expiresAt } };
  }

  async renewLease(runId: string, owner: string, ttlMs: number): Promise<boolean> {
    checkRunId('renewLease', runId);
    checkOwner('renewLease', owner);
    const ttl = checkTtl('renewLease', ttlMs);
    return (await this.run('renewLease', this.keys(runId).lease, JSON.stringify(owner), ttl)) === 1;
  }

  async releaseLease(runId: string, owner: string): Promise<void> {
    checkRunId('releaseLease', runId);
    checkOwner('releaseLease', owner);
    await this.run('releaseLease', this.keys(runId).lease, JSON.stringify(owner));
  }

  async getLease(runId: string): Promise<RunLease | undefined> {
    checkRunId('getLease', runId);
    const held = (await this.run('getLease', this.keys(runId).lease)) as [string, number] | null;
    return held === null ? undefined : { owner: parseOwner(held[0]), expiresAt: held[1] };
  }

  /** A session's content after its first `upTo` turns (-1: all), its fork's prefix included; undefined when it does not exist. */
  private async sessionContent(
    id: string,
    upTo: number,
    at?: number,
  ): Promise<{ revision: number; parent: ForkParent | undefined; lastRunId: string | undefined; folded: ReturnType<typeof foldTurns> } | undefined> {
    const keys = sessionKeys(this.prefix, id);
    const answer = (await this.run('loadSession', keys.turns, keys.meta, upTo)) as [number, string, string[]] | null;
    if (answer === null) return undefined;
    const [revision, parentText, turnTexts] = answer;
    const parent = parentText === '' ? undefined : parseStored<ForkParent>(id, parentText, 'its fork record');
    let start: SessionContent;
    let before: string | undefined; // the state as of `at` within the history a fork shares with its parent
    if (parent) {
      const prefix = await this.sessionContent(parent.id, parent.revision, at);
      if (!prefix) throw new Error(`Session '${id}' in the store is a fork of '${parent.id}', which the store no longer holds`);
      const messages = prefix.folded.content.messages;
      messages.length = Math.min(messages.length, parent.at);
      start = new SessionContent(messages, parseStored<Record<string, StoredState>>(id, parent.state, 'its fork record'));
      before = prefix.folded.stateAt;
    } else {
      start = new SessionContent([], {});
    }
    const turns = turnTexts.map((text) => parseStored<SessionTurn>(id, text, 'a turn'));
    return { revision, parent, lastRunId: turns.at(-1)?.runId, folded: storedTurns(id, () => foldTurns(start, turns, at, before)) };
  }

  async load(id: string): Promise<StoredSession | undefined> {
    checkSessionId('load', id);
    const loaded = await this.sessionContent(id, -1);
    if (!loaded) return undefined;
    const { content } = loaded.folded;
    const base: StoredSession = { version: 1 as const, id, messages: withIds(content.messages), state: content.state, revision: loaded.revision };
    const withRun = loaded.lastRunId === undefined ? base : { ...base, lastRunId: loaded.lastRunId };
    return loaded.parent ? { ...withRun, parentId: loaded.parent.id, forkedAt: loaded.parent.at } : withRun;
  }

  async revision(id: string): Promise<number | undefined> {
    checkSessionId('revision', id);
    const rev = await this.client.hget(sessionKeys(this.prefix, id).meta, 'rev');
    return rev === null ? undefined : Number(rev);
  }

  async appendTurn(id: string, expected: number, turn: SessionTurn): Promise<SessionAppend> {
    checkSessionId('appendTurn', id);
    checkTurn(expected, turn);
    const text = JSON.stringify(turn);
    const keys = sessionKeys(this.prefix, id);
    const [status, revision] = (await this.run('appendTurn', keys.turns, keys.meta, expected, JSON.stringify(turn.runId), text)) as [number, number];
    if (status === 0) throw new SessionConflictError(id, expected, revision);
    return { revision, appended: status === 1 };
  }

  async fork(parentId: string, forkId: string, at: number): Promise<void> {
    checkSessionId('fork', parentId);
    checkSessionId('fork', forkId);
    const parent = await this.sessionContent(parentId, -1, typeof at === 'number' ? at : undefined);
    if (!parent) throw new TypeError(`fork: no session '${parentId}' in the store`);
    checkAt(at, parent.folded.content.messages.length);
    const parentKeys = sessionKeys(this.prefix, parentId);
    const forkKeys = sessionKeys(this.prefix, forkId);
    const listed = JSON.stringify(forkId);
    if ((await this.run('addFork', parentKeys.meta, parentKeys.forks, listed)) === 0) throw new TypeError(`fork: no session '${parentId}' in the store`);
    const record: ForkParent = { id: parentId, revision: parent.revision, at, state: parent.folded.stateAt };
    // Two scripts, as the parent's keys and the fork's may sit on two cluster slots: when the
    // second finds the fork's id taken, the first's listing is taken back. A process that dies
    // between them leaves the listing behind: `delete` takes it back once it is old enough.
    // A failed round trip may have made the fork all the same (its answer lost): the listing stays,
    // and the parent's delete takes it back if the fork is not there.
    const created = await this.run('createFork', forkKeys.meta, JSON.stringify(record));
    if (created === 0) {
      await this.run('unlistFork', parentKeys.meta, parentKeys.forks, listed, -1);
      throw new SessionConflictError(forkId, 0, 0, `Session '${forkId}' exists already`);
    }
  }

  async forks(id: string): Promise<readonly string[]> {
    checkSessionId('forks', id);
    return (await this.listedForks(id)).filter((fork) => fork.exists).map((fork) => fork.id);
  }

  /** The forks a session lists, and whether each exists (a listing can outlive its fork: see `fork`). */
  private async listedForks(id: string): Promise<Array<{ id: string; text: string; exists: boolean }>> {
    const listed = await this.client.lrange(sessionKeys(this.prefix, id).forks, 0, -1);
    if (listed.length === 0) return [];
    const ids = listed.map((text) => parseStored<string>(id, text, 'its forks'));
    const exists = await Promise.all(ids.map((fork) => this.client.exists(sessionKeys(this.prefix, fork).meta)));
    return ids.map((fork, i) => ({ id: fork, text: listed[i], exists: exists[i] === 1 }));
  }

  async delete(id: string): Promise<void> {
    checkSessionId('delete', id);
    const keys = sessionKeys(this.prefix, id);
    let [status, ...rest] = (await this.run('deleteSession', keys.turns, keys.meta, keys.forks)) as [number, ...string[]];
    if (status === 0 && (await this.unlistLeftForks(id))) {
      [status, ...rest] = (await this.run('deleteSession', keys.turns, keys.meta, keys.forks)) as [number, ...string[]];
    }
    if (status === 2) return;
    if (status === 0)
      throw new SessionConflictError(
        id,
        0,
        0,
        forkedError(
          id,
          rest.map((text) => parseStored<string>(id, text, 'its forks')),
        ),
      );
    if (rest[0]) {
      // A process dying here leaves the listing: the parent's delete takes it back (see unlistLeftForks).
      const parent = parseStored<ForkParent>(id, rest[0], 'its fork record');
      const parentKeys = sessionKeys(this.prefix, parent.id);
      await this.run('unlistFork', parentKeys.meta, parentKeys.forks, JSON.stringify(id), -1);
    }
  }

  /**
   * Takes back the listings of forks that do not exist and were listed at least
   * {@link LEFT_LISTING_MS} ago: left by a process that died in the middle of a fork or of a fork's
   * delete (a younger one may be a fork being made). True when one was taken back.
   */
  private async unlistLeftForks(id: string): Promise<boolean> {
    const keys = sessionKeys(this.prefix, id);
    const left = (await this.listedForks(id)).filter((fork) => !fork.exists);
    const unlisted = await Promise.all(left.map((fork) => this.run('unlistFork', keys.meta, keys.forks, fork.text, LEFT_LISTING_MS)));
    return unlisted.includes(1);
  }

  async acquireSession(id: string, owner: string, ttlMs: number): Promise<SessionLeaseClaim> {
    checkLease('acquireSession', id, owner, ttlMs);
    const [acquired, holder, expiresAt] = (await this.run('acquireLease', sessionKeys(this.prefix, id).lease, JSON.stringify(owner), Math.ceil(ttlMs))) as [
      number,
      string,
      number,
    ];
    return { acquired: acquired === 1, lease: { owner: parseOwner(holder), expiresAt } };
  }

  async renewSession(id: string, owner: string, ttlMs: number): Promise<boolean> {
    checkLease('renewSession', id, owner, ttlMs);
    return (await this.run('renewLease', sessionKeys(this.prefix, id).lease, JSON.stringify(owner), Math.ceil(ttlMs))) === 1;
  }

  async releaseSession(id: string, owner: string): Promise<void> {
    checkSessionId('releaseSession', id);
    checkOwner('releaseSession', owner);
    const keys = sessionKeys(this.prefix, id);
    await this.run('releaseSession', keys.lease, JSON.stringify(owner), keys.channel);
  }

  sessionReleases(id: string): Observable<void> {
    return new Observable<void>((subscriber) => {
      checkSessionId('sessionReleases', id);
      const listening = this.notifications.listen(sessionKeys(this.prefix, id).channel, {
        message: () => subscriber.next(),
        // Back after a lost connection: a release may have been missed; the waiter tries again.
        resync: () => subscriber.next(),
        lost: (error) => subscriber.error(error),
      });
      listening.ready.then(
        () => {
          if (!subscriber.closed) subscriber.next();
        },
        (error: unknown) => subscriber.error(error),
      );
      return () => listening.close();
    });
  }
}

/** What a fork keeps of its parent: its id and revision, the messages shared, the state copied (JSON). */
interface ForkParent {
  readonly id: string;
  readonly revision: number;
  readonly at: number;
  readonly state: string;
}

function parseStored<T>(id: string, text: string, what: string): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new SessionDataError(id, `Session '${id}' in the store: ${what} is not JSON`);
  }
}

/**
 * A lease's owner is kept as JSON (a JSON string is ASCII-safe where an owner id is not
 * well-formed UTF-16, and JSON.stringify keeps distinct ids distinct).
 */
function parseOwner(text: string): string {
  try {
    const owner: unknown = JSON.parse(text);
    if (typeof owner === 'string') return owner;
  } catch {
    // reported below
  }
  throw new Error(`A run's lease in the store holds ${show(text)}, not an owner written by this store`);
}
