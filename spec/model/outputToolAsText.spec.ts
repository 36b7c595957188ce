import { lastValueFrom, of, throwError, concat, toArray } from 'rxjs';
import { outputToolAsText } from '../../src/model/outputToolAsText';
import type { ModelUpdate } from '../../src/model/types';

const run = (...updates: ModelUpdate[]) => lastValueFrom(outputToolAsText(of(...updates), 'final_answer').pipe(toArray()));

describe('outputToolAsText', () => {
  it("turns the output tool's argument pieces into text deltas, and its tool-calls finish into stop", async () => {
    expect(
      await run(
        { type: 'tool-call-delta', index: 0, callId: 'c1', name: 'final_answer', argsDelta: '' },
        { type: 'tool-call-delta', index: 0, argsDelta: '{"a":' },
        { type: 'tool-call-delta', index: 0, argsDelta: '1}' },
        { type: 'usage', inputTokens: 1, outputTokens: 2 },
        { type: 'finish', reason: 'tool-calls', model: 'm' },
      ),
    ).toEqual([
      { type: 'text-delta', text: '{"a":' },
      { type: 'text-delta', text: '1}' },
      { type: 'usage', inputTokens: 1, outputTokens: 2 },
      { type: 'finish', reason: 'stop', model: 'm' },
    ]);
  });

  it('leaves other calls, interleaved or not, as they are (and their finish with them)', async () => {
    expect(
      await run(
        { type: 'tool-call-delta', index: 0, callId: 'c1', name: 'get_weather', argsDelta: '{"city"' },
        { type: 'tool-call-delta', index: 1, callId: 'c2', name: 'final_answer', argsDelta: '{' },
        { type: 'tool-call-delta', index: 0, argsDelta: ':"Paris"}' },
        { type: 'tool-call-delta', index: 1, argsDelta: '}' },
        { type: 'finish', reason: 'tool-calls' },
      ),
    ).toEqual([
      { type: 'tool-call-delta', index: 0, callId: 'c1', name: 'get_weather', argsDelta: '{"city"' },
      { type: 'text-delta', text: '{' },
      { type: 'tool-call-delta', index: 0, argsDelta: ':"Paris"}' },
      { type: 'text-delta', text: '}' },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('passes text answers and errors through', async () => {
    expect(await run({ type: 'text-delta', text: '{}' }, { type: 'finish', reason: 'stop' })).toEqual([
      { type: 'text-delta', text: '{}' },
      { type: 'finish', reason: 'stop' },
    ]);
    const failing = outputToolAsText(
      concat(
        of<ModelUpdate>({ type: 'text-delta', text: '{' }),
        throwError(() => new Error('cut')),
      ),
      'final_answer',
    );
    await expect(lastValueFrom(failing)).rejects.toThrow('cut');
  });
});
