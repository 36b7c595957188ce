import { messageId, textMessage, toMessages, type Message } from '../../src/index';
import { withId, withIds } from '../../src/messages/message';

describe('message ids', () => {
  it('messageId() makes a new msg_<uuid> each time; textMessage() gives one', () => {
    const a = messageId();
    expect(a).toMatch(/^msg_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(messageId()).not.toBe(a);
    expect(textMessage('user', 'hi').id).toMatch(/^msg_/);
  });

  it('withId keeps a message that has an id (the same object) and copies one that has none', () => {
    const named = textMessage('user', 'hi');
    expect(withId(named)).toBe(named);
    const bare: Message = { role: 'user', content: [{ type: 'text', text: 'hi' }] };
    const copy = withId(bare);
    expect(copy).toEqual({ ...bare, id: expect.stringMatching(/^msg_/) });
    expect(bare.id).toBeUndefined();
    expect(withId({ ...bare, id: '' }).id).toMatch(/^msg_/);
  });

  it('withIds answers the same array when every message has an id, else a copy naming those without', () => {
    const named = [textMessage('user', 'a'), textMessage('assistant', 'b')];
    expect(withIds(named)).toBe(named);
    const mixed: Message[] = [named[0], { role: 'assistant', content: [] }, named[1]];
    const out = withIds(mixed);
    expect(out).not.toBe(mixed);
    expect(out[0]).toBe(named[0]);
    expect(out[2]).toBe(named[1]);
    expect(out[1].id).toMatch(/^msg_/);
    expect(mixed[1].id).toBeUndefined();
  });

  it('toMessages gives ids to input without them and keeps those given; a bad id is refused', () => {
    expect(toMessages([{ id: 'mine', role: 'user', content: [] }])[0].id).toBe('mine');
    expect(toMessages('hi')[0].id).toMatch(/^msg_/);
    expect(() => toMessages([{ id: 7, role: 'user', content: [] } as never])).toThrow(/Invalid run input/);
  });

  it('toMessages names what it expects for input that is neither a string nor a message', () => {
    for (const input of [123, null, undefined, true]) {
      expect(() => toMessages(input as never)).toThrow(`Invalid run input: expected a string, a message or an array of messages, got ${String(input)}`);
    }
  });
});
