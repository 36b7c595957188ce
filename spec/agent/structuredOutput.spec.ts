import { filter, lastValueFrom, map, toArray, type Observable } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, createSession, defineTool, memoryStore, OutputValidationError, type AgentEvent, type ModelRequest } from '../../src/index';
import { eventLabel, eventLabels, scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { permissions } from '../../operators/permissions';

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const Weather = z.object({ city: z.string(), celsius: z.number() });

const weatherTool = defineTool({
  name: 'get_weather',
  description: 'Current weather',
  parameters: z.object({ city: z.string() }),
  execute: ({ city }) => ({ city, celsius: 21 }),
});

describe('structured output', () => {
  it('parses and validates the final answer: invoke resolves with output, run-end carries it', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] }, '{"city":"Paris","celsius":21}']);
    const agent = createAgent({ model, tools: [weatherTool], output: Weather });
    const result = await agent.invoke('Weather in Paris?');
    expect(result.output).toEqual({ city: 'Paris', celsius: 21 });
    expect(result.text).toBe('{"city":"Paris","celsius":21}');
    const events = await collect(createAgent({ model: scriptedModel(['{"city":"Oslo","celsius":3}']), output: Weather }).run('x'));
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', output: { city: 'Oslo', celsius: 3 } });
  });

  it('tells the model the schema on every request (name, JSON Schema, strict)', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] }, '{"city":"Paris","celsius":21}']);
    await createAgent({ model, tools: [weatherTool], output: Weather }).invoke('x');
    expect(model.requests).toHaveLength(2);
    for (const request of model.requests) {
      expect(request.output).toEqual({
        name: 'final_answer',
        schema: {
          type: 'object',
          properties: { city: { type: 'string' }, celsius: { type: 'number' } },
          required: ['city', 'celsius'],
          additionalProperties: false,
        },
        strict: true,
      });
    }
  });

  it("takes the schema's title and description; an optional field makes it not strict", async () => {
    const model = scriptedModel(['{"a":"x"}']);
    const schema = z.object({ a: z.string(), b: z.number().optional() }).meta({ title: 'Answer', description: 'The answer' });
    await createAgent({ model, output: schema }).invoke('x');
    expect(model.requests[0].output).toMatchObject({ name: 'Answer', description: 'The answer', strict: false });
    expect(model.requests[0].output?.schema).not.toHaveProperty('title');
  });

  it('a run without output sends no output and emits no output-delta', async () => {
    const model = scriptedModel(['{"city":"Paris"}']);
    const events = await collect(createAgent({ model }).run('x'));
    expect(model.requests[0]).not.toHaveProperty('output');
    expect(events.some((e) => e.type === 'output-delta')).toBe(false);
    expect(events.at(-1)).not.toHaveProperty('output');
  });

  it('an answer that does not fit goes back to the model; the retry that fits completes the run', () => {
    const ts = new TestScheduler((a, e) => expect(a).toEqual(e));
    ts.run(({ expectObservable }) => {
      const model = scriptedModel(
        [
          { text: ['{"city":"Paris",', '"celsius":"warm"}'], delay: 10 },
          { text: ['{"city":"Paris",', '"celsius":21}'], delay: 10 },
        ],
        { scheduler: ts },
      );
      const agent = createAgent({ model, scheduler: ts, output: Weather });
      expectObservable(agent.run('x').pipe(map(eventLabel))).toBe('(ab) 6ms (cd) 6ms (ef) 6ms (gb) 6ms (cd) 6ms (ij) 6ms (kl|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:{"city":"Paris",',
        d: 'output-delta:{"city":"Paris"}',
        e: 'text-delta:"celsius":"warm"}',
        f: 'output-delta:{"city":"Paris","celsius":"warm"}',
        g: 'iteration-end',
        i: 'text-delta:"celsius":21}',
        j: 'output-delta:{"city":"Paris","celsius":21}',
        k: 'iteration-end',
        l: 'run-end:completed',
      });
    });
  });

  it('streams output-delta with the partial object each time it changes, not on every delta', () => {
    const ts = new TestScheduler((a, e) => expect(a).toEqual(e));
    ts.run(({ expectObservable }) => {
      const text = ['{"ci', 'ty":', '"Pa', 'ris"', ', "celsius": 2', '1', '}'];
      const model = scriptedModel([{ text, delay: 5 }], { scheduler: ts });
      const events$ = createAgent({ model, scheduler: ts, output: Weather }).run('x');
      const partials$ = events$.pipe(
        filter((e) => e.type === 'output-delta' || e.type === 'run-end'),
        map((e) => JSON.stringify(e.type === 'output-delta' ? e.partial : e.type === 'run-end' ? e.output : undefined)),
      );
      // '{"ci' shows {}; 'ty":' changes nothing; '"Pa' opens the string; '1' only goes on with the number.
      expectObservable(partials$).toBe('5ms a 9ms b 4ms c 14ms d 4ms (e|)', {
        a: '{}',
        b: '{"city":"Pa"}',
        c: '{"city":"Paris"}',
        d: '{"city":"Paris","celsius":21}',
        e: '{"city":"Paris","celsius":21}',
      });
    });
  });

  it('once the retries are spent, the run ends with an error event carrying OutputValidationError, then run-end reason error', () => {
    const ts = new TestScheduler((a, e) => expect(a).toEqual(e));
    ts.run(({ expectObservable }) => {
      const model = scriptedModel(['{"city":"Paris"}', '{"city":"Paris"}'], { scheduler: ts });
      const agent = createAgent({ model, scheduler: ts, output: Weather });
      expectObservable(agent.run('x').pipe(map(eventLabel))).toBe('(abcdebcdfg|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:{"city":"Paris"}',
        d: 'output-delta:{"city":"Paris"}',
        e: 'iteration-end',
        f: 'error:model',
        g: 'run-end:error',
      });
    });
  });

  it('OutputValidationError names the issues; invoke rejects with it; the answers stay in the session', async () => {
    const model = scriptedModel(['{"city":"Paris","celsius":"warm"}', 'not json']);
    const session = createSession();
    const agent = createAgent({ model, output: Weather });
    const failure = await agent.invoke('x', { session }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(OutputValidationError);
    const error = failure as OutputValidationError;
    expect(error.name).toBe('OutputValidationError');
    expect(error.attempts).toBe(2);
    expect(error.text).toBe('not json');
    expect(error.issues).toEqual([]);
    expect(error.message).toMatch(/^The model's answer does not fit the output schema \(2 attempts\): not valid JSON \(Unexpected token/);
    const events = await collect(createAgent({ model: scriptedModel(['{"city":1}']), output: Weather, outputRetries: 0 }).run('x'));
    expect(events.slice(-2)).toMatchObject([
      {
        type: 'error',
        source: 'model',
        error: {
          name: 'OutputValidationError',
          message:
            "The model's answer does not fit the output schema (1 attempt): ✖ Invalid input: expected string, received number;   → at city; ✖ Invalid input: expected number, received undefined;   → at celsius",
        },
      },
      { type: 'run-end', reason: 'error' },
    ]);
    expect(events.at(-1)).not.toHaveProperty('output');
    expect(session.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
  });

  it('the retry message names the zod issues, as other zod errors read', async () => {
    const model = scriptedModel(['{"city":"Paris","celsius":"warm"}', 'not json', '{"city":"Paris","celsius":21}']);
    const session = createSession();
    const result = await createAgent({ model, output: Weather, outputRetries: 2 }).invoke('x', { session });
    expect(result.output).toEqual({ city: 'Paris', celsius: 21 });
    const lastMessage = (request: ModelRequest) => request.messages.at(-1);
    expect(lastMessage(model.requests[1])).toEqual({
      id: expect.any(String),
      role: 'user',
      content: [
        {
          type: 'text',
          text: 'Invalid output: ✖ Invalid input: expected number, received string;   → at celsius. Answer again with only the JSON that fits the output schema.',
        },
      ],
    });
    expect(lastMessage(model.requests[2])?.content[0]).toMatchObject({ text: expect.stringMatching(/^Invalid output: not valid JSON \(Unexpected token/) });
    expect(session.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user', 'assistant']);
  });

  it('no retry past maxIterations: the last allowed answer that does not fit fails the run', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] }, '{}', '{"city":"Paris","celsius":21}']);
    const agent = createAgent({ model, tools: [weatherTool], output: Weather, maxIterations: 2, outputRetries: 3 });
    await expect(agent.invoke('x')).rejects.toThrow(OutputValidationError);
    expect(model.calls).toBe(2);
  });

  it("a run's own schema (and retries) overrides the agent's", async () => {
    const City = z.object({ name: z.string() });
    const model = scriptedModel(['{"name":"Oslo"}', '{"nope":1}', '{"name":"Bergen"}']);
    const agent = createAgent({ model, output: Weather, outputRetries: 0 });
    const first = await agent.invoke('x', { output: City });
    expect(first.output).toEqual({ name: 'Oslo' });
    expect(model.requests[0].output?.schema).toMatchObject({ properties: { name: { type: 'string' } } });
    const second = await agent.invoke('x', { output: City, outputRetries: 1 });
    expect(second.output).toEqual({ name: 'Bergen' });
  });

  it("in virtual time: a run's own schema judges its answer, where the agent's would have refused it", () => {
    const ts = new TestScheduler((a, e) => expect(a).toEqual(e));
    const City = z.object({ name: z.string() }).meta({ title: 'city' });
    const model = scriptedModel([{ text: ['{"name":', '"Oslo"}'], delay: 5 }], { scheduler: ts });
    ts.run(({ expectObservable }) => {
      const agent = createAgent({ model, scheduler: ts, output: Weather, outputRetries: 0 });
      const events$ = agent.run('x', { output: City }).pipe(
        filter((e) => e.type !== 'text-delta'),
        map((e) => (e.type === 'run-end' ? `run-end:${e.reason}:${JSON.stringify(e.output)}` : eventLabel(e))),
      );
      expectObservable(events$).toBe('(ab) 1ms c 4ms f 4ms (de|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'output-delta:{}',
        f: 'output-delta:{"name":"Oslo"}',
        d: 'iteration-end',
        e: 'run-end:completed:{"name":"Oslo"}',
      });
    });
    expect(model.requests[0].output?.name).toBe('city');
  });

  it('a transforming schema: output is its parse, not the raw JSON', async () => {
    const schema = z.object({ celsius: z.number().transform((c) => c * 1.8 + 32) });
    const result = await createAgent({ model: scriptedModel(['{"celsius":20}']), output: schema }).invoke('x');
    expect(result.output).toEqual({ celsius: 68 });
  });

  it('bad options are TypeErrors naming them', () => {
    const model = scriptedModel([]);
    expect(() => createAgent({ model, output: { parse: () => 1 } as never })).toThrow(
      "createAgent: 'output' must be a zod schema (e.g. z.object({ ... })), got",
    );
    expect(() => createAgent({ model, output: z.array(z.string()) })).toThrow("createAgent: 'output' must be a z.object() schema");
    expect(() => createAgent({ model, output: Weather, outputRetries: -1 })).toThrow("createAgent: 'outputRetries' must be an integer >= 0, got -1");
    expect(() => createAgent({ model, outputRetries: 1.5 })).toThrow("createAgent: 'outputRetries' must be an integer >= 0, got 1.5");
    expect(() => createAgent({ model, output: z.object({ at: z.date() }) })).toThrow(
      "createAgent: 'output': field 'at' is a z.date(), and no JSON value is one: use z.coerce.date()",
    );
  });

  it('bad run options end the run with an error event naming them', async () => {
    const agent = createAgent({ model: scriptedModel(['{}']) });
    const events = await collect(agent.run('x', { outputRetries: 2 }));
    expect(events.map(eventLabel)).toEqual(['run-start', 'error:run', 'run-end:error']);
    expect(events[1]).toMatchObject({ error: { message: "run: 'outputRetries' needs an 'output' schema (the run's or the agent's)" } });
    await expect(agent.invoke('x', { output: 'no' as never })).rejects.toThrow("run: 'output' must be a zod schema");
  });

  it('a suspended run resumed in another agent judges its answer there; run-end.output is journaled with it', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const pay = defineTool({ name: 'pay', description: 'Pays', parameters: z.object({ n: z.number() }), needsApproval: true, execute: ({ n }) => `paid ${n}` });
    const Receipt = z.object({ paid: z.number() });
    const agentWith = (turns: ScriptedTurn[]) =>
      createAgent({ model: scriptedModel(turns), tools: [pay], middleware: [permissions()], store, onRequest: 'suspend', output: Receipt });
    const a = agentWith([{ toolCalls: [{ name: 'pay', args: { n: 3 }, callId: 'c1' }] }]);
    const first = await collect(a.run('pay 3', { runId: 'r2' }));
    expect(first.at(-1)).toMatchObject({ type: 'run-end', reason: 'suspended' });
    expect(first.at(-1)).not.toHaveProperty('output');
    const b = agentWith(['{"paid"', '{"paid":3}']);
    expect(await b.respond('r2', { type: 'permission-response', requestId: 'r2.0.c1.permission-request', approved: true })).toBe(true);
    const resumed = await collect(b.resume('r2'));
    expect(resumed.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed', output: { paid: 3 } });
    const replayed = await collect(b.events('r2', { after: first.at(-1)?.seq }));
    expect(replayed).toEqual(resumed);
    expect(replayed.at(-1)).toMatchObject({ output: { paid: 3 } });
    expect(replayed.filter((e) => e.type === 'output-delta').map((e) => (e as { partial: unknown }).partial)).toEqual([{}, { paid: 3 }]);
  });

  it('a journaled run keeps output-delta and run-end.output: agent.events() replays them from the store', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const model = scriptedModel([{ text: ['{"city":', '"Paris","celsius":21}'] }]);
    const agent = createAgent({ model, store, output: Weather });
    const live = await collect(agent.run('x', { runId: 'r1' }));
    const replayed = await collect(agent.events('r1'));
    expect(replayed).toEqual(live);
    expect(replayed.filter((e) => e.type === 'output-delta').map((e) => (e as { partial: unknown }).partial)).toEqual([{}, { city: 'Paris', celsius: 21 }]);
    expect(replayed.at(-1)).toMatchObject({ type: 'run-end', output: { city: 'Paris', celsius: 21 } });
  });
});

