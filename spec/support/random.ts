/**
 * The seeded randomness of the invariants suites: a case drawn from a seed is drawn the same way
 * on every run and every machine, so a failing seed replays (`FUZZ_SEED=<seed>`).
 */

/** mulberry32: a small, fast, deterministic generator of numbers in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Draws from one seed. */
export class Rng {
  readonly next: () => number;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)];
  }
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [out[i], out[j]] = [out[j], out[i]];
    }
    return out;
  }
}

/** The seeds of a suite's blocks: `FUZZ_SEED` replays one, `FUZZ_CASES` sets how many per block. */
export interface FuzzSeeds {
  /** The seed `FUZZ_SEED` names, when one is being replayed. */
  readonly replay: number | undefined;
  /** Cases per block. */
  readonly perBlock: number;
  /** The block's seeds from `base` (`n` of them, default `perBlock`), or only the replayed one. */
  readonly seedsFrom: (base: number, n?: number) => number[];
}

/** Reads `FUZZ_SEED` and `FUZZ_CASES` (default `defaultCases` per block). */
export function fuzzSeeds(defaultCases: number): FuzzSeeds {
  const replay = process.env.FUZZ_SEED !== undefined ? Number(process.env.FUZZ_SEED) : undefined;
  const perBlock = Number(process.env.FUZZ_CASES ?? defaultCases);
  return {
    replay,
    perBlock,
    seedsFrom: (base, n = perBlock) => (replay !== undefined ? [replay] : Array.from({ length: n }, (_, i) => base + i)),
  };
}
