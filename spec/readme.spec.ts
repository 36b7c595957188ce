import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, type AgentResponse } from '../src/index';
import { modelTimeout, permissions } from '../operators/index';
import { eventLabels, scriptedModel } from '../src/testing/index';

// The marble examples of the README and of docs/guide/marble-testing.md, kept honest: the same
// code, run (docs.spec.ts only compiles them).
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

describe('docs/guide/marble-testing.md', () => {
  const rm = defineTool({
    name: 'rm',
    description: 'Deletes a file',
    parameters: z.object({ path: z.string() }),
    needsApproval: true,
    execute: () => 'deleted',
  });

  it('a question nobody answers', () => {
    const testScheduler = new TestScheduler((a, e) => expect(a).toEqual(e));
    testScheduler.run(({ expectObservable }) => {
      const model = scriptedModel([{ toolCalls: [{ name: 'rm', args: { path: '/tmp/x' } }] }, 'I did not delete it.'], { scheduler: testScheduler });
      const agent = createAgent({ model, tools: [rm], scheduler: testScheduler, middleware: [permissions({ timeout: 1000 })] });
      expectObservable(agent.run('Clean up /tmp').pipe(eventLabels())).toBe('(abcdefg) 991ms (hijklmn|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-input-start',
        d: 'tool-input-delta',
        e: 'tool-input-delta',
        f: 'tool-call:rm',
        g: 'permission-request',
        h: 'request-expired:timeout',
        i: 'tool-result:rm',
        j: 'iteration-end',
        k: 'iteration-start',
        l: 'text-delta:I did not delete it.',
        m: 'iteration-end',
        n: 'run-end:completed',
      });
    });
  });

  it('an answer in virtual time', () => {
    const testScheduler = new TestScheduler((a, e) => expect(a).toEqual(e));
    testScheduler.run(({ cold, expectObservable }) => {
      const model = scriptedModel([{ toolCalls: [{ name: 'rm', args: { path: '/tmp/x' } }] }, 'Deleted.'], { scheduler: testScheduler });
      const agent = createAgent({ model, tools: [rm], scheduler: testScheduler, middleware: [permissions()], idGenerator: (prefix) => `${prefix}_1` });
      const responses = cold<AgentResponse>('10ms a', { a: { type: 'permission-response', requestId: 'req_1', approved: true } });
      expectObservable(agent.run('Clean up /tmp', { responses }).pipe(eventLabels())).toBe('(abcdefg) 1ms (hijklm|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-input-start',
        d: 'tool-input-delta',
        e: 'tool-input-delta',
        f: 'tool-call:rm',
        g: 'permission-request',
        h: 'tool-result:rm',
        i: 'iteration-end',
        j: 'iteration-start',
        k: 'text-delta:Deleted.',
        l: 'iteration-end',
        m: 'run-end:completed',
      });
    });
  });
});
