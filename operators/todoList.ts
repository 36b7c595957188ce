import { z } from 'zod';
import { mapContext, defineState, defineTool, type AgentMiddleware, type IterationContext, type TodoItem } from '../src/index';
import { checkOptions, optionNames } from './internal/checkOptions';

const TodoSchema = z.object({
  content: z.string().describe('What to do'),
  status: z.enum(['pending', 'in_progress', 'completed']).describe('pending, in_progress or completed'),
});

/** The todo list of the session (without a session: of the run). */
const Todos = defineState({
  key: 'rx-agent.todoList.todos',
  schema: z.object({ todos: z.array(TodoSchema) }),
  initial: () => ({ todos: [] as TodoItem[] }),
  scope: 'session',
});

/** The `write_todos` calls of the current batch that are refused (several in one batch). */
const Refused = defineState({
  key: 'rx-agent.todoList.refused',
  schema: z.object({ callIds: z.array(z.string()) }),
  initial: () => ({ callIds: [] as string[] }),
  scope: 'run',
});

const TOOL_NAME = 'write_todos';

/** The result of a `write_todos` call made together with another one in one response. */
export const PARALLEL_WRITE_TODOS_ERROR =
  'Error: The `write_todos` tool should never be called multiple times in parallel. Please call it only once per model invocation to update the todo list.';

/** The default description of `write_todos`. */
export const WRITE_TODOS_DESCRIPTION =
  'Create and update a structured todo list for the current task, to plan and track progress on complex, multi-step work. ' +
  'Each call replaces the whole list: pass every item with its status (pending, in_progress or completed). ' +
  'Mark an item in_progress before starting it and completed as soon as it is done; keep one item in_progress at a time. ' +
  'Do not use it for simple tasks that take one or two steps.';

/** The default text added to the instructions. */
export const WRITE_TODOS_SYSTEM_PROMPT =
  '## `write_todos`\n\nYou have access to the `write_todos` tool to plan and track complex, multi-step tasks. ' +
  'Use it to break the work into steps and to mark each step in_progress and then completed as you go. ' +
  'Do not call it several times in one response, and do not use it for trivial tasks.';

/** Options of {@link todoList}. */
export interface TodoListOptions {
  /** Added to the instructions of every model call (default {@link WRITE_TODOS_SYSTEM_PROMPT}; `''` adds nothing). */
  systemPrompt?: string;
  /** The description of `write_todos` (default {@link WRITE_TODOS_DESCRIPTION}). */
  toolDescription?: string;
}

/** The keys of {@link TodoListOptions}: any other is refused. */
const OPTIONS = optionNames<TodoListOptions>({ systemPrompt: true, toolDescription: true });

/**
 * Gives the agent a todo list to plan multi-step work (LangChain's `TodoListMiddleware`). Adds the
 * tool `write_todos({ todos: [{ content, status: 'pending' | 'in_progress' | 'completed' }] })`,
 * whose call replaces the list; the list is kept in session state (saved with the session) and
 * each successful call emits `todos-updated { todos }`. Several `write_todos` calls in one
 * response are refused with an error result. The instructions of each model call get a short
 * guide to the tool.
 *
 * Options: `systemPrompt = WRITE_TODOS_SYSTEM_PROMPT` (appended to the instructions after a blank
 * line; `''` adds nothing), `toolDescription = WRITE_TODOS_DESCRIPTION`.
 *
 * @example
 * const agent = createAgent({ model, tools, middleware: [todoList()] });
 * agent.run('Refactor the billing module', { session }).pipe(ofType('todos-updated')).subscribe(e => render(e.todos));
 */
export function todoList(options: TodoListOptions = {}): AgentMiddleware {
  checkOptions('todoList', options, OPTIONS); // no unknown option, none set to null
  const systemPrompt = options.systemPrompt ?? WRITE_TODOS_SYSTEM_PROMPT;
  if (typeof systemPrompt !== 'string') throw new TypeError("todoList: 'systemPrompt' must be a string");
  const description = options.toolDescription ?? WRITE_TODOS_DESCRIPTION;
  if (typeof description !== 'string') throw new TypeError("todoList: 'toolDescription' must be a string");

  const writeTodos = defineTool({
    name: TOOL_NAME,
    description,
    parameters: z.object({ todos: z.array(TodoSchema).describe('The whole, updated todo list') }),
    // The list is kept by afterFunction (a tool cannot write state); the result is what the model reads.
    execute: ({ todos }) => `Updated todo list to ${JSON.stringify(todos)}`,
  });

  const withGuide = (ctx: IterationContext): IterationContext =>
    systemPrompt === '' ? ctx : ctx.with({ instructions: ctx.instructions ? `${ctx.instructions}\n\n${systemPrompt}` : systemPrompt });

  return {
    name: 'todoList',
    tools: [writeTodos],
    beforeIteration: mapContext(withGuide),
    beforeToolExecution: mapContext((ctx) => {
      const writes = ctx.toolCalls.filter((call) => call.name === TOOL_NAME);
      const refused = writes.length > 1 ? writes.map((call) => call.callId) : [];
      const current = ctx.state(Refused).callIds;
      return refused.length === 0 && current.length === 0 ? ctx : ctx.updateState(Refused, () => ({ callIds: refused }));
    }),
    beforeFunction: mapContext((ctx) =>
      ctx.toolName === TOOL_NAME && ctx.state(Refused).callIds.includes(ctx.callId) ? ctx.block(PARALLEL_WRITE_TODOS_ERROR, { isError: true }) : ctx,
    ),
    afterFunction: mapContext((ctx) => {
      if (ctx.toolName !== TOOL_NAME || ctx.blocked || ctx.isError) return ctx;
      const { todos } = ctx.args as { todos: TodoItem[] };
      ctx.emit({ type: 'todos-updated', todos });
      return ctx.updateState(Todos, () => ({ todos }));
    }),
  };
}
