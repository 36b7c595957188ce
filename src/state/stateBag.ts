import { StateError, type StateDef, type StateScope } from './defineState';
import { zodIssues } from '../internal/zodIssues';
import { errorMessage } from '../internal/errorMessage';

/** A state value as a snapshot stores it. */
export interface StoredState {
  readonly version: number;
  readonly value: unknown;
}

/**
 * The bag's entries and the records holding them are made with `new`, not as object literals:
 * a literal has a V8 allocation site, which V8 may judge long-lived after long streams and then
 * allocate in the old generation, where a dropped bag would keep the state values it points at
 * alive through young collections (see LinkedSubscriber). A bag is made per state update.
 */
class Entry {
  constructor(
    public scope: StateScope,
    public version: number,
    public value: unknown,
    /**
     * The definition that wrote or parsed the value (another one with the same key checks it
     * again); undefined while a stored value is still raw.
     */
    public def: StateDef<unknown> | undefined,
  ) {}
}

/**
 * A record of entries by definition key (made with `new`, not a literal, see Entry). Its
 * prototype holds nothing, so a key such as `constructor` or `toString` finds no inherited member.
 */
const Entries = function Entries() {} as unknown as new () => Record<string, Entry>;
Entries.prototype = Object.create(null) as object;

/**
 * The value of `entry` as `def` reads it: a stored (raw) value, or one written through another
 * definition of the key, goes through the same checks: its version (newer is refused, older needs
 * `migrate`), then `def`'s schema. A typed read never yields what the reader's schema rejects.
 */
function readAs<T>(entry: Entry, def: StateDef<T>): T {
  // Written through another definition, else as stored in a snapshot (raw).
  const written = entry.def !== undefined;
  const origin = written ? 'a value written through another definition of this key' : 'stored value';
  let raw = entry.value;
  if (entry.version > def.version) {
    // Written by a newer definition (a rollback, a rolling deploy): parsing would drop its new fields.
    throw new StateError(
      def.key,
      written
        ? `${origin} has version ${entry.version}, newer than version ${def.version}`
        : `stored version ${entry.version} is newer than version ${def.version}`,
    );
  }
  if (entry.version !== def.version) {
    if (!def.migrate) {
      throw new StateError(
        def.key,
        written
          ? `${origin} has version ${entry.version}, not version ${def.version}, and no migrate() was given`
          : `stored version ${entry.version} does not match version ${def.version} and no migrate() was given`,
      );
    }
    try {
      raw = def.migrate(raw, entry.version);
    } catch (error) {
      throw new StateError(def.key, `migrate() from version ${entry.version} failed: ${errorMessage(error)}`);
    }
  }
  const result = def.schema.safeParse(raw);
  if (!result.success) {
    throw new StateError(def.key, `${origin} does not fit the schema: ${zodIssues(result.error)}`);
  }
  return result.data;
}

/**
 * An immutable map of state values keyed by definition key. Values restored from a snapshot
 * stay raw until first read, when the definition's schema parses them (once: the parse result
 * replaces the raw value in place, which is invisible to readers).
 */
export class StateBag {
  static readonly empty = new StateBag(new Entries());

  private constructor(private readonly entries: Readonly<Record<string, Entry>>) {}

  /** A bag of raw stored values (from a snapshot). */
  static fromStored(stored: Readonly<Record<string, StoredState>> | undefined): StateBag {
    if (!stored) return StateBag.empty;
    const entries = new Entries();
    for (const key of Object.keys(stored)) {
      const item = stored[key];
      entries[key] = new Entry('session', item.version, item.value, undefined);
    }
    return new StateBag(entries);
  }

  /** A bag of raw stored values of both scopes (from a journal's checkpoint). */
  static fromScopes(session: Readonly<Record<string, StoredState>>, run: Readonly<Record<string, StoredState>>): StateBag {
    const entries = new Entries();
    for (const key of Object.keys(session)) entries[key] = new Entry('session', session[key].version, session[key].value, undefined);
    for (const key of Object.keys(run)) entries[key] = new Entry('run', run[key].version, run[key].value, undefined);
    return new StateBag(entries);
  }

  get<T>(def: StateDef<T>): T {
    const entry = this.entries[def.key];
    if (!entry) return def.initial();
    if (entry.scope !== def.scope) {
      throw new StateError(def.key, `is defined with scope '${def.scope}' but stored with scope '${entry.scope}'`);
    }
    if (entry.def === def) return entry.value as T;
    const value = readAs(entry, def);
    if (entry.def === undefined) {
      // A stored value is parsed once: the result replaces it in place, invisibly to readers.
      entry.value = value;
      entry.version = def.version;
      entry.def = def;
    }
    return value;
  }

  /**
   * A copy for a run: its raw (stored) entries are its own, so a value the run parses in place (a
   * migration on first read) changes the run's copy, and reaches the session only with the turn.
   */
  fork(): StateBag {
    let entries: Record<string, Entry> | undefined;
    for (const key of Object.keys(this.entries)) {
      const entry = this.entries[key];
      if (entry.def !== undefined) continue; // written entries are never changed in place
      entries ??= Object.assign(new Entries(), this.entries);
      entries[key] = new Entry(entry.scope, entry.version, entry.value, undefined);
    }
    return entries ? new StateBag(entries) : this;
  }

  set<T>(def: StateDef<T>, value: T): StateBag {
    // Not `{ ...this.entries, [def.key]: entry }`: on V8 a spread with an added key is ten times slower.
    const entries = Object.assign(new Entries(), this.entries);
    entries[def.key] = new Entry(def.scope, def.version, value, def);
    return new StateBag(entries);
  }

  update<T>(def: StateDef<T>, fn: (current: T) => T): StateBag {
    return this.set(def, fn(this.get(def)));
  }

  /** This bag with the entries of `top` in place of its own of the same keys (a run's starting state over its session's). */
  overlay(top: StateBag): StateBag {
    const keys = Object.keys(top.entries);
    if (keys.length === 0) return this;
    const entries = Object.assign(new Entries(), this.entries);
    for (const key of keys) entries[key] = top.entries[key];
    return new StateBag(entries);
  }

  /** Only the entries of `scope` (a session keeps its session-scoped state, never a run's). */
  ofScope(scope: StateScope): StateBag {
    const entries = new Entries();
    for (const key of Object.keys(this.entries)) if (this.entries[key].scope === scope) entries[key] = this.entries[key];
    return new StateBag(entries);
  }

  has(key: string): boolean {
    return key in this.entries;
  }

  /** Plain JSON of the values of one scope (parsed or still raw). */
  toStored(scope: StateScope): Record<string, StoredState> {
    const out: Record<string, StoredState> = {};
    for (const key of Object.keys(this.entries)) {
      const entry = this.entries[key];
      // defineProperty: a key named `__proto__` is stored, not made the prototype.
      if (entry.scope === scope)
        Object.defineProperty(out, key, { value: { version: entry.version, value: entry.value }, enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
}
