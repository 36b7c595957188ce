import { map, switchMap, tap, timer } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import { createAgent, defineState, defineTool, memoryStore, type AgentEvent, type AgentMiddleware, type Message, type ModelRequest } from '../../src/index';
import { readResumePoint } from '../../src/journal/resumePoint';
import { scriptedModel, type ScriptedTurn } from '../../src/testing/index';
import { Rng, fuzzSeeds } from '../support/random';
import { runProcesses, type RunProcess } from '../support/processes';

/*
 * Seeded random durable runs in virtual time: a run whose process stops at random moments (an
 * unsubscribe, as a process that dies leaves it) and is resumed each time by a fresh agent on the
 * same store, until it completes. Checked: it completes exactly once; its session's history pairs
 * every call with a result; a non-idempotent call runs at most once and, if caught mid-flight,
 * reads the interrupted result; the middleware state (both scopes) is the one a run that never
 * stopped would have: each call passed beforeFunction and afterFunction once; the journal is
 * gap-free and replays the completed run.
 *
 * Replay a failing case with `FUZZ_SEED=<seed> npx jest spec/agent/durableInvariants.spec.ts`.
 */

const INTERRUPTED = (name: string) => `Tool '${name}' was interrupted; its outcome is unknown.`;
const seeds = fuzzSeeds(40);

const Results = defineState({ key: 'fuzz.results', schema: z.array(z.string()), initial: () => [], scope: 'run', version: 1 });
const Hooked = defineState({
  key: 'fuzz.hooked',
  schema: z.object({ before: z.number(), after: z.number() }),
  initial: () => ({ before: 0, after: 0 }),
  scope: 'session',
  version: 1,
});

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
    const turnResults: string[][] = [];
    const tracker: AgentMiddleware = {
      name: 'tracker',
      beforeFunction: map((ctx) => ctx.updateState(Hooked, (h) => ({ ...h, before: h.before + 1 }))),
      afterFunction: map((ctx) => ctx.updateState(Results, (r) => [...r, ctx.callId]).updateState(Hooked, (h) => ({ ...h, after: h.after + 1 }))),
      afterMessageTurn: tap((ctx) => turnResults.push(ctx.state(Results))),
    };
    const agent = () => createAgent({ model: scriptedModel([turn], { scheduler, loop: true }), tools, middleware: [tracker], store, scheduler });
    // Each process runs (the first) or resumes the run, until it stops at its time; the next starts 1 ms later.
    const plan: RunProcess[] = [];
    for (let process = 0, at = 0; process <= c.stops.length; process++) {
      const stop = c.stops[process];
      plan.push({
        start: () => (process === 0 ? agent().run('go', { runId: 'r', sessionId: 's' }) : agent().resume('r')),
        at,
        stopAt: stop === undefined ? undefined : at + stop,
      });
      if (stop !== undefined) at += stop + 1;
    }
    let processes: AgentEvent[][] = [];
    scheduler.run(() => {
      processes = runProcesses(scheduler, plan);
    });
    const ends = processes.flatMap((events, process) =>
      events.filter((e) => e.type === 'run-end').map((e) => ({ process, reason: (e as { reason: string }).reason })),
    );

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

    // Every call passed each hook once, whichever process ran it (the run's state at its end, the session's).
    expect(turnResults).toHaveLength(1);
    expect([...turnResults[0]].sort()).toEqual(calls.map((k) => k.callId).sort());
    expect(store.load('s')?.state['fuzz.hooked']).toEqual({ version: 1, value: { before: calls.length, after: calls.length } });

    // The journal is gap-free and holds one end.
    const entries = store.read('r') ?? [];
    const point = readResumePoint('r', entries);
    expect(point.ended).toBe('completed');
    expect(entries.filter((e) => e.record.kind === 'end')).toHaveLength(1);
  });
});
