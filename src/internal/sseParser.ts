/**
 * The SSE line and field parser (https://html.spec.whatwg.org/multipage/server-sent-events.html).
 * Each chunk is scanned once; an unfinished line is kept as fragments and joined once, when its
 * line break arrives, so a long line split into many chunks costs linear time. `dispatch` gets
 * each frame's event type (`message` when none) and its data (several `data:` lines joined with
 * `\n`); a frame without data is not dispatched. `stopped` ends the scan of a chunk early (the
 * reader is gone).
 *
 * @example
 * const parser = new SSEParser((type, data) => console.log(type, data), () => false);
 * parser.push('data: {"a":1}\n\n'); // message {"a":1}
 * parser.end();
 */
export class SSEParser {
  private fragments: string[] = [];
  private afterCR = false;
  private started = false;
  private data: string[] = [];
  private eventType = '';
  private readonly lineBreak = /\r\n|\r|\n/g;

  constructor(
    private readonly dispatch: (type: string, data: string) => void,
    private readonly stopped: () => boolean,
  ) {}

  push(text: string): void {
    if (text.length === 0) return;
    let start = 0;
    if (!this.started) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) start = 1;
    }
    // A CR that ended the previous chunk and an LF that starts this one are one line break.
    if (this.afterCR) {
      this.afterCR = false;
      if (text.charCodeAt(start) === 10) start++;
    }
    const lineBreak = this.lineBreak;
    lineBreak.lastIndex = start;
    for (let m = lineBreak.exec(text); m !== null; m = lineBreak.exec(text)) {
      const end = m.index;
      const line = this.fragments.length > 0 ? this.takeFragments() + text.slice(start, end) : text.slice(start, end);
      start = end + m[0].length;
      if (m[0] === '\r' && start === text.length) this.afterCR = true;
      this.line(line);
      if (this.stopped()) return;
    }
    if (start < text.length) this.fragments.push(text.slice(start));
  }

  /** The end of the stream: a last line without its line break, a last frame without its blank line. */
  end(): void {
    if (this.fragments.length > 0) this.line(this.takeFragments());
    if (!this.stopped()) this.line('');
  }

  private takeFragments(): string {
    const joined = this.fragments.length === 1 ? this.fragments[0] : this.fragments.join('');
    this.fragments = [];
    return joined;
  }

  private line(line: string): void {
    if (line.length === 0) {
      const data = this.data;
      const type = this.eventType || 'message';
      this.data = [];
      this.eventType = '';
      if (data.length > 0) this.dispatch(type, data.length === 1 ? data[0] : data.join('\n'));
      return;
    }
    if (line.charCodeAt(0) === 58 /* ':' */) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32 /* ' ' */) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.eventType = value;
    // `id`, `retry` and unknown fields carry nothing an agent event needs.
  }
}
