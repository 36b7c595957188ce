/** An object or array still open, with the key its next (or current) value goes to. */
interface Frame {
  readonly container: Record<string, unknown> | unknown[];
  readonly isArray: boolean;
  /** An object's key being read or whose value is being read; an array's index. */
  key: string | number;
}

const enum State {
  /** A value may start (after `:`, `,` in an array, or at the top). */
  Value,
  /** After `[`: a value or the end. */
  FirstValue,
  /** After `,` in an object: a key. */
  Key,
  /** After `{`: a key or the end. */
  FirstKey,
  /** Inside a key's quotes. */
  KeyText,
  /** After a key: the colon. */
  Colon,
  /** Inside a string value's quotes. */
  Text,
  /** A number or a literal (`true`, `false`, `null`) being read. */
  Word,
  /** After a value: `,` or the end of its container. */
  After,
  /** The top-level value is complete. */
  Done,
  /** Not JSON: nothing more is read. */
  Failed,
}

const ESCAPES: Readonly<Record<string, string>> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/**
 * A tolerant, incremental parser of a JSON object (structured output is one): fed the text piece
 * by piece, it tells whether the value parsed so far changed and gives that value as it stands,
 * open strings, objects and arrays included (a number or literal appears once it is complete, a
 * key once its value begins). Each character is read once; a snapshot copies only the containers
 * still open (closed ones are shared, never changed again), so a UI may keep every partial it was
 * given.
 *
 * Text that is not a JSON object stops it: the value stays what it was (the complete text is
 * judged by `JSON.parse` anyway). A sentence that starts like another JSON value (`42 files…`,
 * `true, …`) gives none.
 *
 * @example
 * const parser = new PartialJson();
 * parser.push('{"city":"Par'); // true
 * parser.value();              // { city: 'Par' }
 * parser.push('is","days":[1,'); // true
 * parser.value();              // { city: 'Paris', days: [1] }
 */
export class PartialJson {
  private state: State = State.Value;
  private readonly stack: Frame[] = [];
  private root: unknown = undefined;
  /** The string (key or value) being read, and the escape being read in it. */
  private text = '';
  private escape: string | undefined = undefined;
  private word = '';
  private changed = false;

  /** Reads a piece of the text; true when the value parsed so far changed. */
  push(piece: string): boolean {
    this.changed = false;
    const n = piece.length;
    let i = 0;
    while (i < n) {
      const state = this.state;
      if (state === State.Failed || state === State.Done) {
        if (state === State.Done) this.trailing(piece, i);
        break;
      }
      if (state === State.Text || state === State.KeyText) {
        i = this.readString(piece, i);
        continue;
      }
      const c = piece[i];
      if (state === State.Word) {
        if (isWordChar(c)) {
          this.word += c;
          i++;
          continue;
        }
        this.endWord();
        continue; // the same character, now after the word
      }
      i++;
      if (c === ' ' || c === '\n' || c === '\r' || c === '\t') continue;
      switch (state) {
        case State.Value:
          this.startValue(c);
          break;
        case State.FirstValue:
          if (c === ']') this.close();
          else this.startValue(c);
          break;
        case State.Key:
        case State.FirstKey:
          if (c === '"') {
            this.state = State.KeyText;
            this.text = '';
          } else if (c === '}' && state === State.FirstKey) this.close();
          else this.state = State.Failed;
          break;
        case State.Colon:
          this.state = c === ':' ? State.Value : State.Failed;
          break;
        case State.After:
          this.afterValue(c);
          break;
      }
    }
    return this.changed;
  }

  /**
   * The value parsed so far (undefined before any); a complete text's value is `JSON.parse`'s.
   * Every call after a change returns a new object for each container still open.
   */
  value(): unknown {
    const stack = this.stack;
    if (stack.length === 0) return this.root;
    let child: unknown = undefined;
    for (let d = stack.length - 1; d >= 0; d--) {
      const frame = stack[d];
      const copy: Record<string, unknown> | unknown[] = frame.isArray ? (frame.container as unknown[]).slice() : { ...frame.container };
      if (d < stack.length - 1) put(copy, frame.key, child);
      child = copy;
    }
    return child;
  }

  /** The top-level value is complete (and only whitespace followed it). */
  get done(): boolean {
    return this.state === State.Done;
  }

  private top(): Frame {
    return this.stack[this.stack.length - 1];
  }

