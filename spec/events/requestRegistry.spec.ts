import { RequestRegistry } from '../../src/events/requestRegistry';

describe('RequestRegistry', () => {
  it('knows nothing before the first request', () => {
    const registry = new RequestRegistry();
    expect(registry.isOpen('req_1')).toBe(false);
    expect(registry.settle('req_1')).toBe(false);
    expect(registry.pending()).toEqual([]);
  });

  it('settles each open request once; the rest stay open, oldest first', () => {
    const registry = new RequestRegistry();
    registry.add('req_1');
    registry.add('req_2');
    registry.add('req_3');
    expect(registry.settle('req_2')).toBe(true);
    expect(registry.settle('req_2')).toBe(false); // a duplicate answer is refused
    expect(registry.isOpen('req_2')).toBe(false);
    expect(registry.isOpen('req_1')).toBe(true);
    expect(registry.pending()).toEqual(['req_1', 'req_3']);
  });

  it('an id added twice while open is one request', () => {
    const registry = new RequestRegistry();
    registry.add('req_1');
    registry.add('req_1');
    expect(registry.settle('req_1')).toBe(true);
    expect(registry.isOpen('req_1')).toBe(false);
  });

  it('pending() is a copy', () => {
    const registry = new RequestRegistry();
    registry.add('req_1');
    const ids = registry.pending();
    ids.push('req_x');
    expect(registry.pending()).toEqual(['req_1']);
  });
});
