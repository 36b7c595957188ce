import { lastValueFrom, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { scriptedModel } from '../../src/testing/index';
import type { ModelUpdate } from '../../src/index';

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

describe('scriptedModel checks its turns', () => {
  const request = { messages: [], tools: [], settings: {} };
  const run = (model: ReturnType<typeof scriptedModel>) => {
    const updates: ModelUpdate[] = [];
    let error: unknown;
    model(request).subscribe({ next: (u) => updates.push(u), error: (e) => (error = e) });
    return { updates, error };
  };

  it("'errorAfter' beyond the turn's updates, or without 'error', is an error naming it", () => {
    const beyond = run(scriptedModel([{ text: 'a', error: new Error('boom'), errorAfter: 5 }]));
    expect(beyond.updates).toEqual([]);
    expect(String(beyond.error)).toBe("TypeError: scriptedModel: turn 1: 'errorAfter' needs 'error' and must be an integer from 0 to 1 (its updates), got 5");
    expect(String(run(scriptedModel([{ text: ['a', 'b'], errorAfter: 1 }])).error)).toMatch(/'errorAfter' needs 'error'/);
    expect(String(run(scriptedModel([{ text: 'a', delay: -1 }])).error)).toMatch(/'delay' must be a number >= 0, got -1/);
  });

  it('turns that are not an array (a lone string, from plain JavaScript) are a TypeError, not one turn per character', () => {
    expect(() => scriptedModel('hello' as never)).toThrow(`scriptedModel: 'turns' must be an array of turns (e.g. ['Hello']), got "hello"`);
  });

  it('a turn with a key it does not know (a typo) is an error naming it, not an empty answer', () => {
    expect(String(run(scriptedModel([{ updates: ['hi'] } as never])).error)).toBe(
      "TypeError: scriptedModel: turn 1 has unknown keys 'updates' (text, reasoning, toolCalls, usage, finish, error, errorAfter, delay)",
    );
  });

  it('a turn that is not a string, an object or a function (a number, null) is an error naming it, not an empty answer', () => {
    expect(String(run(scriptedModel([42 as never])).error)).toBe('TypeError: scriptedModel: turn 1 must be a string, an object or a function, got 42');
    expect(String(run(scriptedModel([null as never])).error)).toBe('TypeError: scriptedModel: turn 1 must be a string, an object or a function, got null');
  });

  it('a tool call without args streams {}', () => {
    const { updates, error } = run(scriptedModel([{ toolCalls: [{ name: 'now', args: undefined }] }]));
    expect(error).toBeUndefined();
    expect(
      updates
        .filter((u) => u.type === 'tool-call-delta')
        .map((u) => (u as { argsDelta: string }).argsDelta)
        .join(''),
    ).toBe('{}');
  });
});
