/**
 * The requests of one run that still wait for an answer. `respond()` consults it so that an
 * unknown, duplicate or late answer is refused (returns false) instead of silently ignored.
 */
export class RequestRegistry {
  /** Made on the first request: most runs never ask anything. */
  private open: Set<string> | undefined;

  add(requestId: string): void {
    (this.open ??= new Set()).add(requestId);
  }

  /** Closes a request; true when it was open. */
  settle(requestId: string): boolean {
    return this.open?.delete(requestId) ?? false;
  }

  isOpen(requestId: string): boolean {
    return this.open?.has(requestId) ?? false;
  }

  /** The ids still open, oldest first. */
  pending(): string[] {
    return this.open ? [...this.open] : [];
  }
}
