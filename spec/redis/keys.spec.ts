import { keyPart, runKeys, sessionKeys } from '../../src/redis/keys';

describe('keyPart', () => {
  it('leaves an ordinary id as it is', () => {
    expect(keyPart('run-1')).toBe('run-1');
    expect(keyPart('é 🦊 "quoted" a\u0000b')).toBe('é 🦊 "quoted" a\u0000b');
  });

  it('escapes %, braces and lone surrogates, keeping surrogate pairs', () => {
    expect(keyPart('a%b{c}d')).toBe('a%25b%7Bc%7Dd');
    expect(keyPart('x\uD800y\uDFFFz')).toBe('x%uD800y%uDFFFz');
    expect(keyPart('\uD83E\uDD8A\uD83E')).toBe('\uD83E\uDD8A%uD83E');
  });

  it('keeps distinct ids distinct', () => {
    const ids = ['%', '%25', '{', '%7B', '}', '%7D', '\uD800', '%uD800', '\uFFFD', '\uD800\uDC00', '%uD800%uDC00'];
    expect(new Set(ids.map(keyPart)).size).toBe(ids.length);
  });
});

describe('runKeys', () => {
  it('puts every key of a run under one hash tag, the whole escaped id', () => {
    const keys = runKeys('p:', 'a}b');
    expect(keys).toEqual({
      journal: 'p:run:{a%7Db}:journal',
      answers: 'p:run:{a%7Db}:answers',
      state: 'p:run:{a%7Db}:state',
      lease: 'p:run:{a%7Db}:lease',
      tail: 'p:run:{a%7Db}:tail',
      channel: 'p:run:{a%7Db}',
    });
    expect(sessionKeys('p:', 's{1}')).toEqual({
      turns: 'p:session:{s%7B1%7D}:turns',
      meta: 'p:session:{s%7B1%7D}:meta',
      forks: 'p:session:{s%7B1%7D}:forks',
      lease: 'p:session:{s%7B1%7D}:lease',
      channel: 'p:session:{s%7B1%7D}',
    });
  });
});
