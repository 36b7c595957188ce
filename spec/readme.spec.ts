import { TestScheduler } from 'rxjs/testing';
import { createAgent } from '../src/index';
import { modelTimeout } from '../operators/index';
import { eventLabels, scriptedModel } from '../src/testing/index';

// The marble example of the README, kept honest.
describe('README: testing with marbles', () => {
  it('a first-token timeout in virtual time', () => {
    const testScheduler = new TestScheduler((a, e) => expect(a).toEqual(e));
    testScheduler.run(({ expectObservable }) => {
      const model = scriptedModel([{ text: ['Hel', 'lo'], delay: 10 }], { scheduler: testScheduler });
      const agent = createAgent({ model, scheduler: testScheduler, middleware: [modelTimeout({ firstTokenMs: 5 })] });
      expectObservable(agent.run('hi').pipe(eventLabels())).toBe('(ab) 1ms (cd|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'error:model',
        d: 'run-end:error',
      });
    });
  });
});
