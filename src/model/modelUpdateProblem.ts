const FINISH_REASONS = new Set(['stop', 'tool-calls', 'length', 'content-filter']);

/**
 * What is wrong with `update` as a model update, or undefined when it is one. The run reads every
 * update of the model's stream (after the `wrapModel` wrappers) through this, but for the text of
 * a `text-delta`, which its per-delta path checks itself.
 *
 * @example
 * modelUpdateProblem({ type: 'usage', inputTokens: 12.5, outputTokens: 3 }); // 'inputTokens must be a non-negative integer'
 */
export function modelUpdateProblem(update: unknown): string | undefined {
  if (typeof update !== 'object' || update === null) return 'not an object';
  const u = update as Record<string, unknown>;
  switch (u.type) {
    case 'text-delta':
    case 'reasoning-delta':
      return typeof u.text === 'string' ? undefined : 'text must be a string';
    case 'tool-call-delta': {
      const index = u.index;
      if (typeof index !== 'number' || !Number.isInteger(index) || index < 0) return 'index must be a non-negative integer';
      if (typeof u.argsDelta !== 'string') return 'argsDelta must be a string';
      const callId = u.callId;
      if (callId !== undefined && typeof callId !== 'string') return 'callId must be a string';
      const name = u.name;
      return name === undefined || typeof name === 'string' ? undefined : 'name must be a string';
    }
    case 'usage':
      // As `reportUsage` requires: the run adds the two kinds of usage up.
      if (!isCount(u.inputTokens)) return 'inputTokens must be a non-negative integer';
      return isCount(u.outputTokens) ? undefined : 'outputTokens must be a non-negative integer';
    case 'finish': {
      const reason = u.reason;
      if (typeof reason !== 'string' || !FINISH_REASONS.has(reason)) return `reason must be one of ${[...FINISH_REASONS].join(', ')}`;
      const model = u.model;
      return model === undefined || typeof model === 'string' ? undefined : 'model must be a string';
    }
    default:
      return 'type must be text-delta, reasoning-delta, tool-call-delta, usage or finish';
  }
}

function isCount(value: unknown): boolean {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}
