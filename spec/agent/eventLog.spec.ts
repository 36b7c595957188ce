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
