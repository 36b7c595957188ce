/**
 * Makes `init` a constructor of plain objects: `new` gives an object whose prototype is
 * `Object.prototype`, indistinguishable from the object literal with the same fields (also to
 * `toStrictEqual` and `deepStrictEqual`).
 *
 * For objects made on every iteration (usage, requests): an object literal has a V8 allocation
 * site, and after long streams V8 may judge a site long-lived and allocate its objects in the old
 * generation from then on ("pretenuring"). These objects die young, but there only a full
 * collection frees them, and they come more often. Objects made by `new` have no allocation site.
 * (So `x instanceof Maker` is true of every object: do not test it.)
 *
 * @example
 * const Point = plainObjects(function (this: { x: number; y: number }, x: number, y: number) {
 *   this.x = x;
 *   this.y = y;
 * });
 * new Point(1, 2); // { x: 1, y: 2 }
 */
export function plainObjects<A extends unknown[], T extends object>(init: (this: T, ...args: A) => void): new (...args: A) => T {
  init.prototype = Object.prototype;
  return init as unknown as new (...args: A) => T;
}
