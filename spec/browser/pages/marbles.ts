/**
 * Marble tests in the page, bundled for the browser by browser.spec.ts (as a browser test runner
 * would run them): the README's first-token timeout in virtual time, with `rx-agent/testing`.
 */
import { createAgent } from 'rx-agent';
import { modelTimeout } from 'rx-agent/operators';
import { eventLabels, scriptedModel, startFakeOpenAIServer } from 'rx-agent/testing';
import { TestScheduler } from 'rxjs/testing';

declare global {
  interface Window {
    /** The frames the run produced against the expected ones, as the TestScheduler compared them. */
    firstTokenTimeout(firstTokenMs: number): { actual: unknown; expected: unknown; equal: boolean };
    startServerHere(): Promise<string>;
  }
}

window.firstTokenTimeout = (firstTokenMs) => {
  let compared = { actual: undefined as unknown, expected: undefined as unknown, equal: false };
  const testScheduler = new TestScheduler((actual, expected) => {
    compared = { actual, expected, equal: JSON.stringify(actual) === JSON.stringify(expected) };
  });
  testScheduler.run(({ expectObservable }) => {
    const model = scriptedModel([{ text: ['Hel', 'lo'], delay: 10 }], { scheduler: testScheduler });
    const agent = createAgent({ model, scheduler: testScheduler, middleware: [modelTimeout({ firstTokenMs })] });
    expectObservable(agent.run('hi').pipe(eventLabels())).toBe('(ab) 1ms (cd|)', {
      a: 'run-start',
      b: 'iteration-start',
      c: 'error:model',
      d: 'run-end:error',
    });
  });
  return compared;
};

window.startServerHere = () =>
  startFakeOpenAIServer([]).then(
    () => 'started',
    (error: unknown) => String(error),
  );
