import { Observable } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, textOf, type ModelClient } from '../../src/index';
import { eventLabels, scriptedModel, type ScriptedTurn, collectEvents, eventsOfType } from '../../src/testing/index';
import { toolSelector, type ToolSelectorOptions } from '../../operators/toolSelector';

const collect = collectEvents;
const ofType = eventsOfType;

const tool = (name: string) => defineTool({ name, description: `Does ${name}`, parameters: z.object({}), execute: () => name });
const five = ['alpha', 'beta', 'gamma', 'delta', 'echo'].map(tool);

function setup(answer: ScriptedTurn | readonly ScriptedTurn[], options: Omit<ToolSelectorOptions, 'model'> = {}, turns: readonly ScriptedTurn[] = ['Done']) {
  const selector = scriptedModel(Array.isArray(answer) ? answer : [answer as ScriptedTurn]);
  const model = scriptedModel(turns);
  const agent = createAgent({ model, tools: five, middleware: [toolSelector({ model: selector, minToolsToTrigger: 4, ...options })] });
  return { selector, model, agent };
}
const offered = (model: ReturnType<typeof scriptedModel>, call = 0) => model.requests[call].tools.map((t) => t.name);

describe('toolSelector', () => {
  it('checks its options', () => {
    expect(() => toolSelector(undefined as unknown as ToolSelectorOptions)).toThrow(
      new TypeError("toolSelector: options must be an object with 'model', got undefined"),
    );
    expect(() => toolSelector({} as ToolSelectorOptions)).toThrow(
      new TypeError("toolSelector: 'model' must be a ModelClient (request) => Observable<ModelUpdate>"),
    );
    const model: ModelClient = () => new Observable();
    expect(() => toolSelector({ model, maxTools: 0 })).toThrow(new TypeError("toolSelector: 'maxTools' must be an integer >= 1, got 0"));
    expect(() => toolSelector({ model, minToolsToTrigger: -1 })).toThrow(/'minToolsToTrigger' must be an integer >= 0/);
    expect(() => toolSelector({ model, alwaysInclude: 'x' as unknown as string[] })).toThrow(/'alwaysInclude' must be an array/);
  });

  it('does not select with the defaults (20 tools) nor with exactly minToolsToTrigger tools', () => {
    const selector = scriptedModel(['{"tools": []}']);
    const model = scriptedModel(['a', 'b']);
    collect(createAgent({ model, tools: five, middleware: [toolSelector({ model: selector })] }).run('hi'));
    collect(createAgent({ model, tools: five, middleware: [toolSelector({ model: selector, minToolsToTrigger: 5 })] }).run('hi'));
    expect(selector.calls).toBe(0);
    expect(offered(model, 1)).toHaveLength(5);
  });

  it("counts the selection call's usage in the run's usage and run-end.usage", () => {
    const { agent } = setup({ text: '{"tools": ["alpha"]}', usage: { inputTokens: 200, outputTokens: 8 } }, {}, [
      { text: 'Done', usage: { inputTokens: 10, outputTokens: 2 } },
    ]);
    const events = collect(agent.run('hi'));
    expect(ofType(events, 'iteration-end')[0].usage).toEqual({ inputTokens: 210, outputTokens: 10 });
    expect(ofType(events, 'run-end')[0].usage).toEqual({ inputTokens: 210, outputTokens: 10 });
  });

  it('offers the picked tools plus alwaysInclude, ignores unknown names, and says so', () => {
    const { selector, model, agent } = setup('{"tools": ["gamma", "nope", "alpha", "echo"]}', { alwaysInclude: ['echo'] });
    const events = collect(agent.run('Find the gamma thing', { runId: 'r' }));
    expect(offered(model)).toEqual(['alpha', 'gamma', 'echo']);
    expect(ofType(events, 'tool-selection')).toEqual([{ type: 'tool-selection', runId: 'r', selected: ['alpha', 'gamma', 'echo'], ignored: ['nope'] }]);
    // The selector saw the other tools' names and descriptions, and the user's request; its text is not in the run's events.
    const request = selector.requests[0];
    expect(request.tools).toEqual([]);
    expect(request.instructions).toContain('{"tools": ["tool_name", ...]}');
    expect(textOf(request.messages[0])).toBe(
      'Available tools:\n- alpha: Does alpha\n- beta: Does beta\n- gamma: Does gamma\n- delta: Does delta\n\nUser request:\nFind the gamma thing',
    );
    expect(ofType(events, 'text-delta').map((e) => e.text)).toEqual(['Done']);
  });

  it('offers at most maxTools picked tools (the first picked), besides alwaysInclude', () => {
    const { model, agent } = setup('```json\n{"tools": ["delta", "beta", "gamma"]}\n```', { maxTools: 2, alwaysInclude: ['alpha'] });
    const events = collect(agent.run('hi'));
    expect(offered(model)).toEqual(['alpha', 'beta', 'delta']);
    expect(ofType(events, 'tool-selection')[0]).toMatchObject({ selected: ['alpha', 'beta', 'delta'], ignored: [] });
  });

  it('keeps every tool when the answer is not {"tools": [names]}', () => {
    for (const answer of ['I would pick alpha and beta.', '{"tools": "alpha"}', '{"tools": [1, 2]}', '']) {
      const { model, agent } = setup(answer);
      const events = collect(agent.run('hi'));
      expect(offered(model)).toEqual(['alpha', 'beta', 'gamma', 'delta', 'echo']);
      expect(ofType(events, 'tool-selection')[0]).toMatchObject({ selected: ['alpha', 'beta', 'gamma', 'delta', 'echo'], ignored: [] });
    }
  });

  it('an empty selection offers alwaysInclude only', () => {
    const { model, agent } = setup('{"tools": []}', { alwaysInclude: ['beta'] });
    collect(agent.run('hi'));
    expect(offered(model)).toEqual(['beta']);
  });

  it('selects once per turn, for every iteration of it; each run selects again', () => {
    const { selector, model, agent } = setup(['{"tools": ["beta"]}', '{"tools": ["gamma"]}'], {}, [
      { toolCalls: [{ name: 'beta', args: {} }] },
      { toolCalls: [{ name: 'alpha', args: {} }] },
      'Done',
      'Again',
    ]);
    const events = collect(agent.run('hi'));
    expect(selector.calls).toBe(1);
    expect([offered(model, 0), offered(model, 1), offered(model, 2)]).toEqual([['beta'], ['beta'], ['beta']]);
    // A call to a tool not offered this turn is an unknown tool.
    expect(ofType(events, 'tool-result').map((e) => [e.name, e.result])).toEqual([
      ['beta', 'beta'],
      ['alpha', "Unknown tool 'alpha'. Available tools: 'beta'."],
    ]);
    collect(agent.run('again'));
    expect(selector.calls).toBe(2);
    expect(offered(model, 3)).toEqual(['gamma']);
  });

  it('fails the run when alwaysInclude names a tool the turn does not have', () => {
    const { selector, agent } = setup('{"tools": []}', { alwaysInclude: ['missing'] });
    const events = collect(agent.run('hi', { runId: 'r' }));
    expect(selector.calls).toBe(0);
    expect(ofType(events, 'error')[0]).toEqual({
      type: 'error',
      runId: 'r',
      source: 'middleware',
      middleware: 'toolSelector',
      hook: 'beforeMessageTurn',
      error: { name: 'Error', message: "toolSelector: 'alwaysInclude' names tools the turn does not have: 'missing'" },
    });
  });

  it('waits for the selection in virtual time', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const selector = scriptedModel([{ text: ['{"tools": ', '["alpha"]}'], delay: 5 }], { scheduler: testScheduler });
      const agent = createAgent({
        model: scriptedModel(['Done'], { scheduler: testScheduler }),
        tools: five,
        middleware: [toolSelector({ model: selector, minToolsToTrigger: 1 })],
        scheduler: testScheduler,
      });
      // Selector deltas at 5 and 10 ms, its finish at 15 ms.
      expectObservable(agent.run('hi').pipe(eventLabels())).toBe('a 14ms (bcdef|)', {
        a: 'run-start',
        b: 'tool-selection',
        c: 'iteration-start',
        d: 'text-delta:Done',
        e: 'iteration-end',
        f: 'run-end:completed',
      });
    });
  });
});
