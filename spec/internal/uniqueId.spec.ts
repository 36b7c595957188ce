import { uniqueId } from '../../src/internal/uniqueId';
import { createAgent, createSession } from '../../src/index';
import { collectEvents, scriptedModel } from '../../src/testing/index';

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

describe('uniqueId', () => {
  it('is the prefix, an underscore and a random UUID', () => {
    expect(uniqueId('run')).toMatch(new RegExp(`^run_${UUID}$`));
    expect(uniqueId('req')).not.toBe(uniqueId('req'));
  });

  it('names runs and sessions by default', () => {
    const events = collectEvents(createAgent({ model: scriptedModel(['hi']) }).run('hello'));
    expect(events[0].runId).toMatch(new RegExp(`^run_${UUID}$`));
    expect(createSession().id).toMatch(new RegExp(`^session_${UUID}$`));
  });
});
