import { DemoError, parseDemoArgs } from '../../examples/demoArgs';

describe('parseDemoArgs', () => {
  it('reads the flags anywhere; the other words are the question', () => {
    expect(parseDemoArgs(['--json', 'Weather', 'in', 'Oslo?', '--trace'])).toEqual({
      trace: true,
      json: true,
      redis: false,
      action: undefined,
      question: 'Weather in Oslo?',
    });
  });

  it('defaults: no flag set, the default question', () => {
    const args = parseDemoArgs([]);
    expect(args).toMatchObject({ trace: false, json: false, redis: false, action: undefined });
    expect(args.question).toMatch(/^Plan my afternoon in Paris/);
  });

  it('--json goes with --redis and its actions', () => {
    expect(parseDemoArgs(['--redis', '--json', '--resume', 'paris-1'])).toMatchObject({
      json: true,
      redis: true,
      action: { kind: 'resume', runId: 'paris-1' },
    });
  });

  it('an action needs a run id and --redis, and takes no question', () => {
    expect(() => parseDemoArgs(['--redis', '--approve'])).toThrow(
      new DemoError('--approve needs a run id, e.g. npm start -- --redis --approve paris-1a2b3c4d'),
    );
    expect(() => parseDemoArgs(['--redis', '--approve', '--json'])).toThrow('--approve needs a run id');
    expect(() => parseDemoArgs(['--deny', 'r1'])).toThrow('--deny works on a run journaled in Redis: add --redis');
    expect(() => parseDemoArgs(['--redis', '--events', 'r1', 'hello'])).toThrow('--events takes no question, got "hello"');
    expect(() => parseDemoArgs(['--redis', '--events', 'r1', '--resume', 'r2'])).toThrow('only one of --approve, --deny, --resume, --events at a time');
  });
});
