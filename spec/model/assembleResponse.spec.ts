import { ResponseAssembler } from '../../src/index';
import { UnparsedArguments } from '../../src/messages/unparsedArguments';

describe('ResponseAssembler', () => {
  it('joins text and reasoning and gathers interleaved tool-call deltas by index', () => {
    const a = new ResponseAssembler();
    a.add({ type: 'reasoning-delta', text: 'think' });
    a.add({ type: 'text-delta', text: 'Hel' });
    a.add({ type: 'text-delta', text: 'lo' });
    a.add({ type: 'tool-call-delta', index: 0, callId: 'c0', name: 'get_weather', argsDelta: '{"ci' });
    a.add({ type: 'tool-call-delta', index: 1, callId: 'c1', name: 'search', argsDelta: '{"q":' });
    a.add({ type: 'tool-call-delta', index: 0, argsDelta: 'ty":"Paris"}' });
    a.add({ type: 'tool-call-delta', index: 1, argsDelta: '"cafe"}' });
    a.add({ type: 'usage', inputTokens: 10, outputTokens: 5 });
    a.add({ type: 'finish', reason: 'tool-calls' });
    expect(a.message()).toMatchObject({
      role: 'assistant',
      content: [
        { type: 'reasoning', text: 'think' },
        { type: 'text', text: 'Hello' },
        { type: 'tool-call', callId: 'c0', name: 'get_weather', args: { city: 'Paris' } },
        { type: 'tool-call', callId: 'c1', name: 'search', args: { q: 'cafe' } },
      ],
    });
    expect(a.usage).toEqual({ inputTokens: 10, outputTokens: 5 });
    expect(a.finishReason).toBe('tool-calls');
  });

  it('gives every shape of answer its parts in order, the one-part answers included', () => {
    const answer = (...updates: Parameters<ResponseAssembler['add']>[0][]) => {
      const a = new ResponseAssembler('msg_1');
      for (const u of updates) a.add(u);
      return a.message();
    };
    const call = { type: 'tool-call-delta', index: 0, callId: 'c0', name: 'echo', argsDelta: '{"i":1}' } as const;
    const text = { type: 'text-delta', text: 'Hi' } as const;
    expect(answer(text)).toEqual({ id: 'msg_1', role: 'assistant', content: [{ type: 'text', text: 'Hi' }] });
    expect(answer(call)).toEqual({ id: 'msg_1', role: 'assistant', content: [{ type: 'tool-call', callId: 'c0', name: 'echo', args: { i: 1 } }] });
    expect(answer()).toEqual({ id: 'msg_1', role: 'assistant', content: [] });
    expect(answer(text, call).content).toEqual([
      { type: 'text', text: 'Hi' },
      { type: 'tool-call', callId: 'c0', name: 'echo', args: { i: 1 } },
    ]);
    expect(answer({ type: 'reasoning-delta', text: 'hm' }, text).content).toEqual([
      { type: 'reasoning', text: 'hm' },
      { type: 'text', text: 'Hi' },
    ]);
  });

  it('takes a name repeated on every delta once (as the openai SDK does), not concatenated', () => {
    const a = new ResponseAssembler();
    for (const argsDelta of ['', '{"city":', '"Paris"}']) {
      a.add({ type: 'tool-call-delta', index: 0, callId: 'call_1', name: 'get_weather', argsDelta });
    }
    expect(a.message().content).toEqual([{ type: 'tool-call', callId: 'call_1', name: 'get_weather', args: { city: 'Paris' } }]);
  });

  it('gathers by index even when a server changes the call id on a later delta', () => {
    const a = new ResponseAssembler();
    a.add({ type: 'tool-call-delta', index: 0, callId: 'call_A', name: 'search', argsDelta: '' });
    a.add({ type: 'tool-call-delta', index: 0, callId: 'call_B', argsDelta: '{"q":' });
    a.add({ type: 'tool-call-delta', index: 0, callId: 'call_B', argsDelta: '"x"}' });
    expect(a.message().content).toEqual([{ type: 'tool-call', callId: 'call_B', name: 'search', args: { q: 'x' } }]);
  });

  it('keeps arguments that are not JSON as UnparsedArguments, and gives ids to calls without one', () => {
    const a = new ResponseAssembler();
    a.add({ type: 'tool-call-delta', index: 0, name: 'x', argsDelta: '{"broken' });
    const [part] = a.message().content;
    expect(part).toMatchObject({ type: 'tool-call', callId: 'call_0', name: 'x' });
    const args = (part as { args: unknown }).args;
    expect(args).toBeInstanceOf(UnparsedArguments);
    expect(JSON.stringify(args)).toBe('"{\\"broken"');
  });

  it('treats empty arguments as {} and reset() forgets a failed attempt', () => {
    const a = new ResponseAssembler();
    a.add({ type: 'text-delta', text: 'partial' });
    a.reset();
    a.add({ type: 'tool-call-delta', index: 0, callId: 'c', name: 'now', argsDelta: '' });
    expect(a.message().content).toEqual([{ type: 'tool-call', callId: 'c', name: 'now', args: {} }]);
  });

  it('keeps a text part for an empty text delta, and none once reset() dropped text and reasoning', () => {
    const a = new ResponseAssembler();
    a.addText('');
    expect(a.message()).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: '' }] });
    a.add({ type: 'reasoning-delta', text: 'hm' });
    a.reset();
    expect(a.message()).toMatchObject({ role: 'assistant', content: [] });
    a.addText('again');
    expect(a.message().content).toEqual([{ type: 'text', text: 'again' }]);
  });

  it('assembles a lone call at an index past 0, and calls around a gap, each with its own id', () => {
    const lone = new ResponseAssembler();
    lone.add({ type: 'tool-call-delta', index: 2, name: 'search', argsDelta: '{"q":"x"}' });
    expect(lone.message().content).toEqual([{ type: 'tool-call', callId: 'call_2', name: 'search', args: { q: 'x' } }]);
    expect(lone.rawToolCalls()).toEqual([{ callId: 'call_2', name: 'search', argsText: '{"q":"x"}' }]);

    const gap = new ResponseAssembler();
    gap.add({ type: 'tool-call-delta', index: 3, callId: 'c3', name: 'b', argsDelta: '{}' });
    gap.add({ type: 'tool-call-delta', index: 1, callId: 'c1', name: 'a', argsDelta: '{"n":1}' });
    expect(gap.message().content).toEqual([
      { type: 'tool-call', callId: 'c1', name: 'a', args: { n: 1 } },
      { type: 'tool-call', callId: 'c3', name: 'b', args: {} },
    ]);
  });

  it('takes calls again after reset() dropped the earlier ones', () => {
    const a = new ResponseAssembler();
    a.add({ type: 'tool-call-delta', index: 0, callId: 'old', name: 'x', argsDelta: '{"v":' });
    a.reset();
    expect(a.message().content).toEqual([]);
    a.add({ type: 'tool-call-delta', index: 1, callId: 'new1', name: 'y', argsDelta: '{"v":1}' });
    a.add({ type: 'tool-call-delta', index: 0, callId: 'new0', name: 'x', argsDelta: '{"v":0}' });
    expect(a.message().content).toEqual([
      { type: 'tool-call', callId: 'new0', name: 'x', args: { v: 0 } },
      { type: 'tool-call', callId: 'new1', name: 'y', args: { v: 1 } },
    ]);
  });

  it('builds long arguments in linear time, from one-character pieces', () => {
    const a = new ResponseAssembler();
    const start = performance.now();
    a.add({ type: 'tool-call-delta', index: 0, callId: 'c', name: 'write', argsDelta: '{"text":"' });
    for (let i = 0; i < 200_000; i++) a.add({ type: 'tool-call-delta', index: 0, argsDelta: 'x' });
    a.add({ type: 'tool-call-delta', index: 0, argsDelta: '"}' });
    const [part] = a.message().content;
    expect((part as { args: { text: string } }).args.text.length).toBe(200_000);
    expect(performance.now() - start).toBeLessThan(1000);
  });

  it('builds long answers in linear time', () => {
    const a = new ResponseAssembler();
    const start = performance.now();
    for (let i = 0; i < 200_000; i++) a.add({ type: 'text-delta', text: 'tok ' });
    const text = (a.message().content[0] as { text: string }).text;
    expect(text.length).toBe(800_000);
    expect(performance.now() - start).toBeLessThan(1000);
  });
});