  private startValue(c: string): void {
    if (this.stack.length === 0 && c !== '{') {
      this.state = State.Failed;
    } else if (c === '{' || c === '[') {
      const isArray = c === '[';
      const container = isArray ? [] : {};
      this.settle(container);
      this.stack.push({ container, isArray, key: isArray ? 0 : '' });
      this.state = isArray ? State.FirstValue : State.FirstKey;
    } else if (c === '"') {
      this.text = '';
      this.state = State.Text;
      this.settle('');
    } else if (c === '-' || (c >= '0' && c <= '9') || c === 't' || c === 'f' || c === 'n') {
      this.word = c;
      this.state = State.Word;
    } else {
      this.state = State.Failed;
    }
  }

  /** Puts `value` where the next value goes (the top, or the open container's current key). */
  private settle(value: unknown): void {
    this.changed = true;
    const stack = this.stack;
    if (stack.length === 0) {
      this.root = value;
      return;
    }
    const frame = stack[stack.length - 1];
    put(frame.container, frame.key, value);
  }

  /** Reads string characters from `i` up to the closing quote or the piece's end; returns where it stopped. */
  private readString(piece: string, i: number): number {
    const n = piece.length;
    let from = i;
    let text = this.text;
    while (i < n) {
      if (this.escape !== undefined) {
        const c = piece[i++];
        this.escape += c;
        const esc = this.escape;
        if (esc.length === 1 && esc !== 'u') {
          const mapped = ESCAPES[esc];
          if (mapped === undefined) return this.fail(n);
          text += mapped;
          this.escape = undefined;
        } else if (esc.length === 5) {
          if (!/^u[0-9a-fA-F]{4}$/.test(esc)) return this.fail(n);
          text += String.fromCharCode(parseInt(esc.slice(1), 16));
          this.escape = undefined;
        }
        from = i;
        continue;
      }
      const c = piece.charCodeAt(i);
      if (c === 34 /* " */ || c === 92 /* \ */) {
        text += piece.slice(from, i);
        i++;
        from = i;
        if (c === 92) {
          this.escape = '';
          continue;
        }
        this.text = text;
        this.endString();
        return i;
      }
      i++;
    }
    text += piece.slice(from, i);
    if (this.state === State.Text && text !== this.text) {
      this.text = text;
      this.settle(text);
    }
    this.text = text;
    return i;
  }

  private endString(): void {
    const text = this.text;
    this.text = '';
    if (this.state === State.KeyText) {
      const frame = this.top();
      frame.key = text;
      this.state = State.Colon;
      return;
    }
    // Unchanged when the open string already showed all of it.
    const frame = this.stack.length > 0 ? this.top() : undefined;
    const shown = frame ? (frame.container as Record<string | number, unknown>)[frame.key] : this.root;
    if (shown !== text) this.settle(text);
    this.valueEnded();
  }

  private endWord(): void {
    const word = this.word;
    this.word = '';
    let value: unknown;
    if (word === 'true') value = true;
    else if (word === 'false') value = false;
    else if (word === 'null') value = null;
    else {
      value = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$/.test(word) ? Number(word) : undefined;
      if (value === undefined) {
        this.state = State.Failed;
        return;
      }
    }
    this.settle(value);
    this.valueEnded();
  }

  private valueEnded(): void {
    this.state = this.stack.length === 0 ? State.Done : State.After;
  }

  private afterValue(c: string): void {
    const frame = this.top();
    if (c === ',') {
      if (frame.isArray) {
        frame.key = (frame.container as unknown[]).length;
        this.state = State.Value;
      } else {
        this.state = State.Key;
      }
    } else if ((c === '}' && !frame.isArray) || (c === ']' && frame.isArray)) {
      this.close();
    } else {
      this.state = State.Failed;
    }
  }

  /**
   * Closes the top container: its parent (if any) holds it as a settled value, never changed
   * again. The value shown does not change (the container was shown open already).
   */
  private close(): void {
    this.stack.pop();
    this.valueEnded();
  }

  /** After the complete value: whitespace only. */
  private trailing(piece: string, i: number): void {
    for (; i < piece.length; i++) {
      const c = piece[i];
      if (c !== ' ' && c !== '\n' && c !== '\r' && c !== '\t') {
        this.state = State.Failed;
        return;
      }
    }
  }

  private fail(n: number): number {
    this.state = State.Failed;
    return n;
  }
}

/** Sets `container[key]`; a `__proto__` key is an own property, as `JSON.parse` makes it, not the prototype. */
function put(container: Record<string, unknown> | unknown[], key: string | number, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(container, key, { value, writable: true, enumerable: true, configurable: true });
  else (container as Record<string | number, unknown>)[key] = value;
}

function isWordChar(c: string): boolean {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c === '-' || c === '+' || c === '.' || c === 'E';
}
