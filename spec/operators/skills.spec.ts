import { Observable, lastValueFrom, map, toArray } from 'rxjs';
import { z } from 'zod';
import { createAgent, createSession, defineTool, type AgentEvent, type AgentMiddleware, type ModelRequest } from '../../src/index';
import { eventLabel, scriptedModel, type ScriptedTurn, eventsOfType } from '../../src/testing/index';
import { dropToolInput } from '../support/withoutToolInput';
import { ACTIVATE_SKILL_TOOL, skills, type Skill } from '../../operators/skills';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const toolNames = (request: ModelRequest) => request.tools.map((t) => t.name);

const bought: string[] = [];
const buyStock = defineTool({
  name: 'buy_stock',
  description: 'Buys a stock',
  parameters: z.object({ symbol: z.string() }),
  execute: ({ symbol }) => (bought.push(symbol), `bought ${symbol}`),
});
const chart = defineTool({ name: 'chart', description: 'Draws a chart', parameters: z.object({}), execute: () => 'chart' });
const weather = defineTool({ name: 'weather', description: 'Weather', parameters: z.object({}), execute: () => 'sunny' });
const trading: Skill = { name: 'trading', description: 'Buy and sell stocks', instructions: 'Confirm the symbol before buying.', tools: [buyStock, chart] };
const analysis: Skill = { name: 'analysis', description: 'Analyse data', instructions: 'Show your working.', tools: [chart] };
const activate = (...names: string[]): ScriptedTurn => ({
  toolCalls: names.map((name, i) => ({ name: ACTIVATE_SKILL_TOOL, args: { name }, callId: `a${i}` })),
});

beforeEach(() => (bought.length = 0));

