/**
 * The option checks the operators share: each throws a TypeError naming the operator and the
 * option, and returns the value it accepted.
 */
import type { SchedulerLike } from 'rxjs';
import { show } from '../../src/internal/show';
import { isScheduler } from '../../src/internal/isScheduler';
import { checkOptionNames, checkOptions as checkOptionsObjectAndNames } from '../../src/internal/optionNames';

export { checkOptionNames, checkOptionsObject, optionNames } from '../../src/internal/optionNames';

/**
 * Validates that `options` is an object (or undefined, unless `required` says what it must hold)
 * with only `known` options (a misspelt one would be left out in silence, its default applied) and
 * no null option: the factories' own check (`<owner>: options must be an object <required>, got …`,
 * `<owner>: unknown option(s) …`), then nulls.
 */
export function checkOptions(owner: string, options: unknown, known: readonly string[], required?: string): void {
  if (options === undefined && required === undefined) return;
  checkOptionsObjectAndNames(owner, options, known, required);
  // `?? default` would take null for "the default" in silence.
  for (const [name, value] of Object.entries(options)) {
    if (value === null) throw new TypeError(`${owner}: ${name} must not be null (leave it out for the default)`);
  }
}

/**
 * Validates that the options object `value`, nested at `path` in the options (`'trigger'`,
 * `'skills[1]'`), has only `known` options, naming each by its path:
 * `<owner>: unknown option(s) 'trigger.tokenz' (known: trigger.tokens)`. Only for fixed-shape
 * objects, never for one whose keys are the user's (tool names, say). Checks the names only.
 */
export function checkNestedOptionNames(owner: string, path: string, value: object, known: readonly string[]): void {
  const unknown = Object.keys(value).filter((name) => !known.includes(name));
  if (unknown.length === 0) return;
  const at = (name: string) => `${path}.${name}`;
  // Through checkOptionNames, so both levels throw in the same words.
  checkOptionNames(owner, Object.fromEntries(unknown.map((name) => [at(name), true])), known.map(at));
}

/** Validates `maxRetries` (an integer >= 0). */
export function checkMaxRetries(owner: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`${owner}: maxRetries must be an integer >= 0, got ${show(value)}`);
  }
  return value;
}

/** Validates an optional predicate option. */
export function checkFunction<F>(owner: string, name: string, value: F | undefined): F | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw new TypeError(`${owner}: ${name} must be a function, got ${show(value)}`);
  }
  return value;
}

/** Validates an optional `scheduler` option. */
export function checkScheduler(owner: string, value: SchedulerLike | undefined): SchedulerLike | undefined {
  if (value !== undefined && !isScheduler(value)) {
    throw new TypeError(`${owner}: scheduler must be an rxjs SchedulerLike, got ${show(value)}`);
  }
  return value;
}

/** Validates an optional `tools` filter (tool names) into a Set, or undefined for "every tool". */
export function checkToolNames(owner: string, value: readonly string[] | undefined): ReadonlySet<string> | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || value.some((name) => typeof name !== 'string')) {
    throw new TypeError(`${owner}: tools must be an array of tool names, got ${show(value)}`);
  }
  return new Set(value);
}
