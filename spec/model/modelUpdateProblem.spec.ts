import { modelUpdateProblem } from '../../src/model/modelUpdateProblem';

describe('modelUpdateProblem', () => {
  it.each([
    { type: 'text-delta', text: '' },
    { type: 'reasoning-delta', text: 'why' },
    { type: 'tool-call-delta', index: 0, argsDelta: '' },
    { type: 'tool-call-delta', index: 2, callId: 'c1', name: 'search', argsDelta: '{"q"' },
    { type: 'tool-call-delta', index: 1, callId: undefined, name: undefined, argsDelta: '' },
    { type: 'usage', inputTokens: 0, outputTokens: 12 },
    { type: 'finish', reason: 'stop' },
    { type: 'finish', reason: 'tool-calls', model: 'gpt-4o-mini-2024-07-18' },
    { type: 'finish', reason: 'length' },
    { type: 'finish', reason: 'content-filter' },
  ])('finds nothing wrong with %j', (update) => {
    expect(modelUpdateProblem(update)).toBeUndefined();
  });

  it.each([
    [undefined, 'not an object'],
    [{ type: 'reasoning-delta' }, 'text must be a string'],
    [{ type: 'tool-call-delta', index: 1.5, argsDelta: '' }, 'index must be a non-negative integer'],
    [{ type: 'tool-call-delta', index: 0, callId: 7, argsDelta: '' }, 'callId must be a string'],
    [{ type: 'tool-call-delta', index: 0, name: null, argsDelta: '' }, 'name must be a string'],
    [{ type: 'usage', inputTokens: 1, outputTokens: NaN }, 'outputTokens must be a non-negative integer'],
    [{ type: 'usage', inputTokens: -1, outputTokens: 0 }, 'inputTokens must be a non-negative integer'],
    [{ type: 'usage', inputTokens: 12.5, outputTokens: 3 }, 'inputTokens must be a non-negative integer'],
    [{ type: 'usage', inputTokens: 1, outputTokens: 0.1 }, 'outputTokens must be a non-negative integer'],
    [{ type: 'usage', inputTokens: Infinity, outputTokens: 0 }, 'inputTokens must be a non-negative integer'],
    [{ type: 'usage', inputTokens: 0, outputTokens: '3' }, 'outputTokens must be a non-negative integer'],
    [{ type: 'finish', reason: 'stop', model: 4 }, 'model must be a string'],
    [{ text: 'no type' }, 'type must be text-delta, reasoning-delta, tool-call-delta, usage or finish'],
  ])('says what is wrong with %j', (update, problem) => {
    expect(modelUpdateProblem(update)).toBe(problem);
  });
});
