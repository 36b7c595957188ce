import { TestScheduler } from 'rxjs/testing';
import { Observable, filter, map } from 'rxjs';
import { createAgent, ModelError, type AgentEvent, type ModelRequest, type ModelUpdate } from '../../src/index';
import { eventLabel, scriptedModel } from '../../src/testing/index';

/** Labels, with a sub-agent's events (tool-progress values) as `>` and the child's own label. */
const label = (event: AgentEvent): string =>
  event.type === 'tool-progress'
    ? `>${eventLabel(event.value as AgentEvent)}`
    : event.type === 'tool-result'
      ? `result:${JSON.stringify(event.result)}${event.isError ? '!' : ''}`
      : eventLabel(event);

describe('agent.asTool', () => {
  let testScheduler: TestScheduler;
  beforeEach(() => (testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected))));

  it("runs the child on the call's input, forwards its events as tool-progress as they come, and returns its final text", () => {
    let requests: readonly ModelRequest[] = [];
    testScheduler.run(({ expectObservable }) => {
      const scheduler = testScheduler;
      const childModel = scriptedModel([{ text: ['Tides ', 'are high.'], delay: 10 }], { scheduler });
      const child = createAgent({ name: 'researcher', model: childModel, scheduler, idGenerator: (p) => `child-${p}` });
      const parentModel = scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'tides today' }, callId: 'c1' }] }, 'They are high.'], { scheduler });
      const parent = createAgent({ model: parentModel, scheduler, tools: [child.asTool({ name: 'research', description: 'Looks things up' })] });
      // The child's deltas reach the parent at frames 10 and 20, while the call runs.
      expectObservable(parent.run('Tides?').pipe(map(label))).toBe('(abcdefgh)i 9ms j 9ms (klmnopqr|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'tool-input-start',
        d: 'tool-input-delta',
        e: 'tool-input-delta',
        f: 'tool-call:research',
        g: '>run-start',
        h: '>iteration-start',
        i: '>text-delta:Tides ',
        j: '>text-delta:are high.',
        k: '>iteration-end',
        l: '>run-end:completed',
        m: 'result:"Tides are high."',
        n: 'iteration-end',
        o: 'iteration-start',
        p: 'text-delta:They are high.',
        q: 'iteration-end',
        r: 'run-end:completed',
      });
      requests = childModel.requests;
    });
    // The child was asked what the parent's model wrote, as the user message of a fresh run.
    expect(requests.map((r) => r.messages)).toEqual([[{ id: expect.stringMatching(/^msg_/), role: 'user', content: [{ type: 'text', text: 'tides today' }] }]]);
  });

  it("a child that fails gives an error result the parent's model reads, and the parent goes on", () => {
    let read: readonly ModelRequest[] = [];
    testScheduler.run(({ expectObservable }) => {
      const scheduler = testScheduler;
      const childModel = scriptedModel([{ text: ['Look'], error: new ModelError('quota exceeded', { retryable: false }), delay: 5 }], { scheduler });
      const child = createAgent({ name: 'researcher', model: childModel, scheduler });
      const parentModel = scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'x' } }] }, 'Sorry.'], { scheduler });
      const parent = createAgent({ model: parentModel, scheduler, tools: [child.asTool({ name: 'research', description: 'Looks things up' })] });
      const results = parent.run('Go').pipe(
        map(label),
        filter((l) => l.startsWith('result') || l.startsWith('>error') || l.startsWith('run-end')),
      );
      expectObservable(results).toBe('5ms (abc|)', {
        a: '>error:model',
        b: `result:"Agent 'researcher' failed: ModelError: quota exceeded"!`,
        c: 'run-end:completed',
      });
      read = parentModel.requests;
    });
    expect(read[1].messages.at(-1)).toMatchObject({
      role: 'tool',
      content: [{ type: 'tool-result', name: 'research', result: "Agent 'researcher' failed: ModelError: quota exceeded", isError: true }],
    });
  });

  it("the parent's cancel reaches the child through the call's signal: its model call stops", () => {
    testScheduler.run(({ expectObservable, cold }) => {
      const scheduler = testScheduler;
      const stopped: number[] = [];
      // A child model that never answers, and notes when its call is torn down.
      const childModel = () => new Observable<ModelUpdate>(() => () => void stopped.push(scheduler.now()));
      const child = createAgent({ name: 'researcher', model: childModel, scheduler });
      const parentModel = scriptedModel([{ toolCalls: [{ name: 'research', args: { input: 'x' } }] }], { scheduler });
      const parent = createAgent({ model: parentModel, scheduler, tools: [child.asTool({ name: 'research', description: 'Looks things up' })] });
      const controller = new AbortController();
      cold('25ms a').subscribe(() => controller.abort());
      const labels = parent.run('Go', { signal: controller.signal }).pipe(
        map(label),
        filter((l) => l.startsWith('>run') || l.startsWith('run-end')),
      );
      expectObservable(labels).toBe('a 24ms (b|)', { a: '>run-start', b: 'run-end:cancelled' });
      scheduler.schedule(() => expect(stopped).toEqual([25]), 30);
    });
  });

  it('checks its options: a description for the parent model, a valid tool name', () => {
    const child = createAgent({ name: 'researcher', model: scriptedModel(['hi']) });
    expect(() => child.asTool({ name: 'research', description: '' })).toThrow(
      "asTool: 'description' must be a non-empty string: the parent's model reads it to know when to call agent 'researcher'",
    );
    expect(() => child.asTool(undefined as never)).toThrow(new TypeError("asTool: options must be an object with 'name' and 'description', got undefined"));
    expect(() => child.asTool({ name: 'research', description: 'd', approval: true } as never)).toThrow(
      new TypeError("asTool: unknown option(s) 'approval' (known: name, description, needsApproval)"),
    );
    expect(() => child.asTool({ name: 'no spaces', description: 'd' })).toThrow('defineTool: invalid tool name "no spaces"');
    const tool = child.asTool({ name: 'research', description: 'Looks things up' });
    expect(tool.spec).toEqual({
      name: 'research',
      description: 'Looks things up',
      parameters: expect.objectContaining({ type: 'object', required: ['input'], properties: { input: expect.objectContaining({ type: 'string' }) } }),
    });
  });
});
