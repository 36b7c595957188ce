/**
 * The requests of one run that still wait for an answer. `respond()` consults it so that an
 * unknown, duplicate or late answer is refused (returns false) instead of silently ignored.
 */
export class RequestRegistry {
  private readonly open = new Set<string>();

  add(requestId: string): void {
    this.open.add(requestId);
  }

  /** Closes a request; true when it was open. */
  settle(requestId: string): boolean {
    return this.open.delete(requestId);
  }

  isOpen(requestId: string): boolean {
    return this.open.has(requestId);
  }

  /** The ids still open, oldest first. */
  pending(): string[] {
    return [...this.open];
  }
}
