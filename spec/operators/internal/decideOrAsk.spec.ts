import { Observable, Subject, of } from 'rxjs';
import { decideOrAsk } from '../../../operators/internal/decideOrAsk';

/** Records what a stream does. */
function record<T>(source: Observable<T>) {
  const log: string[] = [];
  const subscription = source.subscribe({
    next: (v) => log.push(`next ${String(v)}`),
    error: (e) => log.push(`error ${(e as Error).message}`),
    complete: () => log.push('complete'),
  });
  return { log, subscription };
}

describe('decideOrAsk', () => {
  it('passes a decided context at once and never asks', () => {
    const ask = jest.fn(() => of('yes'));
    const { log } = record(
      of(1, 2).pipe(
        decideOrAsk<number, string>(
          (n) => n * 10,
          ask,
          (n) => n,
        ),
      ),
    );
    expect(log).toEqual(['next 10', 'next 20', 'complete']);
    expect(ask).not.toHaveBeenCalled();
  });

  it('asks when undecided, decides from the answer, and completes only after the last question', () => {
    const questions = new Map<number, Subject<string>>();
    const ask = (n: number) => {
      const question = new Subject<string>();
      questions.set(n, question);
      return question;
    };
    const { log } = record(
      of(1, 2, 3).pipe(
        decideOrAsk<number, string>(
          (n: number) => (n === 2 ? n : undefined),
          ask,
          (n, answer) => Number(`${n}${answer.length}`),
        ),
      ),
    );
    expect(log).toEqual(['next 2']);
    questions.get(3)!.next('ok');
    questions.get(3)!.complete();
    expect(log).toEqual(['next 2', 'next 32']);
    questions.get(1)!.next('yes');
    expect(log).toEqual(['next 2', 'next 32', 'next 13']);
    questions.get(1)!.complete();
    expect(log).toEqual(['next 2', 'next 32', 'next 13', 'complete']);
  });

  it('fails the phase when decide, ask or answered throws, or the question errors', () => {
    const boom = (what: string) => (): never => {
      throw new Error(what);
    };
    expect(
      record(
        of(1).pipe(
          decideOrAsk<number, string>(
            boom('decide'),
            () => of('a'),
            (n) => n,
          ),
        ),
      ).log,
    ).toEqual(['error decide']);
    expect(
      record(
        of(1).pipe(
          decideOrAsk<number, string>(
            () => undefined,
            boom('ask'),
            (n) => n,
          ),
        ),
      ).log,
    ).toEqual(['error ask']);
    expect(
      record(
        of(1).pipe(
          decideOrAsk<number, string>(
            () => undefined,
            () => of('a'),
            boom('answered'),
          ),
        ),
      ).log,
    ).toEqual(['error answered']);
    const question = new Subject<string>();
    const { log } = record(
      of(1).pipe(
        decideOrAsk<number, string>(
          () => undefined,
          () => question,
          (n) => n,
        ),
      ),
    );
    question.error(new Error('request failed'));
    expect(log).toEqual(['error request failed']);
    expect(question.observed).toBe(false);
  });

  it('unsubscribing while a question is open tears the question down', () => {
    const question = new Subject<string>();
    const { log, subscription } = record(
      of(1).pipe(
        decideOrAsk<number, string>(
          () => undefined,
          () => question,
          (n) => n,
        ),
      ),
    );
    expect(question.observed).toBe(true);
    subscription.unsubscribe();
    expect(question.observed).toBe(false);
    question.next('late');
    expect(log).toEqual([]);
  });
});
