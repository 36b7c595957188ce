// Options checked by name: every public factory refuses an option it does not know.
import { isArray } from './isArray';
import { show } from './show';

/**
 * The option names of the options interface `T`, for {@link checkOptionNames}: the object must list
 * every key of `T` and no other (TypeScript checks both), so the list cannot drift from the
 * interface. Computed once, at module load.
 *
 * @example
 * const OPTIONS = optionNames<CircuitBreakerOptions>({ maxConsecutiveCalls: true, message: true });
 */
export function optionNames<T extends object>(names: { readonly [K in keyof T]-?: true }): readonly string[] {
  return Object.freeze(Object.keys(names));
}

/**
 * Validates that the object `options` has only `known` options (a misspelt one would be
 * left out in silence): `<owner>: unknown option(s) 'a', 'b' (known: x, y)`.
 */
export function checkOptionNames(owner: string, options: object, known: readonly string[]): void {
  const unknown = Object.keys(options).filter((name) => !known.includes(name));
  if (unknown.length > 0) {
    throw new TypeError(`${owner}: unknown option(s) ${unknown.map((name) => `'${name}'`).join(', ')} (known: ${known.join(', ')})`);
  }
}

/**
 * Validates that `options` is an options object, not `null`, an array, a function or a primitive
 * (`undefined` too: a factory whose options are optional has `options = {}` in its signature):
 * `<owner>: options must be an object, got <value>`. `shape` adds what the object must hold, for
 * options with required ones: `with 'maxCost' and 'pricing'` → `… must be an object with 'maxCost'
 * and 'pricing', got undefined`. The one guard of every factory's options, so all say it alike.
 */
export function checkOptionsObject(owner: string, options: unknown, shape?: string): asserts options is object {
  if (typeof options !== 'object' || options === null || isArray(options)) {
    throw new TypeError(`${owner}: options must be an object${shape === undefined ? '' : ` ${shape}`}, got ${show(options)}`);
  }
}

/**
 * {@link checkOptionsObject}, then {@link checkOptionNames}: what a factory checks of its options
 * object before reading any option.
 *
 * @example
 * checkOptions('memoryStore', options, MEMORY_STORE_OPTIONS);
 */
export function checkOptions(owner: string, options: unknown, known: readonly string[], shape?: string): asserts options is object {
  checkOptionsObject(owner, options, shape);
  checkOptionNames(owner, options, known);
}
