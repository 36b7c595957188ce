// Options checked by name: every public factory refuses an option it does not know.

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
