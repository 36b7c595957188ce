/**
 * A definer of `name` as an own, enumerable, configurable getter that returns `read(source)`,
 * with `source` kept under a non-enumerable symbol of the object. A spread copy still has the
 * value (it reads the getter), and so does a Proxy over the object or an object derived from it.
 *
 * Why not an object literal with a getter of its own: each one costs a closure and, in V8, a hidden
 * class per object (about ten times the price), and keeps young garbage alive through scavenges.
 * Here the getter is one function per definer.
 *
 * @example
 * const defineSignal = ownGetter('signal', (lazy: LazyAbort) => lazy.signal);
 * const options = {};
 * defineSignal(options, new LazyAbort()); // options.signal reads lazy.signal when first asked
 */
export function ownGetter<S, V>(name: string, read: (source: S) => V): (target: object, source: S) => void {
  const SOURCE = Symbol(name);
  const getter: PropertyDescriptor = {
    get(this: { [SOURCE]: S }): V {
      return read(this[SOURCE]);
    },
    enumerable: true,
    configurable: true,
  };
  return (target, source) => {
    Object.defineProperty(target, SOURCE, { value: source });
    Object.defineProperty(target, name, getter);
  };
}
