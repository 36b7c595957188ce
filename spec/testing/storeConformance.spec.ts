import { memoryStore, type AgentStore } from '../../src/index';
import { describeStoreConformance } from '../../src/testing/index';

/** Registers the suite with stand-in describe/it and runs every test, returning each outcome. */
async function runSuite(makeStore: () => AgentStore): Promise<Map<string, string | undefined>> {
  const tests: Array<[string, () => Promise<void>]> = [];
  const saved = { describe: (globalThis as Record<string, unknown>).describe, it: (globalThis as Record<string, unknown>).it };
  Object.assign(globalThis, { describe: (_: string, body: () => void) => body(), it: (name: string, body: () => Promise<void>) => tests.push([name, body]) });
  try {
    describeStoreConformance('candidate', makeStore);
  } finally {
    Object.assign(globalThis, saved);
  }
  const outcomes = new Map<string, string | undefined>();
  for (const [name, body] of tests) {
    try {
      await body();
      outcomes.set(name, undefined);
    } catch (error) {
      outcomes.set(name, (error as Error).message);
    }
  }
  return outcomes;
}

describe('describeStoreConformance', () => {
  it('passes memoryStore on every test', async () => {
    const outcomes = await runSuite(() => memoryStore());
    expect(outcomes.size).toBeGreaterThanOrEqual(12);
    expect([...outcomes.values()].filter((failure) => failure !== undefined)).toEqual([]);
  });

  it('fails a store whose append ignores the expected position, saying what was wrong', async () => {
    const outcomes = await runSuite(() => {
      const store = memoryStore();
      return Object.assign(Object.create(store) as AgentStore, {
        append: (runId: string, _expected: number, records: Parameters<AgentStore['append']>[2]) =>
          store.append(runId, store.read(runId)?.length ?? 0, records),
      });
    });
    expect(outcomes.get('append refuses a wrong expected position with JournalConflictError and writes nothing')).toBe(
      'store conformance: expected 0 on an existing run: expected a failure, got none',
    );
  });

  it('fails a store whose answers are not first-wins', async () => {
    const outcomes = await runSuite(() => {
      const store = memoryStore();
      return Object.assign(Object.create(store) as AgentStore, { putAnswer: () => true });
    });
    expect(outcomes.get('putAnswer() keeps the first answer per request id; answers() replays them, then each new one')).toBe(
      'store conformance: a second answer to the same request: expected false, got true',
    );
  });

  it('says so when there is no test runner', () => {
    const saved = (globalThis as Record<string, unknown>).describe;
    (globalThis as Record<string, unknown>).describe = undefined;
    try {
      expect(() => describeStoreConformance('x', () => memoryStore())).toThrow('describeStoreConformance: no global describe() and it()');
    } finally {
      (globalThis as Record<string, unknown>).describe = saved;
    }
  });
});
