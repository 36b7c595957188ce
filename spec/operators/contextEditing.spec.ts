import { z } from 'zod';
import { createAgent, createSession, defineTool, textMessage, type Message } from '../../src/index';
import { eventLabel, scriptedModel, collectEvents, eventsOfType } from '../../src/testing/index';
import { contextEditing, type ContextEditingOptions } from '../../operators/contextEditing';
import { approximateTokens } from '../../operators/internal/approximateTokens';

const collect = collectEvents;
const ofType = eventsOfType;

const call = (callId: string, name = 'big', args: unknown = {}) => ({ type: 'tool-call' as const, callId, name, args });
const result = (callId: string, value: string, name = 'big') => ({ type: 'tool-result' as const, callId, name, result: value, isError: false });

/**
 * A history of 5 tool results of 40 characters (c1; c2 and c3 in one batch; c4; c5).
 * Characters: 2 + 2 + 40 + 4 + 80 + 2 + 40 + 2 + 40 = 212, and the turn's input 'hi': 214 → 54 tokens.
 */
function history(names: { c2?: string } = {}): Message[] {
  return [
    textMessage('user', 'go'),
    { role: 'assistant', content: [call('c1')] },
    { role: 'tool', content: [result('c1', 'a'.repeat(40))] },
    { role: 'assistant', content: [call('c2', names.c2 ?? 'big'), call('c3')] },
    { role: 'tool', content: [result('c2', 'b'.repeat(40), names.c2 ?? 'big'), result('c3', 'c'.repeat(40))] },
    { role: 'assistant', content: [call('c4')] },
    { role: 'tool', content: [result('c4', 'd'.repeat(40))] },
    { role: 'assistant', content: [call('c5')] },
    { role: 'tool', content: [result('c5', 'e'.repeat(40))] },
  ];
}

function runWith(options: ContextEditingOptions, messages = history()) {
  const session = createSession({ snapshot: { version: 1, id: 's', messages, state: {} } });
  const model = scriptedModel(['Done']);
  const agent = createAgent({ model, middleware: [contextEditing(options)] });
  const events = collect(agent.run('hi', { runId: 'r', session }));
  const sent = model.requests[0].messages;
  const results = sent.flatMap((m) => m.content.flatMap((p) => (p.type === 'tool-result' ? [`${p.callId}:${String(p.result).slice(0, 9)}`] : [])));
  return { events, sent, results, session, edits: ofType(events, 'context-edited') };
}

