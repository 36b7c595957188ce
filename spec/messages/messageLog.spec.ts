import { textMessage, toMessages } from '../../src/index';
import type { Message } from '../../src/index';
import { MessageLog } from '../../src/messages/messageLog';

const m = (text: string) => ({ ...textMessage('user', text), id: `m-${text}` });

describe('MessageLog', () => {
  it('appends without changing earlier versions, sharing one backing array', () => {
    const a = MessageLog.of([m('1')]);
    const b = a.append(m('2'));
    const c = b.append(m('3'));
    expect(a.toArray().map((x) => x.content[0])).toEqual([{ type: 'text', text: '1' }]);
    expect(b.length).toBe(2);
    expect(c.length).toBe(3);
    expect(c.at(-1)).toEqual(m('3'));
  });

  it('copies when an older version branches', () => {
    const a = MessageLog.of([m('1')]);
    const b = a.append(m('2'));
    const branch = a.append(m('other'));
    expect(b.toArray()).toEqual([m('1'), m('2')]);
    expect(branch.toArray()).toEqual([m('1'), m('other')]);
  });

  it('gives a frozen array, built once per version', () => {
    const a = MessageLog.of([m('1')]);
    expect(a.toArray()).toBe(a.toArray());
    expect(Object.isFrozen(a.toArray())).toBe(true);
    expect(a.since(0)).not.toBe(a.toArray());
  });

  it('views the newest version without a copy, and an older one as its own messages', () => {
    const a = MessageLog.of([m('1')]);
    const view = a.view();
    expect(a.view()).toBe(view);
    expect(view).toEqual([m('1')]);
    const b = a.append(m('2'));
    expect(b.view()).toBe(view); // the same array, grown: no copy per version
    expect(view).toHaveLength(2);
    const older = a.view();
    expect(older).not.toBe(view);
    expect(older).toEqual([m('1')]);
    expect(Object.isFrozen(older)).toBe(true);
    expect(() => (MessageLog.empty.view() as Message[]).push(m('x'))).toThrow(TypeError);
    expect(MessageLog.empty.append(m('y')).toArray()).toEqual([m('y')]);
  });

  it('views 20,000 versions in a row through one array', () => {
    let log = MessageLog.empty;
    let read = 0;
    const arrays = new Set<readonly Message[]>();
    for (let i = 0; i < 20_000; i++) {
      log = log.append(m('x'));
      const view = log.view();
      arrays.add(view);
      read += view.length;
    }
    expect(read).toBe((20_000 * 20_001) / 2);
    expect(arrays.size).toBe(1);
  });

  it('appending 100,000 messages one at a time stays linear', () => {
    let log = MessageLog.empty;
    const message = m('x'); // made once: the loop times the appends
    const start = performance.now();
    for (let i = 0; i < 100_000; i++) log = log.append(message);
    expect(log.length).toBe(100_000);
    expect(performance.now() - start).toBeLessThan(500);
  });
});

describe('toMessages', () => {
  it('turns a string into a user message and checks other input with zod', () => {
    expect(toMessages('hi')).toEqual([{ ...m('hi'), id: expect.stringMatching(/^msg_/) }]);
    expect(toMessages(m('a'))).toEqual([m('a')]);
    expect(() => toMessages([{ role: 'user', content: [{ type: 'image' }] }] as never)).toThrow(/Invalid run input/);
  });
});
