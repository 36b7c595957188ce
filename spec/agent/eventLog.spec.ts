import { take, tap } from 'rxjs';
import { EventLog } from '../../src/agent/eventLog';

/** A subscriber that records what it gets, as strings. */
function recorder(log: EventLog<string>, react: (value: string) => void = () => undefined) {
  const seen: string[] = [];
  const subscription = log.subscribe({
    next: (value) => {
      seen.push(value);
      react(value);
    },
    error: (error: Error) => seen.push(`error:${error.message}`),
    complete: () => seen.push('|'),
  });
  return { seen, subscription };
}

describe('EventLog', () => {
  it('replays the past to a late subscriber, then delivers what comes next, and the end', () => {
    const log = new EventLog<string>();
    const early = recorder(log);
    log.next('a');
    log.next('b');
    const late = recorder(log);
    log.next('c');
    log.complete();
    expect(early.seen).toEqual(['a', 'b', 'c', '|']);
    expect(late.seen).toEqual(['a', 'b', 'c', '|']);
    expect(recorder(log).seen).toEqual(['a', 'b', 'c', '|']); // after the end too
  });

  it('a late subscriber whose reaction to a past event causes new ones gets the whole past first', () => {
    const log = new EventLog<string>();
    log.next('start');
    log.next('ask');
    const late = recorder(log, (value) => {
      if (value === 'start') {
        log.next('cancelled'); // caused by its reaction, during its replay
        log.complete();
      }
    });
    expect(late.seen).toEqual(['start', 'ask', 'cancelled', '|']);
  });

  it('an event caused by one subscriber’s reaction reaches the others after the event it reacted to', () => {
    const log = new EventLog<string>();
    const first = recorder(log, (value) => value === 'question' && log.next('answer'));
    const second = recorder(log);
    log.next('question');
    expect(first.seen).toEqual(['question', 'answer']);
    expect(second.seen).toEqual(['question', 'answer']); // a Subject would give ['answer', 'question']
  });

  it('a subscriber that joins while an event is being delivered gets it once, in its replay', () => {
    const log = new EventLog<string>();
    let joined: { seen: string[] } | undefined;
    recorder(log, (value) => {
      if (value === 'b') joined = recorder(log);
    });
    log.next('a');
    log.next('b');
    log.next('c');
    expect(joined?.seen).toEqual(['a', 'b', 'c']);
  });

  it('a subscriber that joins in another’s completion is completed too', () => {
    const log = new EventLog<string>();
    let joined: { seen: string[] } | undefined;
    log.subscribe({ complete: () => (joined = recorder(log)) });
    log.next('a');
    log.complete();
    expect(joined?.seen).toEqual(['a', '|']);
  });

  it('an error ends every subscriber, early and late; nothing is taken after the end', () => {
    const log = new EventLog<string>();
    const early = recorder(log);
    log.next('a');
    log.error(new Error('boom'));
    log.next('ignored');
    log.complete();
    expect(early.seen).toEqual(['a', 'error:boom']);
    expect(recorder(log).seen).toEqual(['a', 'error:boom']);
  });

  it('an unsubscribed subscriber gets nothing more; one that leaves during its replay stops there', () => {
    const log = new EventLog<string>();
    const leaving = recorder(log);
    log.next('a');
    leaving.subscription.unsubscribe();
    log.next('b');
    expect(leaving.seen).toEqual(['a']);
    const seen: string[] = [];
    const counted: string[] = [];
    log
      .pipe(
        tap((value) => counted.push(value)),
        take(1),
      )
      .subscribe({ next: (value) => seen.push(value), complete: () => seen.push('|') });
    log.next('c');
    expect(seen).toEqual(['a', '|']);
    expect(counted).toEqual(['a']); // left during its replay: 'b' was not replayed, 'c' not delivered
  });
});

describe('EventLog with text deltas', () => {
  type E = { type: string; runId: string; iteration?: number; text?: string; seq?: number };
  const delta = (text: string, iteration = 0, type = 'text-delta'): E => ({ type, runId: 'r', iteration, text });

  it('hands every delta to the subscribers there, and a late one the text of each run of deltas in one', () => {
    const log = new EventLog<E>();
    const early: E[] = [];
    log.subscribe((e) => early.push(e));
    const sent = [
      { type: 'run-start', runId: 'r' },
      delta('Hel'),
      delta('lo'),
      delta(' 42'),
      delta('think', 0, 'reasoning-delta'),
      delta('ing', 0, 'reasoning-delta'),
      delta('!'),
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      delta('a', 1),
      delta('b', 1),
      { ...delta('c', 1), seq: 7 }, // journaled: its seq must not be lost in a merge
      delta('d', 1),
      delta('e', 2), // another iteration
    ];
    for (const e of sent) log.next(e);
    expect(early).toEqual(sent);
    expect(early[1]).toBe(sent[1]);
    const late: E[] = [];
    log.subscribe((e) => late.push(e));
    expect(late).toEqual([
      { type: 'run-start', runId: 'r' },
      delta('Hello 42'),
      delta('thinking', 0, 'reasoning-delta'),
      delta('!'),
      { type: 'iteration-end', runId: 'r', iteration: 0 },
      delta('ab', 1),
      { ...delta('c', 1), seq: 7 },
      delta('d', 1),
      delta('e', 2),
    ]);
    expect(sent[1]).toEqual(delta('Hel')); // the events handed out are not changed
  });

  it('keeps a delta apart while it is still being handed out (a reaction sent another)', () => {
    const log = new EventLog<E>();
    const seen: string[] = [];
    log.subscribe((e) => {
      seen.push(e.text ?? e.type);
      if (e.text === 'a') log.next(delta('b')); // caused by the reaction, delivered after 'a'
    });
    const second: string[] = [];
    log.subscribe((e) => second.push(e.text ?? e.type));
    log.next(delta('a'));
    log.next(delta('c'));
    expect(seen).toEqual(['a', 'b', 'c']);
    expect(second).toEqual(['a', 'b', 'c']);
    const late: string[] = [];
    log.subscribe((e) => late.push(e.text ?? e.type));
    expect(late.join('')).toBe('abc');
  });

  it('a run of 100,000 deltas is kept as one event', () => {
    const log = new EventLog<E>();
    let count = 0;
    log.subscribe(() => count++);
    for (let i = 0; i < 100_000; i++) log.next(delta('tok '));
    log.complete();
    expect(count).toBe(100_000);
    const late: E[] = [];
    log.subscribe((e) => late.push(e));
    expect(late).toHaveLength(1);
    expect(late[0].text).toHaveLength(400_000);
  });
});