describe('contextEditing', () => {
  it('counts characters / 4, rounded up', () => {
    expect(approximateTokens([...history(), textMessage('user', 'hi')])).toBe(54);
    expect(approximateTokens([])).toBe(0);
    expect(approximateTokens([{ role: 'assistant', content: [call('x', 'big', { q: 'abc' })] }])).toBe(3); // {"q":"abc"}
  });

  it('with the defaults (100000 tokens) sends the history unchanged, without an event', () => {
    const { sent, edits, session } = runWith({});
    expect(edits).toEqual([]);
    expect(sent).toEqual(session.messages.slice(0, sent.length));
  });

  it('does nothing exactly at the trigger; one token past it clears all but the 3 most recent results', () => {
    expect(runWith({ trigger: { tokens: 54 } }).edits).toEqual([]);
    const { events, sent, results, session, edits } = runWith({ trigger: { tokens: 53 } });
    // c1 and c2 are cleared; c3, in the same tool message as c2, is kept: no pair is broken.
    expect(results).toEqual(['c1:[cleared]', 'c2:[cleared]', 'c3:ccccccccc', 'c4:ddddddddd', 'c5:eeeeeeeee']);
    expect(sent.map((m) => m.role)).toEqual(session.messages.slice(0, sent.length).map((m) => m.role));
    // 214 - 2 * (40 - 9) = 152 characters → 38 tokens.
    expect(edits).toEqual([{ type: 'context-edited', runId: 'r', cleared: 2, tokensBefore: 54, tokensAfter: 38 }]);
    expect(events.map(eventLabel).slice(0, 4)).toEqual(['run-start', 'iteration-start', 'context-edited', 'text-delta:Done']);
    // The history (and so the session) keeps the results.
    expect(session.messages[2].content[0]).toEqual(result('c1', 'a'.repeat(40)));
  });

  it('clearAtLeast stops once enough tokens are freed, oldest first', () => {
    // Clearing c1 frees 54 - ceil(183 / 4) = 8 tokens.
    const { results, edits } = runWith({ trigger: { tokens: 10 }, clearAtLeast: 8 });
    expect(results.slice(0, 2)).toEqual(['c1:[cleared]', 'c2:bbbbbbbbb']);
    expect(edits[0]).toMatchObject({ cleared: 1, tokensBefore: 54, tokensAfter: 46 });
    expect(runWith({ trigger: { tokens: 10 }, clearAtLeast: 9 }).edits[0]).toMatchObject({ cleared: 2, tokensAfter: 38 });
  });

  it('excluded tools do not count in keep and are never cleared; keep 0 clears every other result', () => {
    const excluded = runWith({ trigger: { tokens: 10 }, excludeTools: ['memo'] }, history({ c2: 'memo' }));
    expect(excluded.results).toEqual(['c1:[cleared]', 'c2:bbbbbbbbb', 'c3:ccccccccc', 'c4:ddddddddd', 'c5:eeeeeeeee']);
    const all = runWith({ trigger: { tokens: 10 }, keep: { toolResults: 0 }, excludeTools: ['memo'] }, history({ c2: 'memo' }));
    expect(all.results).toEqual(['c1:[cleared]', 'c2:bbbbbbbbb', 'c3:[cleared]', 'c4:[cleared]', 'c5:[cleared]']);
    expect(runWith({ trigger: { tokens: 10 }, keep: { toolResults: 5 } }).edits).toEqual([]);
  });

  it('clearToolInputs empties the arguments of the cleared calls; placeholder is configurable', () => {
    const messages = history();
    messages[1] = { role: 'assistant', content: [call('c1', 'big', { query: 'x'.repeat(30) })] };
    const { sent, results } = runWith({ trigger: { tokens: 10 }, clearToolInputs: true, placeholder: '<gone>' }, messages);
    expect(results.slice(0, 3)).toEqual(['c1:<gone>', 'c2:<gone>', 'c3:ccccccccc']);
    expect(sent[1].content).toEqual([call('c1', 'big', {})]);
    expect(sent[3].content).toEqual([call('c2', 'big', {}), call('c3', 'big', {})]);
    expect((messages[1].content[0] as { args: unknown }).args).toEqual({ query: 'x'.repeat(30) });
  });

  it('tokenCounter replaces the count and sees the messages', () => {
    const seen: number[] = [];
    const tokenCounter = (messages: readonly Message[]) => {
      seen.push(messages.length);
      return messages.reduce((n, m) => n + m.content.filter((p) => p.type === 'tool-result' && p.result !== '[cleared]').length * 100, 0);
    };
    const { edits } = runWith({ trigger: { tokens: 499 }, tokenCounter });
    expect(edits[0]).toMatchObject({ cleared: 2, tokensBefore: 500, tokensAfter: 300 });
    expect(seen).toEqual([10, 10]);
    expect(runWith({ trigger: { tokens: 500 }, tokenCounter }).edits).toEqual([]);
  });

  it('edits every model call of a run afresh, never the run history', () => {
    const big = defineTool({ name: 'big', description: 'big', parameters: z.object({}), execute: () => 'z'.repeat(40) });
    const model = scriptedModel([
      { toolCalls: [{ name: 'big', args: {} }] },
      { toolCalls: [{ name: 'big', args: {} }] },
      { toolCalls: [{ name: 'big', args: {} }] },
      'Done',
    ]);
    const agent = createAgent({ model, tools: [big], middleware: [contextEditing({ trigger: { tokens: 1 }, keep: { toolResults: 1 } })] });
    const events = collect(agent.run('go'));
    const cleared = (m: number) =>
      model.requests[m].messages.flatMap((msg) =>
        msg.content.filter((p) => p.type === 'tool-result').map((p) => (p as { result: unknown }).result === '[cleared]'),
      );
    expect([cleared(0), cleared(1), cleared(2), cleared(3)]).toEqual([[], [false], [true, false], [true, true, false]]);
    expect(ofType(events, 'context-edited').map((e) => e.cleared)).toEqual([1, 2]);
    expect(ofType(events, 'tool-result').every((e) => e.result === 'z'.repeat(40))).toBe(true);
  });

  it('checks its options', () => {
    expect(() => contextEditing({ trigger: { tokens: -1 } })).toThrow(new TypeError("contextEditing: 'trigger.tokens' must be a non-negative number, got -1"));
    expect(() => contextEditing({ keep: { toolResults: 1.5 } })).toThrow(/'keep.toolResults' must be a non-negative integer/);
    expect(() => contextEditing({ keep: 3 } as never)).toThrow(new TypeError("contextEditing: 'keep' must be an object { toolResults }"));
    expect(() => contextEditing({ excludeTools: 'big' as unknown as string[] })).toThrow(/'excludeTools' must be an array/);
    expect(() => contextEditing({ tokenCounter: 3 as unknown as () => number })).toThrow(/'tokenCounter' must be a function/);
    expect(() => contextEditing({ clearAtLeast: NaN })).toThrow(/'clearAtLeast'/);
  });

  it('refuses an unknown option in trigger and keep, naming its path (rather than as a missing value)', () => {
    expect(() => contextEditing({ trigger: { tokenz: 1000 } } as never)).toThrow(
      new TypeError("contextEditing: unknown option(s) 'trigger.tokenz' (known: trigger.tokens)"),
    );
    expect(() => contextEditing({ trigger: { tokens: 1000, messages: 50 } } as never)).toThrow(
      new TypeError("contextEditing: unknown option(s) 'trigger.messages' (known: trigger.tokens)"),
    );
    expect(() => contextEditing({ keep: { toolResults: 2, messages: 5 } } as never)).toThrow(
      new TypeError("contextEditing: unknown option(s) 'keep.messages' (known: keep.toolResults)"),
    );
    expect(() => contextEditing({ trigger: { tokens: 1000 }, keep: { toolResults: 2 } })).not.toThrow();
  });
});
