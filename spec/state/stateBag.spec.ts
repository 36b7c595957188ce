import { lastValueFrom, map, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineState, StateError, type AgentMiddleware } from '../../src/index';
import { StateBag } from '../../src/state/stateBag';
import { eventsOfType, scriptedModel } from '../../src/testing/index';

const counterV2 = (migrate: (stored: unknown, fromVersion: number) => unknown) =>
  defineState({ key: 'test.counter', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session', version: 2, migrate });

describe('StateBag', () => {
  it('overlay: the entries of the top bag replace those of the same keys, the others stay', () => {
    const A = defineState({ key: 'a', schema: z.number(), initial: () => 0, scope: 'session' });
    const B = defineState({ key: 'b', schema: z.number(), initial: () => 0 });
    const session = StateBag.fromStored({ a: { version: 1, value: 1 }, c: { version: 1, value: 3 } });
    const merged = session.overlay(StateBag.empty.set(A, 10).set(B, 20));
    expect(merged.get(A)).toBe(10);
    expect(merged.get(B)).toBe(20);
    expect(merged.toStored('session')).toEqual({ a: { version: 1, value: 10 }, c: { version: 1, value: 3 } });
    expect(session.get(A)).toBe(1); // bags are immutable
    expect(session.overlay(StateBag.empty)).toBe(session);
  });

  it('migrates an older stored version once, on first read', () => {
    const migrate = jest.fn((old: unknown) => ({ n: (old as { count: number }).count }));
    const bag = StateBag.fromStored({ 'test.counter': { version: 1, value: { count: 3 } } });
    const def = counterV2(migrate);
    expect(bag.get(def)).toEqual({ n: 3 });
    expect(bag.get(def)).toEqual({ n: 3 });
    expect(migrate).toHaveBeenCalledTimes(1);
    expect(bag.toStored('session')).toEqual({ 'test.counter': { version: 2, value: { n: 3 } } });
  });

  it('a migrate() that throws is a StateError naming the key and the version', () => {
    const bag = StateBag.fromStored({ 'test.counter': { version: 1, value: { n: 3 } } });
    const def = counterV2((old) => ({ n: (old as { count: { value: number } }).count.value }));
    expect(() => bag.get(def)).toThrow(StateError);
    expect(() => bag.get(def)).toThrow(/^State 'test\.counter': migrate\(\) from version 1 failed: Cannot read properties of undefined/);
  });

  it('a stored version newer than the definition is a StateError, and the run keeps the stored value as it was', async () => {
    const def = counterV2((old) => old);
    const reader: AgentMiddleware = { name: 'reader', beforeMessageTurn: map((ctx) => (ctx.state(def), ctx)) };
    const stored = { 'test.counter': { version: 3, value: { n: 5, extra: 'keep me' } } };
    const session = createSession({ snapshot: { version: 1, id: 's', messages: [], state: stored } });
    const events = await lastValueFrom(
      createAgent({ model: scriptedModel(['ok']), middleware: [reader] })
        .run('go', { session })
        .pipe(toArray()),
    );
    expect(eventsOfType(events, 'error')[0]).toMatchObject({
      error: { name: 'StateError', message: "State 'test.counter': stored version 3 is newer than version 2" },
    });
    expect(session.snapshot().state).toEqual(stored);
  });

  it('keys named like Object.prototype members are ordinary keys', () => {
    const ctor = defineState({ key: 'constructor', schema: z.number(), initial: () => 1 });
    const str = defineState({ key: 'toString', schema: z.number(), initial: () => 2, scope: 'session' });
    expect(StateBag.empty.get(ctor)).toBe(1);
    expect(StateBag.empty.has('toString')).toBe(false);
    const bag = StateBag.empty.set(str, 5);
    expect(bag.get(str)).toBe(5);
    expect(bag.has('toString')).toBe(true);
    expect(bag.toStored('session')).toEqual({ toString: { version: 1, value: 5 } });
    expect(StateBag.fromStored({ constructor: { version: 1, value: 7 } }).get({ ...ctor, scope: 'session' })).toBe(7);
  });
});

describe('StateBag: definitions that share a key', () => {
  const AsNumber = defineState({ key: 'shared', schema: z.number(), initial: () => 0, scope: 'run' });
  const AsString = defineState({ key: 'shared', schema: z.string(), initial: () => '', scope: 'run' });
  const Point = defineState({ key: 'point', schema: z.object({ x: z.number() }), initial: () => ({ x: 0 }), scope: 'run' });
  const PointWithDefault = defineState({
    key: 'point',
    schema: z.object({ x: z.number(), y: z.number().default(0) }),
    initial: () => ({ x: 0, y: 0 }),
    scope: 'run',
  });

  it("a read through another definition is checked by the reader's schema: a value it rejects is a StateError naming the key", () => {
    const bag = StateBag.empty.set(AsNumber, 42);
    expect(bag.get(AsNumber)).toBe(42);
    expect(() => bag.get(AsString)).toThrow(StateError);
    expect(() => bag.get(AsString)).toThrow(/'shared'.*another definition of this key.*schema/);
  });

  it("a value that fits is read as the reader's schema parses it; the writer keeps reading its own value as written", () => {
    const written = { x: 1 };
    const bag = StateBag.empty.set(Point, written);
    expect(bag.get(PointWithDefault)).toEqual({ x: 1, y: 0 });
    expect(bag.get(Point)).toBe(written);
  });

  // Two copies of an operator in one process (two versions of a package, its ESM and CJS builds):
  // a read through the other copy's definition meets the same version rules as a restored value.
  const V1 = defineState({ key: 'op.count', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session' });
  const V2 = defineState({
    key: 'op.count',
    schema: z.object({ count: z.number(), since: z.number() }),
    initial: () => ({ count: 0, since: 0 }),
    scope: 'session',
    version: 2,
    migrate: (stored) => ({ count: (stored as { n: number }).n, since: 0 }),
  });

  it('a value of an older version read through a newer definition is migrated, as when restored', () => {
    const bag = StateBag.empty.set(V1, { n: 3 });
    expect(StateBag.fromStored(bag.toStored('session')).get(V2)).toEqual({ count: 3, since: 0 });
    expect(bag.get(V2)).toEqual({ count: 3, since: 0 });
    expect(bag.get(V1)).toEqual({ n: 3 });
  });

  it('a value of an older version read through a newer definition without migrate() is refused, naming both versions', () => {
    const V2WithoutMigrate = defineState({ key: 'op.count', schema: z.object({ n: z.number() }), initial: () => ({ n: 0 }), scope: 'session', version: 2 });
    const bag = StateBag.empty.set(V1, { n: 3 });
    expect(() => bag.get(V2WithoutMigrate)).toThrow(
      "State 'op.count': a value written through another definition of this key has version 1, not version 2, and no migrate() was given",
    );
  });

  it('a value of a newer version read through an older definition is refused, as when restored', () => {
    const bag = StateBag.empty.set(V2, { count: 1, since: 2 });
    expect(() => StateBag.fromStored(bag.toStored('session')).get(V1)).toThrow('stored version 2 is newer than version 1');
    expect(() => bag.get(V1)).toThrow("State 'op.count': a value written through another definition of this key has version 2, newer than version 1");
  });
});

describe('StateBag.toStored', () => {
  it("stores a key named '__proto__' as a key", () => {
    const Proto = defineState({ key: '__proto__', schema: z.number(), initial: () => 0, scope: 'session' });
    const stored = StateBag.empty.set(Proto, 7).toStored('session');
    expect(Object.keys(stored)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(stored)).toBe(Object.prototype);
    expect(StateBag.fromStored(JSON.parse(JSON.stringify(stored))).get(Proto)).toBe(7);
  });
});
