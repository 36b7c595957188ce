import { switchMap, timer } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineTool, memoryStore, type AgentEvent, type Message, type ModelRequest } from '../../src/index';
import { readResumePoint } from '../../src/journal/resumePoint';
import { scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { Rng, fuzzSeeds } from '../support/random';

/*
 * Seeded random durable runs in virtual time: a run whose process stops at random moments (an
 * unsubscribe, as a process that dies leaves it) and is resumed each time by a fresh agent on the
 * same store, until it completes. Checked: it completes exactly once; its session's history pairs
 * every call with a result; a non-idempotent call runs at most once and, if caught mid-flight,
 * reads the interrupted result; the journal is gap-free and replays the completed run.
 *
 * Replay a failing case with `FUZZ_SEED=<seed> npx jest spec/agent/durableInvariants.spec.ts`.
 */

const INTERRUPTED = (name: string) => `Tool '${name}' was interrupted; its outcome is unknown.`;
const seeds = fuzzSeeds(40);

interface Case {
  /** Per iteration: the calls (tool index, its delay), or none for the final answer. */
  readonly iterations: ReadonlyArray<ReadonlyArray<{ tool: 0 | 1; ms: number }>>;
  readonly modelMs: number;
  /** When each process stops, in ms after it started. */
  readonly stops: readonly number[];
}

function drawCase(rng: Rng): Case {
  const n = rng.int(1, 3);
  const iterations = Array.from({ length: n }, () => Array.from({ length: rng.int(1, 2) }, () => ({ tool: rng.int(0, 1) as 0 | 1, ms: rng.int(0, 30) })));
  return { iterations: [...iterations, []], modelMs: rng.int(0, 10), stops: Array.from({ length: rng.int(0, 4) }, () => rng.int(0, 80)) };
}

describe.each(seeds.seedsFrom(7000))('a durable run stopped and resumed at random (seed %i)', (seed) => {
  it('completes exactly once, with a valid history and no non-idempotent call run twice', () => {
    const c = drawCase(new Rng(seed));
    const scheduler = new TestScheduler((a, b) => expect(a).toEqual(b));
    const store = memoryStore({ scheduler, retainMs: 1e9 });
    const executions = new Map<string, number>();
    const finished = new Map<string, number>();
    const tools = [0, 1].map((i) =>
      defineTool({
        name: `t${i}`,
        description: `tool ${i}`,
        parameters: z.object({ ms: z.number() }),
        idempotent: i === 0,
        execute: ({ ms }, ctx) => {
          executions.set(ctx.callId, (executions.get(ctx.callId) ?? 0) + 1);
          return timer(ms, scheduler).pipe(
            switchMap(() => {
              finished.set(ctx.callId, (finished.get(ctx.callId) ?? 0) + 1);
              return [`done ${ctx.callId}`];
            }),
          );
        },
      }),
    );
    // The model answers by the turn's iteration (its assistant messages so far), whichever agent asks.
    const turn = (request: ModelRequest): ScriptedTurn => {
      const iteration = request.messages.filter((m) => m.role === 'assistant').length;
      const calls = c.iterations[iteration] ?? [];
      if (calls.length === 0) return { text: 'finished', delay: c.modelMs };
      return { toolCalls: calls.map((call, k) => ({ name: `t${call.tool}`, args: { ms: call.ms }, callId: `i${iteration}c${k}` })), delay: c.modelMs };
    };
    const agent = () => createAgent({ model: scriptedModel([turn], { scheduler, loop: true }), tools, store, scheduler });
    const ends: Array<{ process: number; reason: string }> = [];
    const record = (process: number) => (e: AgentEvent) => {
      if (e.type === 'run-end') ends.push({ process, reason: e.reason });
    };

    scheduler.run(() => {
      const runProcess = (process: number) => {
        const events$ = process === 0 ? agent().run('go', { runId: 'r', sessionId: 's' }) : agent().resume('r');
        const subscription = events$.subscribe(record(process));
        const stop = c.stops[process];
        if (stop !== undefined) {
          scheduler.schedule(() => {
            subscription.unsubscribe();
            scheduler.schedule(() => runProcess(process + 1), 1);
          }, stop);
        }
      };
      runProcess(0);
    });

    // Exactly one process completed the run; the others were stopped, or found it finished.
    const completed = ends.filter((e) => e.reason === 'completed');
    expect(completed).toHaveLength(1);
    for (const end of ends) if (end.reason !== 'completed') expect(end.reason).toBe('error'); // RunFinishedError after the end

    const history: readonly Message[] = store.load('s')?.messages ?? [];
    const calls = history.flatMap((m) => m.content.filter((p) => p.type === 'tool-call')) as Array<{ callId: string; name: string }>;
    const results = history.flatMap((m) => m.content.filter((p) => p.type === 'tool-result')) as Array<{ callId: string; result: unknown }>;
    expect(results.map((r) => r.callId)).toEqual(calls.map((k) => k.callId));
    expect(history.at(-1)).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: 'finished' }] });
    expect(history.filter((m) => m.role === 'user')).toHaveLength(1);

    for (const call of calls) {
      const ran = executions.get(call.callId) ?? 0;
      const result = results.find((r) => r.callId === call.callId)?.result;
      if (call.name === 't1') {
        expect(ran).toBeLessThanOrEqual(1);
        // Caught mid-flight (started, not finished) reads the interrupted text; otherwise its result.
        expect(result).toBe((finished.get(call.callId) ?? 0) === 0 ? INTERRUPTED('t1') : `done ${call.callId}`);
      } else {
        expect(result).toBe(`done ${call.callId}`);
      }
    }

    // The journal is gap-free and holds one end.
    const entries = store.read('r') ?? [];
    const point = readResumePoint('r', entries);
    expect(point.ended).toBe('completed');
    expect(entries.filter((e) => e.record.kind === 'end')).toHaveLength(1);
  });
});
