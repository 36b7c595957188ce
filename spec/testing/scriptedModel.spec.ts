import { lastValueFrom, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { scriptedModel } from '../../src/testing/index';

const request = { messages: [], tools: [], settings: {} };

describe('scriptedModel', () => {
  it('answers one turn per call and records the requests', async () => {
    const model = scriptedModel(['first', { text: ['a', 'b'], usage: { inputTokens: 1, outputTokens: 2 } }]);
    expect(await lastValueFrom(model(request).pipe(toArray()))).toEqual([
      { type: 'text-delta', text: 'first' },
      { type: 'finish', reason: 'stop' },
    ]);
    expect(await lastValueFrom(model(request).pipe(toArray()))).toEqual([
      { type: 'text-delta', text: 'a' },
      { type: 'text-delta', text: 'b' },
      { type: 'usage', inputTokens: 1, outputTokens: 2 },
      { type: 'finish', reason: 'stop' },
    ]);
    expect(model.calls).toBe(2);
    expect(model.requests).toHaveLength(2);
    await expect(lastValueFrom(model(request))).rejects.toThrow('scriptedModel: no turn left (2 scripted, call 3)');
  });

  it('streams tool-call arguments in two pieces', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'f', args: { a: 1 }, callId: 'c' }] }]);
    expect(await lastValueFrom(model(request).pipe(toArray()))).toEqual([
      { type: 'tool-call-delta', index: 0, callId: 'c', name: 'f', argsDelta: '{"a"' },
      { type: 'tool-call-delta', index: 0, argsDelta: ':1}' },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('delays and errors in scheduler time (marbles)', () => {
    const testScheduler = new TestScheduler((a, e) => expect(a).toEqual(e));
    testScheduler.run(({ expectObservable }) => {
      const error = new Error('down');
      const model = scriptedModel([{ text: ['a', 'b'], delay: 3, error, errorAfter: 1 }], { scheduler: testScheduler });
      expectObservable(model(request)).toBe('---(a#)', { a: { type: 'text-delta', text: 'a' } }, error);
    });
  });
});
