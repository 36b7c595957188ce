import { deepStrictEqual } from 'node:assert';
import { plainObjects } from '../../src/internal/plainObjects';
import { PlainUsage } from '../../src/model/usage';
import { createAgent } from '../../src/index';
import { collectEvents, eventsOfType, scriptedModel } from '../../src/testing/index';

describe('plainObjects', () => {
  const Point = plainObjects(function (this: { x: number; y: number }, x: number, y: number) {
    this.x = x;
    this.y = y;
  });

  it('makes objects that equal the literal strictly, for jest and for node:assert', () => {
    const point = new Point(1, 2);
    expect(point).toStrictEqual({ x: 1, y: 2 });
    expect(() => deepStrictEqual(point, { x: 1, y: 2 })).not.toThrow();
    expect(Object.getPrototypeOf(point)).toBe(Object.prototype);
    expect(point.constructor).toBe(Object);
    expect(JSON.stringify(point)).toBe('{"x":1,"y":2}');
  });

  it('usage in events and in the run result is a plain object', () => {
    const agent = createAgent({ model: scriptedModel([{ text: 'hi', usage: { inputTokens: 3, outputTokens: 4 } }]) });
    const events = collectEvents(agent.run('go'));
    expect(eventsOfType(events, 'iteration-end')[0].usage).toStrictEqual({ inputTokens: 3, outputTokens: 4 });
    expect(eventsOfType(events, 'run-end')[0].usage).toStrictEqual({ inputTokens: 3, outputTokens: 4 });
    expect(new PlainUsage(1, 2)).toStrictEqual({ inputTokens: 1, outputTokens: 2 });
  });

  it('a model request is a plain object with its fields', () => {
    let request: unknown;
    const agent = createAgent({
      model: (r) => ((request = r), scriptedModel(['ok'])(r)),
      instructions: 'Be brief.',
    });
    collectEvents(agent.run('go'));
    expect(Object.getPrototypeOf(request)).toBe(Object.prototype);
    expect(request).toMatchObject({ instructions: 'Be brief.', tools: [], messages: [{ role: 'user' }] });
  });
});