describe('skills', () => {
  it('adds activate_skill (listing the skills); before an activation no skill instructions or tools are offered', async () => {
    const model = scriptedModel(['hello']);
    await createAgent({ model, instructions: 'Base.', tools: [weather], middleware: [skills({ skills: [trading, analysis] })] }).invoke('hi');
    const [request] = model.requests;
    expect(request.instructions).toBe('Base.');
    expect(toolNames(request)).toEqual(['weather', 'activate_skill']);
    expect(request.tools[1]).toEqual({
      name: 'activate_skill',
      description:
        'Activates a skill: its instructions and tools become available from your next step. Skills:\n- trading: Buy and sell stocks\n- analysis: Analyse data',
      parameters: expect.objectContaining({
        type: 'object',
        required: ['name'],
        properties: { name: expect.objectContaining({ enum: ['trading', 'analysis'] }) },
      }),
    });
  });

  it('from the next model call on, the skill instructions are appended and its tools offered; event skill-activated', async () => {
    const model = scriptedModel([activate('trading'), { toolCalls: [{ name: 'buy_stock', args: { symbol: 'AAPL' } }] }, 'Bought.']);
    const agent = createAgent({ model, instructions: 'Base.', tools: [weather], middleware: [skills({ skills: [trading, analysis] })] });
    const events = await collect(agent.run('Buy AAPL', { runId: 'r' }));
    expect(dropToolInput(events).map(eventLabel)).toEqual([
      'run-start',
      'iteration-start',
      'tool-call:activate_skill',
      'tool-result:activate_skill',
      'skill-activated',
      'iteration-end',
      'iteration-start',
      'tool-call:buy_stock',
      'tool-result:buy_stock',
      'iteration-end',
      'iteration-start',
      'text-delta:Bought.',
      'iteration-end',
      'run-end:completed',
    ]);
    expect(eventsOfType(events, 'skill-activated')).toEqual([{ type: 'skill-activated', runId: 'r', skill: 'trading' }]);
    expect(eventsOfType(events, 'tool-result')[0]).toMatchObject({ result: "Skill 'trading' activated.", isError: false });
    expect(model.requests[0].instructions).toBe('Base.');
    expect(model.requests[1].instructions).toBe('Base.\n\nConfirm the symbol before buying.');
    expect(model.requests[2].instructions).toBe('Base.\n\nConfirm the symbol before buying.');
    expect(toolNames(model.requests[1])).toEqual(['weather', 'activate_skill', 'buy_stock', 'chart']);
    expect(bought).toEqual(['AAPL']);
  });

  it("a skill's tools cannot be called before its activation (unknown tool)", async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'buy_stock', args: { symbol: 'AAPL' } }] }, 'ok']);
    const events = await collect(createAgent({ model, middleware: [skills({ skills: [trading] })] }).run('go'));
    expect(eventsOfType(events, 'tool-result')[0]).toMatchObject({ isError: true, result: expect.stringMatching(/^Unknown tool 'buy_stock'/) });
    expect(bought).toEqual([]);
  });

  it('without agent instructions the skill instructions stand alone; several skills in activation order, shared tools once', async () => {
    const model = scriptedModel([activate('analysis'), activate('trading'), 'done']);
    await createAgent({ model, middleware: [skills({ skills: [trading, analysis] })] }).invoke('go');
    expect(model.requests[1].instructions).toBe('Show your working.');
    expect(model.requests[2].instructions).toBe('Show your working.\n\nConfirm the symbol before buying.');
    expect(toolNames(model.requests[2])).toEqual(['activate_skill', 'chart', 'buy_stock']);
  });

  it('activations of one parallel batch all count, in the model order', async () => {
    const model = scriptedModel([activate('trading', 'analysis'), 'done']);
    const events = await collect(createAgent({ model, middleware: [skills({ skills: [analysis, trading] })] }).run('go'));
    expect(eventsOfType(events, 'skill-activated').map((e) => e.skill)).toEqual(['trading', 'analysis']);
    expect(model.requests[1].instructions).toBe('Confirm the symbol before buying.\n\nShow your working.');
  });

  it('an active skill is not activated again: one event; the model reads that it is already active', async () => {
    const model = scriptedModel([activate('trading'), activate('trading'), activate('trading', 'trading'), 'done']);
    const events = await collect(createAgent({ model, middleware: [skills({ skills: [trading] })] }).run('go'));
    expect(eventsOfType(events, 'skill-activated')).toHaveLength(1);
    expect(eventsOfType(events, 'tool-result').map((e) => e.result)).toEqual([
      "Skill 'trading' activated.",
      "Skill 'trading' is already active.",
      "Skill 'trading' is already active.",
      "Skill 'trading' is already active.",
    ]);
    expect(model.requests[3].instructions).toBe('Confirm the symbol before buying.');
  });

  it('an unknown skill name is an error result the model reads; nothing is activated', async () => {
    const model = scriptedModel([activate('cooking'), 'done']);
    const events = await collect(createAgent({ model, middleware: [skills({ skills: [trading] })] }).run('go'));
    expect(eventsOfType(events, 'tool-result')[0]).toMatchObject({
      isError: true,
      result: expect.stringMatching(/^Invalid arguments for tool 'activate_skill'/),
    });
    expect(eventsOfType(events, 'skill-activated')).toEqual([]);
    expect(model.requests[1].instructions).toBeUndefined();
  });

  it('an activation blocked by another middleware does not count', async () => {
    const blocker: AgentMiddleware = { name: 'blocker', beforeFunction: map((ctx) => ctx.block('not now', { isError: true })) };
    const model = scriptedModel([activate('trading'), 'done']);
    const events = await collect(createAgent({ model, middleware: [skills({ skills: [trading] }), blocker] }).run('go'));
    expect(eventsOfType(events, 'skill-activated')).toEqual([]);
    expect(toolNames(model.requests[1])).toEqual(['activate_skill']);
  });

  it('active skills are run state: the next run of the session starts with none; concurrent runs do not share them', async () => {
    const middleware = skills({ skills: [trading] });
    const session = createSession();
    const model = scriptedModel(
      [
        (request: ModelRequest): ScriptedTurn => {
          const input = request.messages.filter((m) => m.role === 'user').at(-1)?.content[0];
          const text = input?.type === 'text' ? input.text : '';
          const called = request.messages.at(-1)?.role === 'tool';
          // delay: the two runs below really interleave (asyncScheduler).
          return text === 'activate' && !called
            ? { ...(activate('trading') as object), delay: 2 }
            : { text: `instructions: ${request.instructions ?? 'none'}`, delay: 1 };
        },
      ],
      { loop: true },
    );
    const agent = createAgent({ model, middleware: [middleware] });
    const [a, b] = await Promise.all([agent.invoke('activate', { session }), agent.invoke('plain')]);
    expect(a.text).toBe('instructions: Confirm the symbol before buying.');
    expect(b.text).toBe('instructions: none');
    expect((await agent.invoke('plain', { session })).text).toBe('instructions: none');
  });

  it.each([
    [undefined, "options must be an object with a 'skills' array, got undefined"],
    ['trading', 'options must be an object with a \'skills\' array, got "trading"'],
    [{}, "'skills' must be a non-empty array"],
    [{ skills: [] }, "'skills' must be a non-empty array"],
    [{ skills: [{ ...trading, name: '' }] }, "'skills[0].name' must be a non-empty string"],
    [{ skills: [trading, trading] }, "'skills[1].name' repeats the skill name 'trading'"],
    [{ skills: [{ ...trading, description: 1 }] }, "'skills[0].description' must be a string"],
    [{ skills: [{ ...trading, instructions: '' }] }, "'skills[0].instructions' must be a non-empty string"],
    [{ skills: [{ ...trading, tools: [{ name: 'x' }] }] }, "'skills[0].tools[0]' is not a tool"],
    // A misspelt `tools` would leave the skill without its tools.
    [
      { skills: [trading, { name: 'analysis', description: 'Analyse data', instructions: 'Show your working.', tool: [chart] }] },
      "unknown option(s) 'skills[1].tool' (known: skills[1].name, skills[1].description, skills[1].instructions, skills[1].tools)",
    ],
    [
      { skills: [trading, { ...analysis, tools: [defineTool({ name: 'chart', description: '', parameters: z.object({}), execute: () => 1 })] }] },
      "'skills[1].tools[0]' reuses the tool name 'chart'",
    ],
  ])('rejects bad options %#', (options, message) => {
    expect(() => skills(options as never)).toThrow(`skills: ${message}`);
    expect(() => skills(options as never)).toThrow(TypeError);
  });
});
