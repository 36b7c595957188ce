import type { AgentResponse } from '../../src/events/types';
import { Answers } from '../../src/agent/answers';

const answer = (requestId: string): AgentResponse => ({ type: 'permission-response', requestId, approved: true });

describe('Answers', () => {
  it('hands each answer to every current subscriber, and nothing to one that left', () => {
    const answers = new Answers();
    const a: string[] = [];
    const b: string[] = [];
    const c: string[] = [];
    const first = answers.subscribe((r) => a.push(r.requestId));
    const second = answers.subscribe((r) => b.push(r.requestId));
    answers.next(answer('r1'));
    second.unsubscribe();
    answers.subscribe((r) => c.push(r.requestId));
    answers.next(answer('r2'));
    first.unsubscribe();
    answers.next(answer('r3'));
    expect([a, b, c]).toEqual([['r1', 'r2'], ['r1'], ['r2', 'r3']]);
  });

  it('a subscriber that leaves during a delivery does not stop it for the others; one that joins gets the next', () => {
    const answers = new Answers();
    const seen: string[] = [];
    const late: string[] = [];
    const leaving = answers.subscribe((r) => {
      seen.push(`leaving:${r.requestId}`);
      leaving.unsubscribe();
      answers.subscribe((x) => late.push(x.requestId));
    });
    answers.subscribe((r) => seen.push(`staying:${r.requestId}`));
    answers.next(answer('r1'));
    answers.next(answer('r2'));
    expect(seen).toEqual(['leaving:r1', 'staying:r1', 'staying:r2']);
    expect(late).toEqual(['r2']);
  });
});
