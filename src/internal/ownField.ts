/**
 * The value of `value`'s own property `key`; `undefined` when `value` is not an object or only
 * inherits the property. Answers from outside (a person's response, a parsed message) are read so:
 * a polluted `Object.prototype` or an object made with `Object.create({ approved: true })` must not
 * approve anything.
 *
 * @example
 * if (ownField(response, 'approved') === true) allow();
 */
export function ownField(value: unknown, key: PropertyKey): unknown {
  return typeof value === 'object' && value !== null && Object.hasOwn(value, key) ? (value as Record<PropertyKey, unknown>)[key] : undefined;
}
