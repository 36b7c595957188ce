import { from, lastValueFrom, toArray } from 'rxjs';
import type { AgentEvent } from '../../src/index';
import { ofType } from '../../src/bindings/ofType';

const events: AgentEvent[] = [
  { type: 'run-start', runId: 'r' },
  { type: 'text-delta', runId: 'r', iteration: 0, text: 'a' },
  { type: 'tool-call', runId: 'r', iteration: 0, callId: 'c', name: 't', args: {} },
  { type: 'text-delta', runId: 'r', iteration: 0, text: 'b' },
];

describe('ofType', () => {
  it('keeps one type, narrowed', async () => {
    const texts = await lastValueFrom(from(events).pipe(ofType('text-delta'), toArray()));
    expect(texts.map((e) => e.text)).toEqual(['a', 'b']);
  });

  it('keeps several types, in order', async () => {
    const kept = await lastValueFrom(from(events).pipe(ofType('tool-call', 'run-start'), toArray()));
    expect(kept.map((e) => e.type)).toEqual(['run-start', 'tool-call']);
  });
  it('with no type is a TypeError rather than a pipe that drops everything', () => {
    expect(() => ofType()).toThrow(new TypeError('ofType: give at least one event type'));
  });
});
