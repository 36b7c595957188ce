import { z } from 'zod';
import { mapContext, ToolError, defineState, defineTool, type AgentMiddleware, type Tool } from '../src/index';
import { checkNestedOptionNames, checkOptions, optionNames } from './internal/checkOptions';
import { isArray } from '../src/internal/isArray';

/** A skill: instructions and tools the model switches on when it needs them. */
export interface Skill {
  /** How the model names it in `activate_skill({ name })`. */
  readonly name: string;
  /** What it is for (the model reads it in the description of `activate_skill`). */
  readonly description: string;
  /** Appended to the instructions of every model call after the activation. */
  readonly instructions: string;
  /** Offered to the model from the model call after the activation on. */
  readonly tools?: readonly Tool[];
}

/** Options of {@link skills}. */
export interface SkillsOptions {
  /** The skills the model may activate (at least one). */
  skills: readonly Skill[];
}

/** The keys of {@link SkillsOptions}: any other is refused. */
const OPTIONS = optionNames<SkillsOptions>({ skills: true });

/** The keys of a {@link Skill}: any other is refused (a misspelt `tools` would drop the skill's tools). */
const SKILL_OPTIONS = optionNames<Skill>({ name: true, description: true, instructions: true, tools: true });

/** The name of the tool {@link skills} adds. */
export const ACTIVATE_SKILL_TOOL = 'activate_skill';

/** The active skills of the run, in activation order (run state). */
const ActiveSkills = defineState({
  key: 'rx-agent.skills.active',
  schema: z.array(z.string()),
  initial: (): string[] => [],
  scope: 'run',
});

/**
 * Skills the model activates on demand. Adds the tool `activate_skill({ name })` (its
 * description lists the skills; `name` is an enum of their names). From the next model call on,
 * an activated skill's `instructions` are appended to the instructions (after the agent's, separated
 * by a blank line, in activation order) and its `tools` are offered (a tool whose name the
 * request already has is not added twice). Before its activation a skill's tools are not offered,
 * so the model cannot call them. Active skills are run state: every run starts with none.
 *
 * How an activation reaches the state: a tool's `execute` cannot write run state, so
 * `activate_skill` only checks the name and answers `Skill '<name>' activated.`. This
 * middleware's `afterIteration` reads the iteration's tool results in the model's order: each
 * such successful result (not an error, not replaced by another middleware) adds the skill to
 * the run state and emits `skill-activated { skill }` (after the batch's `tool-result` events).
 * One list is written once per iteration, so several activations in one parallel batch all count
 * (per-call `afterFunction` writes to one key would overwrite each other when the batch's state
 * changes are merged). A skill that is already active is not activated again and emits no
 * event; when it was active before the batch, `afterFunction` lets the model read
 * `Skill '<name>' is already active.` instead.
 *
 * Options: `skills` (required, non-empty; unique names; a skill with another field is refused).
 *
 * @example
 * const trading = { name: 'trading', description: 'Buy and sell stocks',
 *                   instructions: 'Always confirm the symbol before buying.', tools: [buyStock] };
 * const agent = createAgent({ model, middleware: [skills({ skills: [trading] })] });
 * // iteration 0: activate_skill({ name: 'trading' }); iteration 1: the model sees the
 * // trading instructions and may call buy_stock.
 */
