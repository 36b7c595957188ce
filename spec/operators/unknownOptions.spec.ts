import { Observable } from 'rxjs';
import { z } from 'zod';
import { defineTool, type AgentMiddleware, type ModelClient } from '../../src/index';
import * as operators from '../../operators/index';

const model: ModelClient = () => new Observable();
const skill = {
  name: 'trading',
  description: 'Trades',
  instructions: 'Confirm first.',
  tools: [defineTool({ name: 'buy', description: 'Buys', parameters: z.object({}), execute: () => 'ok' })],
};

/**
 * Every operator: options it accepts, a misspelt option, and the option names it knows (in its
 * message's order). `modelFallback` takes no options, only clients: see below.
 */
const table: Array<[name: string, make: (options: object) => AgentMiddleware, valid: object, typo: string, known: string]> = [
  ['circuitBreaker', operators.circuitBreaker, {}, 'maxConsecutiveCall', 'maxConsecutiveCalls, message'],
  ['errorTracking', operators.errorTracking, {}, 'maxConsecutiveError', 'maxConsecutiveErrors, isError, message'],
  ['continuationPermission', operators.continuationPermission, {}, 'extensionAmmount', 'maxIterations, extensionAmount, timeout, scheduler'],
  ['permissions', operators.permissions, {}, 'timeOut', 'tools, timeout, scheduler'],
  ['iterationGuidance', operators.iterationGuidance, {}, 'warnWithIn', 'maxIterations, firstIteration, afterTools, warning, warnWithin'],
  ['iterationLogging', operators.iterationLogging, {}, 'logLevel', 'logger, level, scheduler'],
  ['responseCache', operators.responseCache, {}, 'ttlMs', 'store, ttl, key, scheduler'],
  ['skills', operators.skills as never, { skills: [skill] }, 'skill', 'skills'],
  ['costBudget', operators.costBudget as never, { maxCost: 1, pricing: { inputPerToken: 0, outputPerToken: 0 } }, 'budget', 'maxCost, pricing'],
  ['lifecycleEvents', operators.lifecycleEvents, {}, 'schedular', 'scheduler'],
  ['modelRetry', operators.modelRetry, {}, 'maxRetry', 'maxRetries, initialDelayMs, backoffFactor, maxDelayMs, jitter, random, retryOn, onFailure, scheduler'],
  ['toolRetry', operators.toolRetry, {}, 'retries', 'maxRetries, initialDelayMs, backoffFactor, maxDelayMs, jitter, random, retryOn, tools, scheduler'],
  ['modelTimeout', operators.modelTimeout, {}, 'firstTokenTimeout', 'firstTokenMs, idleMs, totalMs, idleCheck, scheduler'],
  ['toolTimeout', operators.toolTimeout, {}, 'timeoutMs', 'ms, tools, scheduler'],
  ['modelCallLimit', operators.modelCallLimit, { runLimit: 5 }, 'threadlimit', 'threadLimit, runLimit, exitBehavior'],
  ['toolCallLimit', operators.toolCallLimit, { runLimit: 5 }, 'tool', 'toolName, threadLimit, runLimit, exitBehavior'],
  ['piiRedaction', operators.piiRedaction, {}, 'applyToOutputs', 'rules, custom, applyToInput, applyToOutput, applyToToolResults'],
  ['contextEditing', operators.contextEditing, {}, 'keepToolResults', 'trigger, keep, clearAtLeast, excludeTools, clearToolInputs, placeholder, tokenCounter'],
  [
    'summarization',
    operators.summarization as never,
    { model, trigger: { tokens: 100 } },
    'summaryPromt',
    'model, trigger, keep, summaryPrompt, summaryPrefix',
  ],
  ['toolSelector', operators.toolSelector as never, { model }, 'maxTool', 'model, maxTools, alwaysInclude, minToolsToTrigger'],
  ['todoList', operators.todoList, {}, 'description', 'systemPrompt, toolDescription'],
];

describe('every operator refuses an unknown (misspelt) option', () => {
  it('the table holds every operator but modelFallback (21 + 1 = the 22 built-ins)', () => {
    expect(table.map(([name]) => name).length).toBe(21);
    for (const [name, make] of table) expect(operators[name as keyof typeof operators]).toBe(make);
  });

  it.each(table)('%s: a TypeError naming the misspelt option and listing the known ones', (name, make, valid, typo, known) => {
    expect(() => make(valid)).not.toThrow();
    expect(() => make({ ...valid, [typo]: 3 })).toThrow(new TypeError(`${name}: unknown option(s) '${typo}' (known: ${known})`));
    // Several at once are all named.
    expect(() => make({ ...valid, [typo]: 3, other: true })).toThrow(`${name}: unknown option(s) '${typo}', 'other' (known: `);
  });

  it.each(table)('%s: every known option is still accepted', (name, make, valid, typo, known) => {
    for (const option of known.split(', ')) {
      if (option in valid) continue;
      expect(() => make({ ...valid, [option]: undefined })).not.toThrow();
    }
  });

  it('modelFallback takes no options: an object among its clients is refused, naming its keys', () => {
    const backup: ModelClient = () => new Observable();
    expect(() => operators.modelFallback(backup, { maxRetry: 1 } as never)).toThrow(
      new TypeError("modelFallback: clients[1] must be a ModelClient (a function), got an object with 'maxRetry' (modelFallback takes no options)"),
    );
    expect(() => operators.modelFallback(backup)).not.toThrow();
  });
});
