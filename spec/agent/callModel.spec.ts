import { Observable, map } from 'rxjs';
import { z } from 'zod';
import { createAgent, defineTool, type AgentEvent, type ModelClient, type ModelUpdate } from '../../src/index';
import { collectEvents, scriptedModel } from '../../src/testing/index';

const echo = defineTool({ name: 'echo', description: 'Echoes', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });

/** A model that sends `first` on its first call and answers 'done' after. */
function modelSending(first: ModelUpdate[]): ModelClient {
  let calls = 0;
  return () =>
    new Observable<ModelUpdate>((subscriber) => {
      const updates: ModelUpdate[] =
        calls++ === 0
          ? first
          : [
              { type: 'text-delta', text: 'done' },
              { type: 'finish', reason: 'stop' },
            ];
      for (const update of updates) subscriber.next(update);
      subscriber.complete();
    });
}

const toolEvents = (events: readonly AgentEvent[]) =>
  events
    .filter((e) => e.type === 'tool-input-start' || e.type === 'tool-input-delta' || e.type === 'tool-call')
    .map((e) => {
      if (e.type === 'tool-input-start') return ['start', e.iteration, e.callId, e.name];
      if (e.type === 'tool-input-delta') return ['delta', e.iteration, e.callId, e.name, e.argsDelta];
      return ['call', e.iteration, e.callId, e.name];
    });

describe('tool-input events while a call streams', () => {
  it('tool-input-start once, a tool-input-delta per piece, then the complete tool-call with the same id', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', args: { text: 'hi' }, callId: 'c1' }] }, 'ok']);
    const events = collectEvents(createAgent({ model, tools: [echo] }).run('go'));
    expect(toolEvents(events)).toEqual([
      ['start', 0, 'c1', 'echo'],
      ['delta', 0, 'c1', 'echo', '{"text"'],
      ['delta', 0, 'c1', 'echo', ':"hi"}'],
      ['call', 0, 'c1', 'echo'],
    ]);
    const types = events.map((e) => e.type);
    expect(types.indexOf('tool-input-start')).toBeGreaterThan(types.indexOf('iteration-start'));
  });

  it('waits for the name; pieces sent before it follow the start as one delta; a call without id is call_<index>', async () => {
    const model = modelSending([
      { type: 'tool-call-delta', index: 0, argsDelta: '{"te' },
      { type: 'tool-call-delta', index: 0, argsDelta: 'xt":' },
      { type: 'tool-call-delta', index: 0, name: 'echo', argsDelta: '"a"' },
      { type: 'tool-call-delta', index: 0, argsDelta: '}' },
      { type: 'finish', reason: 'tool-calls' },
    ]);
    const events = collectEvents(createAgent({ model, tools: [echo] }).run('go'));
    expect(toolEvents(events)).toEqual([
      ['start', 0, 'call_0', 'echo'],
      ['delta', 0, 'call_0', 'echo', '{"text":"a"'],
      ['delta', 0, 'call_0', 'echo', '}'],
      ['call', 0, 'call_0', 'echo'],
    ]);
  });

  it('interleaved calls are told apart by id; empty pieces are not sent', async () => {
    const model = modelSending([
      { type: 'tool-call-delta', index: 0, callId: 'a', name: 'echo', argsDelta: '' },
      { type: 'tool-call-delta', index: 1, callId: 'b', name: 'echo', argsDelta: '{"text":"2"}' },
      { type: 'tool-call-delta', index: 0, argsDelta: '{"text":"1"}' },
      { type: 'finish', reason: 'tool-calls' },
    ]);
    const events = collectEvents(createAgent({ model, tools: [echo] }).run('go'));
    expect(toolEvents(events)).toEqual([
      ['start', 0, 'a', 'echo'],
      ['start', 0, 'b', 'echo'],
      ['delta', 0, 'b', 'echo', '{"text":"2"}'],
      ['delta', 0, 'a', 'echo', '{"text":"1"}'],
      ['call', 0, 'a', 'echo'],
      ['call', 0, 'b', 'echo'],
    ]);
  });

  it('a text-only answer has none', async () => {
    const events = collectEvents(createAgent({ model: scriptedModel(['Hello']) }).run('go'));
    expect(events.some((e) => e.type.startsWith('tool-input'))).toBe(false);
  });
});

describe('what the model stream emits is checked', () => {
  const through = (bad: unknown) =>
    collectEvents(
      createAgent({
        model: scriptedModel(['hello']),
        middleware: [{ name: 'bad', wrapModel: () => (source) => source.pipe(map(() => bad as ModelUpdate)) }],
      }).run('go'),
    );

  it.each([
    [null, 'not an object'],
    [undefined, 'not an object'],
    ['hello', 'not an object'],
    [{ type: 'text-delta', text: 42 }, 'text must be a string'],
    [{ type: 'delta', text: 'x' }, 'type must be text-delta, reasoning-delta, tool-call-delta, usage or finish'],
    [{ type: 'usage', inputTokens: '12', outputTokens: 3 }, 'inputTokens must be a non-negative integer'],
    [{ type: 'usage', inputTokens: 12, outputTokens: 2.5 }, 'outputTokens must be a non-negative integer'],
    [{ type: 'tool-call-delta', index: -1, argsDelta: '' }, 'index must be a non-negative integer'],
    [{ type: 'tool-call-delta', index: 0 }, 'argsDelta must be a string'],
    [{ type: 'finish', reason: 'done' }, 'reason must be one of stop, tool-calls, length, content-filter'],
  ])('%j fails the run with a TypeError saying what is wrong, nothing of it assembled', (bad, problem) => {
    const events = through(bad);
    const error = events.find((e): e is Extract<AgentEvent, { type: 'error' }> => e.type === 'error');
    expect(error).toMatchObject({ source: 'model', error: { name: 'TypeError' } });
    expect(error?.error.message).toContain(`not a model update: ${problem}`);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error', text: '', usage: { inputTokens: 0, outputTokens: 0 } });
  });

  it.each([null, undefined])('with structured output too: %s from a client fails the run, nothing thrown into the client', (bad) => {
    let thrown: unknown;
    const client = () =>
      new Observable<ModelUpdate>((subscriber) => {
        try {
          subscriber.next(bad as unknown as ModelUpdate);
        } catch (error) {
          thrown = error;
        }
      });
    const events = collectEvents(createAgent({ model: client, output: z.object({ n: z.number() }) }).run('go'));
    expect(thrown).toBeUndefined();
    expect(events.find((e) => e.type === 'error')).toMatchObject({
      source: 'model',
      error: { name: 'TypeError', message: expect.stringContaining('not a model update: not an object') },
    });
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'error' });
  });
});
