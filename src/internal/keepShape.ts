/**
 * Keeps one object of a hot class alive for the life of the process.
 *
 * Optimized code checks the hidden class (V8's map) of every object it reads, and holds those
 * maps weakly. The map an object gets from its constructor's field assignments is reached from
 * its class's initial map by a transition, which V8 also holds weakly: once the last instance is
 * gone, a full GC collects the map and throws away every optimized function that checked it. A
 * run's objects all end with the run, so a full GC between two runs sent the per-delta path back
 * to the interpreter, and the next run paid for its re-optimization. One kept instance per class
 * keeps its map, and the optimized code with it.
 *
 * @example
 * let kept = false;
 * class Assembler {
 *   private text = '';
 *   constructor() {
 *     if (!kept) {
 *       kept = true; // before: the kept one's own constructor comes here too
 *       keepShape(new Assembler());
 *     }
 *   }
 * }
 */
export function keepShape(instance: object): void {
  kept.push(instance);
}

const kept: object[] = [];
