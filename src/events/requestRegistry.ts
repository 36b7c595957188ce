/**
 * The requests of one run that still wait for an answer. `respond()` consults it so that an
 * unknown, duplicate or late answer is refused (returns false) instead of silently ignored.
 */
export class RequestRegistry {
  /**
   * Made on the first request: most runs never ask anything. An array, not a Set: a run has a
   * question or two open at a time, and a waiting run keeps this.
   */
  private open: string[] | undefined;

  add(requestId: string): void {
    if (!this.open) this.open = [requestId];
    else if (!this.open.includes(requestId)) this.open.push(requestId);
  }

  /** Closes a request; true when it was open. */
  settle(requestId: string): boolean {
    const at = this.open ? this.open.indexOf(requestId) : -1;
    if (at < 0) return false;
    (this.open as string[]).splice(at, 1);
    return true;
  }

  isOpen(requestId: string): boolean {
    return this.open !== undefined && this.open.includes(requestId);
  }

  /** The ids still open, oldest first. */
  pending(): string[] {
    return this.open ? this.open.slice() : [];
  }
}
