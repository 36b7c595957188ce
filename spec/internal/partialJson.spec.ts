import { PartialJson } from '../../src/internal/partialJson';

/** Feeds `text` in pieces of `size`; returns the values seen at each change. */
function feed(text: string, size: number): { seen: unknown[]; parser: PartialJson } {
  const parser = new PartialJson();
  const seen: unknown[] = [];
  for (let i = 0; i < text.length; i += size) if (parser.push(text.slice(i, i + size))) seen.push(parser.value());
  return { seen, parser };
}

describe('PartialJson', () => {
  const value = {
    city: 'Pa"ris\\é\n\u2028😀',
    n: -12.5e3,
    zero: 0,
    ok: true,
    no: false,
    nothing: null,
    list: [1, [2, { a: 'x' }], [], {}, ''],
    deep: { x: { y: [false, 'z'] } },
  };
  const text = JSON.stringify(value, null, 1);

  it.each([1, 2, 3, 5, 8, 1000])('in pieces of %i, ends with what JSON.parse reads, and reports each change once', (size) => {
    const { seen, parser } = feed(text, size);
    expect(parser.value()).toEqual(JSON.parse(text));
    expect(parser.done).toBe(true);
    const shown = seen.map((v) => JSON.stringify(v));
    shown.forEach((v, i) => expect(v).not.toBe(shown[i - 1]));
  });

  it('shows open strings, objects and arrays; numbers and literals once complete; keys once their value starts', () => {
    const parser = new PartialJson();
    const steps: Array<[string, boolean, unknown]> = [
      ['{', true, {}],
      ['"ci', false, {}],
      ['ty"', false, {}],
      [':', false, {}],
      [' "Pa', true, { city: 'Pa' }],
      ['ris", "t": 1', true, { city: 'Paris' }],
      ['2', false, { city: 'Paris' }],
      [', "ok": tr', true, { city: 'Paris', t: 12 }],
      ['ue, "l": [', true, { city: 'Paris', t: 12, ok: true, l: [] }],
      ['{"a": "\\u00', true, { city: 'Paris', t: 12, ok: true, l: [{ a: '' }] }],
      ['e9"}]}', true, { city: 'Paris', t: 12, ok: true, l: [{ a: 'é' }] }],
    ];
    for (const [piece, changed, expected] of steps) {
      expect([piece, parser.push(piece)]).toEqual([piece, changed]);
      expect(parser.value()).toEqual(expected);
    }
    expect(parser.done).toBe(true);
  });

  it('never changes a value it gave: each snapshot is a copy of what is still open, closed parts shared', () => {
    const parser = new PartialJson();
    parser.push('{"done": {"a": 1}, "open": [1');
    const first = parser.value() as { done: object; open: unknown[] };
    parser.push(', 2], "more": "x"');
    const second = parser.value() as { done: object; open: unknown[] };
    expect(first).toEqual({ done: { a: 1 }, open: [] });
    expect(second).toEqual({ done: { a: 1 }, open: [1, 2], more: 'x' });
    expect(second.done).toBe(first.done);
  });

  it('stops at text that is not JSON, keeping the value so far', () => {
    for (const bad of ['{"a": 1,}', '{"a": 1 "b"', '[1,]', '{"a": tru3}', '{"a": "\\x"}', '{"a": 01}', 'Sure! {"a": 1}', '{"a": 1} trailing']) {
      const parser = new PartialJson();
      parser.push(bad);
      expect(parser.done).toBe(false);
      expect(parser.push('}')).toBe(false);
    }
    const parser = new PartialJson();
    parser.push('{"a": 1, "b": [2, }');
    expect(parser.value()).toEqual({ a: 1, b: [2] });
  });

  it('a "__proto__" key is an own property, as JSON.parse reads it: the prototype stays Object.prototype', () => {
    const text = '{"__proto__": {"admin": true}, "open": {"__proto__": ["x"]}}';
    for (const size of [1, 3, 1000]) {
      const { seen, parser } = feed(text, size);
      expect(parser.value()).toEqual(JSON.parse(text));
      for (const partial of [...seen, parser.value()] as Array<Record<string, unknown>>) {
        expect(Object.getPrototypeOf(partial)).toBe(Object.prototype);
        expect(partial.admin).toBeUndefined();
      }
      expect(Object.keys(parser.value() as object)).toEqual(['__proto__', 'open']);
    }
  });

  it.each(['42 files match; checking each.', 'true, let me look.', '"Quoted," he said.', '[1] see the note', 'null'])(
    'text that starts as a JSON value other than an object (%p: a sentence before a tool call) gives nothing',
    (sentence) => {
      const { seen, parser } = feed(sentence, 2);
      expect(seen).toEqual([]);
      expect(parser.value()).toBeUndefined();
      expect(parser.done).toBe(false);
    },
  );

  it('reads a long string in linear time (each character once)', () => {
    const parser = new PartialJson();
    parser.push('{"text": "');
    const started = process.hrtime.bigint();
    for (let i = 0; i < 20_000; i++) parser.push('abcdefghij');
    parser.push('"}');
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    expect((parser.value() as { text: string }).text).toHaveLength(200_000);
    expect(ms).toBeLessThan(500);
  });
});
