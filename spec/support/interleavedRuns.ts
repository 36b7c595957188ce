import type { SchedulerLike } from 'rxjs';
import type { ModelRequest } from '../../src/index';
import { scriptedModel, type ScriptedModel } from '../../src/testing/index';

/**
 * A model for two runs of one agent, told apart by their input ('A' or 'B'): each turn asks for
 * `call`, A's every 6 ms (3 updates × 2 ms), B's every 9 ms; B answers `B done` once it has read
 * two tool results. Used to check that per-run counts of a middleware do not bleed between runs.
 */
export function interleavedRunsModel(scheduler: SchedulerLike, call: { name: string; args: Record<string, unknown> }): ScriptedModel {
  const userText = (r: ModelRequest) => (r.messages[0].content[0] as { text: string }).text;
  const toolMessages = (r: ModelRequest) => r.messages.filter((m) => m.role === 'tool').length;
  return scriptedModel(
    [(r) => (userText(r) === 'B' && toolMessages(r) >= 2 ? { text: 'B done', delay: 3 } : { toolCalls: [call], delay: userText(r) === 'A' ? 2 : 3 })],
    { scheduler, loop: true },
  );
}
