/** What every peer adapter implements. Each method drives the peer's public streaming API. */
export interface Peer {
  /** Stable id (used for the child process and in peers.json). */
  id: string;
  /** Row label in the table. */
  label: string;
  /** npm packages whose installed versions are reported for this peer. */
  packages: string[];
  /** S1: one model turn streaming `n` text deltas; returns the text-delta events the consumer counted. */
  s1(n: number): Promise<number>;
  /** S2: `k` tool turns echo({ i }) then one text turn. */
  s2(k: number): Promise<{ toolCalls: number; toolResultEvents: number; finalText: string }>;
  /**
   * S3: one run whose model calls `wait({ i })`; the tool awaits `gate(i)` (the benchmark holds it).
   * Resolves with the run's final text once released.
   */
  s3(i: number, gate: (i: number) => Promise<void>): Promise<string>;
}
