/**
 * `Array.isArray` that keeps what a readonly array holds: TypeScript's own narrows a
 * `readonly T[]` to `any[]`, which lets everything read from it go unchecked.
 */
export const isArray: (value: unknown) => value is readonly unknown[] = Array.isArray;
