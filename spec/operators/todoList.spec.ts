import { filter, map, merge } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { createAgent, createSession, defineState, type AgentMiddleware, type TodoItem } from '../../src/index';
import { scriptedModel, collectEvents, eventsOfType } from '../../src/testing/index';
import { PARALLEL_WRITE_TODOS_ERROR, WRITE_TODOS_DESCRIPTION, WRITE_TODOS_SYSTEM_PROMPT, todoList } from '../../operators/todoList';
import { z } from 'zod';

const collect = collectEvents;
const ofType = eventsOfType;

const plan: TodoItem[] = [
  { content: 'Read the code', status: 'in_progress' },
  { content: 'Write the fix', status: 'pending' },
];
const write = (todos: unknown, callId = 't1') => ({ name: 'write_todos', args: { todos }, callId });

describe('todoList', () => {
  it('adds write_todos and a guide to the instructions', () => {
    const model = scriptedModel(['ok']);
    collect(createAgent({ model, instructions: 'Be brief.', middleware: [todoList()] }).run('hi'));
    const request = model.requests[0];
    expect(request.instructions).toBe(`Be brief.\n\n${WRITE_TODOS_SYSTEM_PROMPT}`);
    expect(request.tools).toHaveLength(1);
    expect(request.tools[0]).toMatchObject({ name: 'write_todos', description: WRITE_TODOS_DESCRIPTION });
    const todos = (request.tools[0].parameters as { properties: { todos: { items: { properties: { status: { enum: string[] } } } } } }).properties.todos;
    expect(todos.items.properties.status.enum).toEqual(['pending', 'in_progress', 'completed']);
  });

  it('systemPrompt and toolDescription can be changed; an empty systemPrompt adds nothing', () => {
    const model = scriptedModel(['ok']);
    collect(createAgent({ model, middleware: [todoList({ systemPrompt: '', toolDescription: 'Plan.' })] }).run('hi'));
    expect(model.requests[0].instructions).toBeUndefined();
    expect(model.requests[0].tools[0].description).toBe('Plan.');
    expect(() => todoList({ systemPrompt: 3 as unknown as string })).toThrow(new TypeError("todoList: 'systemPrompt' must be a string"));
  });

  it('keeps the list in session state and emits todos-updated on each write, across runs', () => {
    const session = createSession();
    const done: TodoItem[] = [
      { content: 'Read the code', status: 'completed' },
      { content: 'Write the fix', status: 'in_progress' },
    ];
    const model = scriptedModel([{ toolCalls: [write(plan)] }, 'Planned', { toolCalls: [write(done, 't2')] }, 'Working']);
    const agent = createAgent({ model, middleware: [todoList()] });
    const first = collect(agent.run('fix the bug', { session, runId: 'r1' }));
    expect(ofType(first, 'todos-updated')).toEqual([{ type: 'todos-updated', runId: 'r1', todos: plan }]);
    expect(ofType(first, 'tool-result')[0]).toMatchObject({ result: `Updated todo list to ${JSON.stringify(plan)}`, isError: false });
    expect(session.snapshot().state['rx-agent.todoList.todos']).toEqual({ version: 1, value: { todos: plan } });

    const second = collect(agent.run('go on', { session, runId: 'r2' }));
    expect(ofType(second, 'todos-updated')).toEqual([{ type: 'todos-updated', runId: 'r2', todos: done }]);
    expect(session.snapshot().state['rx-agent.todoList.todos']).toEqual({ version: 1, value: { todos: done } });
    // A restored session keeps the list.
    const restored = createSession({ snapshot: JSON.parse(JSON.stringify(session.snapshot())) });
    const Todos = defineState({
      key: 'rx-agent.todoList.todos',
      schema: z.object({ todos: z.array(z.any()) }),
      initial: () => ({ todos: [] }),
      scope: 'session',
    });
    let seen: unknown;
    const reader: AgentMiddleware = { name: 'reader', beforeIteration: map((ctx) => ((seen = ctx.state(Todos).todos), ctx)) };
    collect(createAgent({ model: scriptedModel(['x']), middleware: [todoList(), reader] }).run('?', { session: restored }));
    expect(seen).toEqual(done);
  });

  it('an invalid list is an error result and changes nothing', () => {
    const session = createSession();
    const model = scriptedModel([{ toolCalls: [write([{ content: 'x', status: 'done' }])] }, 'ok']);
    const events = collect(createAgent({ model, middleware: [todoList()] }).run('hi', { session }));
    expect(ofType(events, 'todos-updated')).toEqual([]);
    expect(ofType(events, 'tool-result')[0].isError).toBe(true);
    expect(session.snapshot().state['rx-agent.todoList.todos']).toBeUndefined();
  });

  it('refuses several write_todos calls in one response', () => {
    const model = scriptedModel([{ toolCalls: [write(plan, 'a'), write([], 'b')] }, { toolCalls: [write(plan, 'c')] }, 'ok']);
    const events = collect(createAgent({ model, middleware: [todoList()] }).run('hi', { runId: 'r' }));
    expect(ofType(events, 'tool-result').map((e) => [e.callId, e.isError, e.isError ? e.result : 'ok'])).toEqual([
      ['a', true, PARALLEL_WRITE_TODOS_ERROR],
      ['b', true, PARALLEL_WRITE_TODOS_ERROR],
      ['c', false, 'ok'],
    ]);
    expect(ofType(events, 'todos-updated')).toEqual([{ type: 'todos-updated', runId: 'r', todos: plan }]);
  });

  it('keeps the lists of two concurrent runs (without sessions) apart', () => {
    const testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
    testScheduler.run(({ expectObservable }) => {
      const todoA: TodoItem[] = [{ content: 'A', status: 'pending' }];
      const todoB: TodoItem[] = [{ content: 'B', status: 'pending' }];
      const model = scriptedModel(
        [
          (request) => ({ toolCalls: [write(JSON.stringify(request.messages).includes('run a') ? todoA : todoB)], delay: 1 }),
          (request) => ({ toolCalls: [write(JSON.stringify(request.messages).includes('run a') ? todoA : todoB)], delay: 1 }),
          { text: 'done', delay: 3 },
          { text: 'done', delay: 3 },
        ],
        { scheduler: testScheduler },
      );
      const Todos = defineState({
        key: 'rx-agent.todoList.todos',
        schema: z.object({ todos: z.array(z.any()) }),
        initial: () => ({ todos: [] }),
        scope: 'session',
      });
      const seen: string[] = [];
      const reader: AgentMiddleware = {
        name: 'reader',
        afterIteration: map((ctx) => (seen.push(`${ctx.runId}:${JSON.stringify(ctx.state(Todos).todos)}`), ctx)),
      };
      const agent = createAgent({ model, middleware: [todoList(), reader], scheduler: testScheduler });
      const updates = merge(agent.run('run a', { runId: 'a' }), agent.run('run b', { runId: 'b' })).pipe(
        filter((e) => e.type === 'todos-updated'),
        map((e) => `${e.runId}:${e.todos[0].content}`),
      );
      // Both runs write at 3 ms (their first model call), and end at 9 ms (text at 6, finish at 9).
      expectObservable(updates).toBe('---(ab)--|', { a: 'a:A', b: 'b:B' });
      testScheduler.flush();
      expect(seen.sort()).toEqual([
        'a:[{"content":"A","status":"pending"}]',
        'a:[{"content":"A","status":"pending"}]',
        'b:[{"content":"B","status":"pending"}]',
        'b:[{"content":"B","status":"pending"}]',
      ]);
    });
  });
});