export function skills(options: SkillsOptions): AgentMiddleware {
  checkOptions('skills', options, OPTIONS, "with a 'skills' array"); // required: not an object, an unknown option, or one set to null
  const list = options.skills;
  if (!isArray(list) || list.length === 0) {
    throw new TypeError("skills: 'skills' must be a non-empty array of { name, description, instructions, tools? }");
  }
  const byName = new Map<string, Skill>();
  const toolNames = new Map<string, Tool>();
  list.forEach((skill: Skill, i: number) => {
    if (!skill || typeof skill !== 'object') throw new TypeError(`skills: 'skills[${i}]' must be an object`);
    checkNestedOptionNames('skills', `skills[${i}]`, skill, SKILL_OPTIONS);
    if (typeof skill.name !== 'string' || skill.name.trim() === '') {
      throw new TypeError(`skills: 'skills[${i}].name' must be a non-empty string`);
    }
    if (byName.has(skill.name)) throw new TypeError(`skills: 'skills[${i}].name' repeats the skill name '${skill.name}'`);
    if (typeof skill.description !== 'string') throw new TypeError(`skills: 'skills[${i}].description' must be a string`);
    if (typeof skill.instructions !== 'string' || skill.instructions === '') {
      throw new TypeError(`skills: 'skills[${i}].instructions' must be a non-empty string`);
    }
    if (skill.tools !== undefined && !isArray(skill.tools)) {
      throw new TypeError(`skills: 'skills[${i}].tools' must be an array of tools made with defineTool`);
    }
    (skill.tools ?? []).forEach((tool, j) => {
      if (!tool || typeof tool.execute !== 'function' || !tool.spec) {
        throw new TypeError(`skills: 'skills[${i}].tools[${j}]' is not a tool; make tools with defineTool()`);
      }
      const known = toolNames.get(tool.name);
      if (tool.name === ACTIVATE_SKILL_TOOL || (known && known !== tool)) {
        throw new TypeError(`skills: 'skills[${i}].tools[${j}]' reuses the tool name '${tool.name}'`);
      }
      toolNames.set(tool.name, tool);
    });
    byName.set(skill.name, skill);
  });
  const names = [...byName.keys()] as [string, ...string[]];

  const activateSkill = defineTool({
    name: ACTIVATE_SKILL_TOOL,
    description:
      'Activates a skill: its instructions and tools become available from your next step. Skills:\n' +
      list.map((s) => `- ${s.name}: ${s.description}`).join('\n'),
    parameters: z.object({ name: z.enum(names).describe('The name of the skill to activate') }),
    execute: ({ name }) => {
      if (!byName.has(name)) throw new ToolError(`Unknown skill '${name}'. Available skills: ${names.map((n) => `'${n}'`).join(', ')}.`);
      return activatedMessage(name);
    },
  });

  return {
    name: 'skills',
    tools: [activateSkill],
    beforeIteration: mapContext((ctx) => {
      const active = ctx.state(ActiveSkills);
      if (active.length === 0) return ctx;
      const parts = ctx.instructions ? [ctx.instructions] : [];
      const offered = new Set(ctx.tools.map((t) => t.name));
      const tools = [...ctx.tools];
      for (const name of active) {
        const skill = byName.get(name);
        if (!skill) continue;
        parts.push(skill.instructions);
        for (const tool of skill.tools ?? []) {
          if (!offered.has(tool.name)) {
            offered.add(tool.name);
            tools.push(tool);
          }
        }
      }
      return ctx.with({ instructions: parts.join('\n\n'), tools });
    }),
    // What the model reads when it activates a skill that is already active.
    afterFunction: mapContext((ctx) => {
      if (ctx.toolName !== ACTIVATE_SKILL_TOOL || ctx.blocked || ctx.isError) return ctx;
      const name = (ctx.args as { name?: unknown } | undefined)?.name;
      if (typeof name !== 'string' || !ctx.state(ActiveSkills).includes(name)) return ctx;
      return ctx.with({ result: alreadyActiveMessage(name) });
    }),
    // The activations of the iteration, in the model's order, into the run state.
    afterIteration: mapContext((ctx) => {
      let activated: string[] | undefined;
      for (const result of ctx.toolResults) {
        if (result.name !== ACTIVATE_SKILL_TOOL || result.isError) continue;
        const call = ctx.toolCalls.find((c) => c.callId === result.callId);
        const name = (call?.args as { name?: unknown } | undefined)?.name;
        if (typeof name !== 'string' || !byName.has(name) || result.result !== activatedMessage(name)) continue;
        const active = activated ?? ctx.state(ActiveSkills);
        if (active.includes(name)) continue;
        activated = [...active, name];
        ctx.emit({ type: 'skill-activated', skill: name });
      }
      return activated ? ctx.updateState(ActiveSkills, () => activated) : ctx;
    }),
  };
}

function activatedMessage(name: string): string {
  return `Skill '${name}' activated.`;
}

function alreadyActiveMessage(name: string): string {
  return `Skill '${name}' is already active.`;
}
