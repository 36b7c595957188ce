import { keepShape } from './keepShape';

/** Pieces gathered before they are joined into one flat chunk. */
const CHUNK = 64;

/**
 * Gathers streamed text pieces into one string. Pieces go into a fixed buffer of 64 slots
 * that is joined into one flat chunk each time it fills (and reused), and the chunks are
 * concatenated. No quadratic string building, and no single growing array: for a long stream,
 * pushing to one array (which re-allocates and copies its backing store as it grows) and joining
 * it cost about twice what this does per piece.
 *
 * @example
 * const text = new TextBuilder();
 * text.append('Hel');
 * text.append('lo');
 * text.toString(); // 'Hello'
 */
let kept = false;

export class TextBuilder {
  private readonly buffer = new Array<string>(CHUNK);
  private count = 0;
  /** The buffers joined so far (a few concatenations: one per 64 pieces). */
  private joined = '';

  constructor() {
    if (!kept) {
      kept = true; // before: the kept one's own constructor comes here too
      keepShape(new TextBuilder());
    }
  }

  append(piece: string): void {
    const buffer = this.buffer;
    buffer[this.count++] = piece;
    if (this.count === CHUNK) {
      this.joined += buffer.join('');
      this.count = 0;
    }
  }

  /** All pieces, joined. */
  toString(): string {
    return this.joined + this.buffer.slice(0, this.count).join('');
  }
}
