import { uniqueId } from '../../src/internal/uniqueId';
import { createAgent, createSession } from '../../src/index';
import { collectEvents, scriptedModel } from '../../src/testing/index';

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

describe('uniqueId', () => {
  it('is the prefix, an underscore and a random UUID', () => {
    expect(uniqueId('run')).toMatch(new RegExp(`^run_${UUID}$`));
    expect(uniqueId('req')).not.toBe(uniqueId('req'));
  });

  it('is a version 4 UUID, unique over more ids than one batch of random bytes', () => {
    const ids = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      const id = uniqueId('msg');
      expect(id).toMatch(/^msg_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      ids.add(id);
    }
    expect(ids.size).toBe(3000); // 1,024 ids a batch: three batches
  });

  it('names runs and sessions by default', () => {
    const events = collectEvents(createAgent({ model: scriptedModel(['hi']) }).run('hello'));
    expect(events[0].runId).toMatch(new RegExp(`^run_${UUID}$`));
    expect(createSession().id).toMatch(new RegExp(`^session_${UUID}$`));
  });
});
