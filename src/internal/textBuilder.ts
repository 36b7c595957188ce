/** Pieces gathered before they are joined into one flat chunk. */
const CHUNK = 64;

/**
 * Gathers streamed text pieces and joins them once. Pieces go into a fixed buffer of 64 slots
 * that is joined into one flat chunk each time it fills (and reused), and the chunks are
 * concatenated. No quadratic string building, and no single growing array: a long stream's array
 * of pieces outgrows the regular heap pages, and every re-allocation and copy of its backing
 * store then made one delta cost several times what appending to this buffer costs.
 *
 * @example
 * const text = new TextBuilder();
 * text.append('Hel');
 * text.append('lo');
 * text.toString(); // 'Hello'
 */
export class TextBuilder {
  /** Allocated with the first piece: most builders (a tool turn's text) never get one. */
  private buffer: string[] | undefined = undefined;
  private count = 0;
  /** The buffers joined so far (a few concatenations: one per 64 pieces). */
  private joined = '';

  /** Whether no piece (not even an empty one) was appended. */
  get isEmpty(): boolean {
    return this.buffer === undefined;
  }

  append(piece: string): void {
    const buffer = (this.buffer ??= new Array<string>(CHUNK));
    buffer[this.count++] = piece;
    if (this.count === CHUNK) {
      this.joined += buffer.join('');
      this.count = 0;
    }
  }

  /** All pieces, joined. */
  toString(): string {
    return this.buffer ? this.joined + this.buffer.slice(0, this.count).join('') : '';
  }
}
