import { TestScheduler } from 'rxjs/testing';
import { JOURNAL_FORMAT_VERSION, memoryStore, type JournalEntry } from '../../src/index';
import { describeStoreConformance } from '../../src/testing/index';

describeStoreConformance('memoryStore', () => memoryStore());

describe('memoryStore', () => {
  it('checks its options', () => {
    expect(() => memoryStore({ retainMs: -1 })).toThrow("memoryStore: 'retainMs' must be a number >= 0, got -1");
    expect(() => memoryStore({ scheduler: {} as never })).toThrow("memoryStore: 'scheduler' must be an rxjs SchedulerLike");
  });

  it('keeps a finished journal retainMs on its scheduler, then drops it and completes its followers', () => {
    const scheduler = new TestScheduler((a, b) => expect(a).toEqual(b));
    scheduler.run(({ cold, expectObservable }) => {
      const store = memoryStore({ scheduler, retainMs: 100 });
      store.append('r', 0, [{ version: JOURNAL_FORMAT_VERSION, kind: 'start', runId: 'r', agent: 'a', input: [], onRequest: 'wait' }]);
      const positions: number[] = [];
      store.follow('r', 0).subscribe((e: JournalEntry) => positions.push(e.position));
      cold('10ms x').subscribe(() => store.append('r', 1, [{ version: 1, kind: 'end', reason: 'completed' }]));
      const seen: Array<number | undefined> = [];
      cold('109ms x').subscribe(() => seen.push(store.read('r')?.length));
      cold('110ms x').subscribe(() => seen.push(store.read('r')?.length));
      expectObservable(cold('110ms x')).toBe('110ms x');
      scheduler.flush();
      expect(positions).toEqual([1, 2]);
      expect(seen).toEqual([2, undefined]);
    });
  });

  it('drops a finished journal at once by default, with its answers', () => {
    const store = memoryStore();
    store.append('r', 0, [{ version: 1, kind: 'start', runId: 'r', agent: 'a', input: [], onRequest: 'wait' }]);
    store.putAnswer('r', { type: 'permission-response', requestId: 'q', approved: true });
    let completed = false;
    store.follow('r', 0).subscribe({ complete: () => (completed = true) });
    store.append('r', 1, [{ version: 1, kind: 'end', reason: 'completed' }]);
    expect(completed).toBe(true);
    expect(store.read('r')).toBeUndefined();
    expect(store.putAnswer('r', { type: 'permission-response', requestId: 'q2', approved: true })).toBe(false);
  });
});