describe('docs/guide/structured-output.md', () => {
  it('an answer that does not fit, then one that does, in virtual time', () => {
    const testScheduler = new TestScheduler((a, e) => expect(a).toEqual(e));
    testScheduler.run(({ expectObservable }) => {
      const model = scriptedModel(['{"city":"Paris"}', '{"city":"Paris","celsius":21}'], { scheduler: testScheduler });
      const agent = createAgent({ model, scheduler: testScheduler, output: z.object({ city: z.string(), celsius: z.number() }) });
      expectObservable(agent.run('Weather?').pipe(eventLabels())).toBe('(abcdebfgeh|)', {
        a: 'run-start',
        b: 'iteration-start',
        c: 'text-delta:{"city":"Paris"}',
        d: 'output-delta:{"city":"Paris"}',
        e: 'iteration-end',
        f: 'text-delta:{"city":"Paris","celsius":21}',
        g: 'output-delta:{"city":"Paris","celsius":21}',
        h: 'run-end:completed',
      });
    });
  });
});

// Compile-time checks (tsc compiles the specs): the output's type follows the schema.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function assertType<T extends true>(): T | undefined {
  return undefined;
}

describe('structured output types', () => {
  it('invoke() resolves with output typed by the agent’s schema, or by the run’s', async () => {
    const typed = createAgent({ model: scriptedModel(['{"city":"Paris","celsius":21}', '{"name":"Oslo"}']), output: Weather });
    const result = await typed.invoke('x');
    assertType<Equal<typeof result.output, { city: string; celsius: number } | undefined>>();
    const City = z.object({ name: z.string() });
    const perRun = await typed.invoke('x', { output: City });
    assertType<Equal<typeof perRun.output, { name: string } | undefined>>();
    const plain = await createAgent({ model: scriptedModel(['hi']) }).invoke('x');
    assertType<Equal<typeof plain.output, undefined>>();
    const transformed = createAgent({ model: scriptedModel([]), output: z.object({ n: z.string().transform(Number) }) });
    assertType<Equal<Awaited<ReturnType<typeof transformed.invoke<never>>>['output'], { n: number } | undefined>>();
    expect(transformed.name).toBe('agent');
    expect(plain.text).toBe('hi');
    expect(result.output?.celsius).toBe(21);
    expect(perRun.output?.name).toBe('Oslo');
  });
});
