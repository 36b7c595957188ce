import { Observable, Subject, asyncScheduler, filter, lastValueFrom, map, toArray } from 'rxjs';
import { TestScheduler } from 'rxjs/testing';
import { z } from 'zod';
import {
  createAgent,
  createSession,
  defineTool,
  type AgentEvent,
  type AgentMiddleware,
  type AgentResponse,
  type FunctionContext,
  type Session,
  type Tool,
} from '../../src/index';
import { eventLabels, scriptedModel, type ScriptedTurn, eventsOfType } from '../../src/testing/index';
import { withoutToolInput } from '../support/withoutToolInput';
import { permissionDeniedMessage, permissions, type PermissionsOptions } from '../../operators/permissions';

type PermissionRequest = Extract<AgentEvent, { type: 'permission-request' }>;
type Answer = Omit<Extract<AgentResponse, { type: 'permission-response' }>, 'type' | 'requestId'>;

const collect = (events$: Observable<AgentEvent>) => lastValueFrom(events$.pipe(toArray()));
const ids = () => {
  let n = 0;
  return (prefix: string) => `${prefix}_${++n}`;
};

/** Tools that record their executions in `ran`. */
function toolkit() {
  const ran: string[] = [];
  const rm = defineTool({
    name: 'rm',
    description: 'Deletes a file',
    parameters: z.object({ path: z.string() }),
    needsApproval: true,
    execute: ({ path }) => (ran.push(`rm ${path}`), `deleted ${path}`),
  });
  const write = defineTool({
    name: 'write',
    description: 'Writes a file',
    parameters: z.object({ path: z.string() }),
    needsApproval: ({ path }) => path.startsWith('/etc/'),
    execute: ({ path }) => (ran.push(`write ${path}`), `wrote ${path}`),
  });
  const read = defineTool({
    name: 'read',
    description: 'Reads a file',
    parameters: z.object({ path: z.string() }),
    execute: ({ path }) => (ran.push(`read ${path}`), `read ${path}`),
  });
  return { ran, tools: [rm, write, read] as Tool[] };
}

const calls = (...list: Array<[string, string]>): ScriptedTurn => ({
  toolCalls: list.map(([name, path], i) => ({ name, args: { path }, callId: `c${i + 1}` })),
});

/** Runs one turn (`turn`, then 'done'), answering every permission request with `answer`. */
async function runWith(
  turn: ScriptedTurn,
  answer: (request: PermissionRequest, index: number) => Answer | undefined,
  options: { permissions?: PermissionsOptions; session?: Session; kit?: ReturnType<typeof toolkit> } = {},
) {
  const kit = options.kit ?? toolkit();
  const agent = createAgent({ model: scriptedModel([turn, 'done']), tools: kit.tools, middleware: [permissions(options.permissions)], idGenerator: ids() });
  const handle = agent.start('go', { runId: 'r', session: options.session });
  let index = 0;
  handle.events$.pipe(filter((e): e is PermissionRequest => e.type === 'permission-request')).subscribe((request) => {
    const response = answer(request, index++);
    if (response) handle.respond({ type: 'permission-response', requestId: request.requestId, ...response });
  });
  const events = await collect(handle.events$);
  return {
    events,
    ran: kit.ran,
    results: eventsOfType(events, 'tool-result').map((e) => [e.name, e.result, e.isError]),
    requests: eventsOfType(events, 'permission-request'),
  };
}

describe('permissions', () => {
  it('a refused call is a distinct outcome: its tool-result carries denied: true and the reason; an allowed one neither', async () => {
    const { events } = await runWith(
      calls(['rm', '/a'], ['rm', '/b'], ['read', '/c']),
      (_request, i) => (i === 0 ? { approved: false, reason: 'not today' } : { approved: true }),
      {
        permissions: { tools: { read: 'deny' } },
      },
    );
    const results = eventsOfType(events, 'tool-result');
    expect(results.map((e) => [e.callId, e.denied, e.reason])).toEqual([
      ['c1', true, 'not today'],
      ['c2', undefined, undefined],
      ['c3', true, 'denied by policy'],
    ]);
    expect(results[0].result).toBe("Permission denied for 'rm': not today");
    expect('denied' in results[1]).toBe(false);
  });

  it("by default lets a tool without needsApproval run without asking ('allow')", async () => {
    const { requests, ran, results } = await runWith(calls(['read', '/a']), () => ({ approved: false }));
    expect(requests).toEqual([]);
    expect(ran).toEqual(['read /a']);
    expect(results).toEqual([['read', 'read /a', false]]);
  });

  it('asks for a needsApproval tool with the exact request event; approved, the tool runs', async () => {
    const { requests, ran, results, events } = await runWith(calls(['rm', '/a']), () => ({ approved: true }));
    expect(requests).toEqual([
      { type: 'permission-request', runId: 'r', requestId: 'req_1', callId: 'c1', toolName: 'rm', args: { path: '/a' }, description: 'Deletes a file' },
    ]);
    expect(ran).toEqual(['rm /a']);
    expect(results).toEqual([['rm', 'deleted /a', false]]);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'done' });
  });

  it("denied: the function is blocked and the model reads `Permission denied for '<tool>': denied by user`", async () => {
    const { ran, results, events } = await runWith(calls(['rm', '/a']), () => ({ approved: false }));
    expect(ran).toEqual([]);
    expect(results).toEqual([['rm', "Permission denied for 'rm': denied by user", true]]);
    expect(events.at(-1)).toMatchObject({ reason: 'completed', text: 'done' });
  });

  it("denied with a reason: the model reads the person's reason", async () => {
    const { results } = await runWith(calls(['rm', '/a']), () => ({ approved: false, reason: 'not on Fridays' }));
    expect(results).toEqual([['rm', "Permission denied for 'rm': not on Fridays", true]]);
    expect(permissionDeniedMessage('rm', 'x')).toBe("Permission denied for 'rm': x");
  });

  it('reads answers by own properties: one that only inherits approved, remember and reason approves nothing and remembers nothing', async () => {
    const kit = toolkit();
    const session = createSession();
    const agent = createAgent({
      model: scriptedModel([calls(['rm', '/a'], ['rm', '/b']), 'done']),
      tools: kit.tools,
      middleware: [permissions()],
      idGenerator: ids(),
    });
    const handle = agent.start('go', { runId: 'r', session });
    const accepted: boolean[] = [];
    handle.events$.pipe(filter((e): e is PermissionRequest => e.type === 'permission-request')).subscribe((request) => {
      const inherited = Object.create({ approved: true, remember: 'always', reason: 'from the prototype' }) as Record<string, unknown>;
      Object.assign(inherited, { type: 'permission-response', requestId: request.requestId });
      accepted.push(handle.respond(inherited as unknown as AgentResponse));
    });
    const events = await collect(handle.events$);
    expect(accepted).toEqual([true, true]); // both questions were asked and answered: nothing remembered
    expect(kit.ran).toEqual([]);
    expect(eventsOfType(events, 'tool-result').map((e) => [e.result, e.isError])).toEqual([
      ["Permission denied for 'rm': denied by user", true],
      ["Permission denied for 'rm': denied by user", true],
    ]);
  });

  it('a polluted Object.prototype (approved: true) approves nothing', async () => {
    const kit = toolkit();
    const agent = createAgent({ model: scriptedModel([calls(['rm', '/a']), 'done']), tools: kit.tools, middleware: [permissions()], idGenerator: ids() });
    const handle = agent.start('go', { runId: 'r' });
    const proto = Object.prototype as Record<string, unknown>;
    const accepted: boolean[] = [];
    handle.events$.pipe(filter((e): e is PermissionRequest => e.type === 'permission-request')).subscribe((request) => {
      // Polluted only while the answer is read (zod itself trips over such a prototype).
      proto.approved = true;
      try {
        accepted.push(handle.respond({ type: 'permission-response', requestId: request.requestId } as AgentResponse));
      } finally {
        delete proto.approved;
      }
    });
    const events = await collect(handle.events$);
    expect(accepted).toEqual([true]);
    expect(kit.ran).toEqual([]);
    expect(eventsOfType(events, 'tool-result').map((e) => [e.result, e.isError])).toEqual([["Permission denied for 'rm': denied by user", true]]);
  });

  it('a needsApproval predicate decides per call, on the parsed arguments', async () => {
    const { requests, ran } = await runWith(calls(['write', '/tmp/x'], ['write', '/etc/passwd']), () => ({ approved: false }));
    expect(requests.map((r) => r.args)).toEqual([{ path: '/etc/passwd' }]);
    expect(ran).toEqual(['write /tmp/x']);
  });

  it('a needsApproval predicate that does not return false (an async one, from JavaScript) asks: a mistake fails closed', async () => {
    const ran: string[] = [];
    const drop = defineTool({
      name: 'drop',
      description: 'Drops a table',
      parameters: z.object({ path: z.string() }),
      needsApproval: (async () => false) as never, // its Promise is not `false`
      execute: ({ path }) => (ran.push(path), 'dropped'),
    });
    const { requests } = await runWith(calls(['drop', 'users']), () => ({ approved: false }), { kit: { ran, tools: [drop] as Tool[] } });
    expect(requests.map((r) => r.toolName)).toEqual(['drop']);
    expect(ran).toEqual([]);
  });

  it("policies: 'deny' blocks without asking (denied by policy), 'allow' overrides needsApproval, 'ask' asks for any tool", async () => {
    const { requests, ran, results } = await runWith(calls(['rm', '/a'], ['write', '/etc/x'], ['read', '/b']), () => ({ approved: true }), {
      permissions: { tools: { write: 'deny', rm: 'allow', read: 'ask' } },
    });
    expect(requests.map((r) => r.toolName)).toEqual(['read']);
    expect(ran).toEqual(['rm /a', 'read /b']);
    expect(results).toEqual([
      ['rm', 'deleted /a', false],
      ['write', "Permission denied for 'write': denied by policy", true],
      ['read', 'read /b', false],
    ]);
  });

  it('asks the questions of a parallel batch one after another in the model order; the rest of the batch still runs', async () => {
    const order: string[] = [];
    const kit = toolkit();
    const agent = createAgent({
      model: scriptedModel([calls(['rm', '/1'], ['read', '/2'], ['rm', '/3']), 'done']),
      tools: kit.tools,
      middleware: [permissions()],
      idGenerator: ids(),
    });
    const handle = agent.start('go', { runId: 'r' });
    const pending: PermissionRequest[] = [];
    handle.events$.subscribe((e) => {
      if (e.type === 'permission-request') {
        order.push(`asked ${e.callId}`);
        pending.push(e);
      }
    });
    // One question at a time: the second is only asked once the first is answered.
    expect(pending.map((r) => r.callId)).toEqual(['c1']);
    handle.respond({ type: 'permission-response', requestId: pending[0].requestId, approved: false });
    expect(pending.map((r) => r.callId)).toEqual(['c1', 'c3']);
    expect(kit.ran).toEqual([]); // nothing runs before every question of the batch is answered
    handle.respond({ type: 'permission-response', requestId: pending[1].requestId, approved: true });
    const events = await collect(handle.events$);
    expect(order).toEqual(['asked c1', 'asked c3']);
    expect(kit.ran).toEqual(['read /2', 'rm /3']);
    expect(eventsOfType(events, 'tool-result').map((e) => [e.callId, e.isError])).toEqual([
      ['c1', true],
      ['c2', false],
      ['c3', false],
    ]);
  });

  it("remember 'always' applies at once to the next call of the batch, and to later runs of the session", async () => {
    const session = createSession();
    const first = await runWith(calls(['rm', '/1'], ['rm', '/2']), () => ({ approved: true, remember: 'always' }), { session });
    expect(first.requests.map((r) => r.callId)).toEqual(['c1']);
    expect(first.ran).toEqual(['rm /1', 'rm /2']);
    const second = await runWith(calls(['rm', '/3']), () => ({ approved: false }), { session });
    expect(second.requests).toEqual([]);
    expect(second.ran).toEqual(['rm /3']);
    expect(session.snapshot().state['rx-agent.permissions.remembered']).toEqual({ version: 1, value: { rm: 'always' } });
  });

  it("remember 'never' denies later calls of that tool without asking: denied (remembered)", async () => {
    const session = createSession();
    const first = await runWith(calls(['rm', '/1'], ['rm', '/2'], ['read', '/r']), () => ({ approved: false, remember: 'never' }), { session });
    expect(first.requests.map((r) => r.callId)).toEqual(['c1']);
    expect(first.results).toEqual([
      ['rm', "Permission denied for 'rm': denied by user", true],
      ['rm', "Permission denied for 'rm': denied (remembered)", true],
      ['read', 'read /r', false],
    ]);
    const second = await runWith(calls(['rm', '/3']), () => ({ approved: true }), { session });
    expect(second.requests).toEqual([]);
    expect(second.results).toEqual([['rm', "Permission denied for 'rm': denied (remembered)", true]]);
  });

  it('a remembered choice overrides the policies too', async () => {
    const session = createSession();
    await runWith(calls(['read', '/1']), () => ({ approved: true, remember: 'always' }), { session, permissions: { tools: { read: 'ask' } } });
    const second = await runWith(calls(['read', '/2']), () => ({ approved: false }), { session, permissions: { tools: { read: 'deny' } } });
    expect(second.results).toEqual([['read', 'read /2', false]]);
  });

  it('without a session a remembered choice lives for the run only; concurrent runs on one instance do not share it', async () => {
    const middleware = permissions();
    const kit = toolkit();
    const agent = createAgent({
      model: scriptedModel([calls(['rm', '/1']), calls(['rm', '/2']), 'done'], { loop: true }),
      tools: kit.tools,
      middleware: [middleware],
    });
    const responses = new Subject<AgentResponse>();
    const asked: string[] = [];
    const start = (runId: string, remember?: 'always') => {
      const handle = agent.start('go', { runId, responses });
      handle.events$.subscribe((e) => {
        if (e.type === 'permission-request') {
          asked.push(`${runId}:${(e.args as { path: string }).path}`);
          handle.respond({ type: 'permission-response', requestId: e.requestId, approved: true, remember });
        }
      });
      return collect(handle.events$);
    };
    await Promise.all([start('a', 'always'), start('b')]);
    // a remembered after its first question; b (no remember) was asked for each call.
    expect(asked.filter((x) => x.startsWith('a:'))).toEqual(['a:/1']);
    expect(asked.filter((x) => x.startsWith('b:'))).toEqual(['b:/1', 'b:/2']);
    await start('c');
    expect(asked.filter((x) => x.startsWith('c:'))).toEqual(['c:/1', 'c:/2']);
  });

  it('does not ask for a call another middleware already blocked', async () => {
    const kit = toolkit();
    const blocker: AgentMiddleware = { name: 'blocker', beforeFunction: map((c) => c.block('blocked upstream')) };
    const agent = createAgent({ model: scriptedModel([calls(['rm', '/1']), 'done']), tools: kit.tools, middleware: [blocker, permissions()] });
    const events = await collect(agent.run('go'));
    expect(eventsOfType(events, 'permission-request')).toEqual([]);
    expect(eventsOfType(events, 'tool-result').map((e) => e.result)).toEqual(['blocked upstream']);
  });

  it.each([
    [{ tools: [] }, "'tools' must be an object"],
    [{ tools: { rm: 'maybe' } }, `'tools.rm' must be 'ask', 'allow' or 'deny', got "maybe"`],
    [{ timeout: -1 }, 'timeout must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got -1'],
    [{ timeout: Number.NaN }, 'timeout must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got NaN'],
    // 30 days: a timer that long would fire at once, denying every call as it is asked
    [{ timeout: 30 * 24 * 3600 * 1000 }, 'timeout must be a number of milliseconds > 0 and at most 2147483647 (Infinity: off), got 2592000000'],
    [{ scheduler: 5 }, 'scheduler must be an rxjs SchedulerLike, got 5'],
  ])('rejects bad options: %j', (options, message) => {
    expect(() => permissions({ timeout: Infinity })).not.toThrow(); // no limit
    expect(() => permissions(options as never)).toThrow(`permissions: ${message}`);
    expect(() => permissions(options as never)).toThrow(TypeError);
  });
});

describe('permissions in virtual time', () => {
  let testScheduler: TestScheduler;
  beforeEach(() => {
    testScheduler = new TestScheduler((actual, expected) => expect(actual).toEqual(expected));
  });
  const agentWith = (turn: ScriptedTurn, options?: PermissionsOptions) =>
    createAgent({
      model: scriptedModel([turn, 'done'], { scheduler: testScheduler }),
      tools: toolkit().tools,
      middleware: [permissions(options)],
      scheduler: testScheduler,
      idGenerator: ids(),
    });
  const start = { a: 'run-start', b: 'iteration-start', c: 'tool-call:rm', d: 'permission-request' };
  const rest = { e: 'tool-result:rm', f: 'iteration-end', g: 'iteration-start', h: 'text-delta:done', i: 'iteration-end', j: 'run-end:completed' };

  it('waits for the response (cold responses)', () => {
    testScheduler.run(({ cold, expectObservable }) => {
      const responses = cold<AgentResponse>('2s a', { a: { type: 'permission-response', requestId: 'req_1', approved: true } });
      const events$ = agentWith(calls(['rm', '/a'])).run('go', { runId: 'r', responses });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 1994ms (efghij|)', { ...start, ...rest });
    });
  });

  it('asks the questions of a batch one after another (hot responses)', () => {
    testScheduler.run(({ hot, expectObservable }) => {
      const responses = hot<AgentResponse>('1s a 1s b', {
        a: { type: 'permission-response', requestId: 'req_1', approved: true },
        b: { type: 'permission-response', requestId: 'req_2', approved: false },
      });
      const events$ = agentWith(calls(['rm', '/1'], ['rm', '/2'])).run('go', { runId: 'r', responses });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abccd) 993ms d 1s (eefghij|)', { ...start, ...rest });
    });
  });

  it('times out after 300000 ms by default: request-expired timeout, the model reads `timed out`, the run goes on', () => {
    testScheduler.run(({ expectObservable }) => {
      const events$ = agentWith(calls(['rm', '/a'])).run('go', { runId: 'r' });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 299994ms (xefghij|)', { ...start, ...rest, x: 'request-expired:timeout' });
      const again$ = agentWith(calls(['rm', '/a'])).run('go', { runId: 'r' });
      expectObservable(again$.pipe(filter((e) => e.type === 'tool-result' || e.type === 'request-expired'))).toBe('300000ms (xe|)', {
        x: { type: 'request-expired', runId: 'r', requestId: 'req_1', reason: 'timeout' },
        e: {
          type: 'tool-result',
          runId: 'r',
          iteration: 0,
          callId: 'c1',
          name: 'rm',
          result: "Permission denied for 'rm': timed out",
          isError: true,
          denied: true,
          reason: 'timed out',
        },
      });
    });
  });

  it('an answer 1 ms before the timeout is in time; a custom timeout', () => {
    testScheduler.run(({ cold, expectObservable }) => {
      const responses = cold<AgentResponse>('99ms a', { a: { type: 'permission-response', requestId: 'req_1', approved: true } });
      const events$ = agentWith(calls(['rm', '/a']), { timeout: 100 }).run('go', { runId: 'r', responses });
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 93ms (efghij|)', { ...start, ...rest });
    });
  });

  it('the `scheduler` option runs the timeout on another scheduler', () => {
    testScheduler.run(({ expectObservable }) => {
      const events$ = agentWith(calls(['rm', '/a']), { timeout: 10, scheduler: asyncScheduler }).run('go', { runId: 'r' });
      expectObservable(events$.pipe(filter((e) => e.type === 'permission-request' || e.type === 'request-expired'))).toBe('d 9ms (x|)', {
        d: expect.objectContaining({ type: 'permission-request', requestId: 'req_1' }),
        x: { type: 'request-expired', runId: 'r', requestId: 'req_1', reason: 'timeout' },
      });
    });
  });

  it('cancelled while waiting (handle.cancel()): request-expired cancelled, then run-end cancelled; the tool never runs', () => {
    testScheduler.run(({ expectObservable }) => {
      const handle = agentWith(calls(['rm', '/a'])).start('go', { runId: 'r' });
      testScheduler.schedule(() => handle.cancel(), 100);
      expectObservable(handle.events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 94ms (xy|)', {
        ...start,
        x: 'request-expired:cancelled',
        y: 'run-end:cancelled',
      });
    });
  });

  it('cancelled as the question is asked (abort on permission-request): the run ends, no timer is left', () => {
    const controller = new AbortController();
    const seen: string[] = [];
    agentWith(calls(['rm', '/a']))
      .run('go', { runId: 'r', signal: controller.signal })
      .pipe(withoutToolInput(), eventLabels())
      .subscribe((label) => {
        seen.push(label);
        if (label === 'permission-request') controller.abort();
      });
    expect(seen).toEqual([...Object.values(start), 'request-expired:cancelled', 'run-end:cancelled']);
    // The request's 300000 ms timeout was never scheduled (or was cancelled): nothing is left to run.
    expect(testScheduler.actions).toEqual([]);
  });

  it('cancelled while waiting (AbortSignal): request-expired cancelled, then run-end cancelled', () => {
    testScheduler.run(({ expectObservable }) => {
      const controller = new AbortController();
      const events$ = agentWith(calls(['rm', '/a'])).run('go', { runId: 'r', signal: controller.signal });
      testScheduler.schedule(() => controller.abort(), 100);
      expectObservable(events$.pipe(withoutToolInput(), eventLabels())).toBe('(abcd) 94ms (xy|)', {
        ...start,
        x: 'request-expired:cancelled',
        y: 'run-end:cancelled',
      });
    });
  });
});

describe('permissions: a needsApproval predicate that throws (or rejects) asks: a mistake fails closed', () => {
  /** `risky`, whose predicate throws, with `read` and `rm` of the toolkit. */
  function throwingKit(needsApproval: () => never) {
    const kit = toolkit();
    const risky = defineTool({
      name: 'risky',
      description: 'Its predicate throws',
      parameters: z.object({ path: z.string() }),
      needsApproval,
      execute: ({ path }) => (kit.ran.push(`risky ${path}`), 'ran'),
    });
    return { ran: kit.ran, tools: [risky as Tool, ...kit.tools] };
  }
  const boom = (): never => {
    throw new Error('predicate boom');
  };

  it("the throwing predicate's call asks; the rest of the batch proceeds; the run does not fail", async () => {
    const kit = throwingKit(boom);
    const { events, requests, ran, results } = await runWith(calls(['read', '/a'], ['risky', '/x'], ['rm', '/b']), (r) => ({ approved: r.toolName === 'rm' }), {
      kit,
    });
    expect(requests.map((r) => [r.toolName, r.callId, r.args])).toEqual([
      ['risky', 'c2', { path: '/x' }],
      ['rm', 'c3', { path: '/b' }],
    ]);
    expect(ran).toEqual(['read /a', 'rm /b']); // denied, `risky` did not run
    expect(results).toEqual([
      ['read', 'read /a', false],
      ['risky', "Permission denied for 'risky': denied by user", true],
      ['rm', 'deleted /b', false],
    ]);
    expect(events.some((e) => e.type === 'error')).toBe(false);
    expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
  });

  it("approved, the call runs: only a person's yes runs it", async () => {
    const kit = throwingKit(boom);
    const { requests, ran } = await runWith(calls(['risky', '/x']), () => ({ approved: true }), { kit });
    expect(requests.map((r) => r.toolName)).toEqual(['risky']);
    expect(ran).toEqual(['risky /x']);
  });

  it('an async predicate that rejects asks, and its rejection is not left unhandled', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const kit = throwingKit((() => Promise.reject(new Error('async boom'))) as never);
      const { events, requests, ran } = await runWith(calls(['risky', '/x'], ['read', '/a']), () => ({ approved: false }), { kit });
      await new Promise((resolve) => setTimeout(resolve, 10)); // past the unhandled-rejection check
      expect(requests.map((r) => r.toolName)).toEqual(['risky']);
      expect(ran).toEqual(['read /a']);
      expect(events.at(-1)).toMatchObject({ type: 'run-end', reason: 'completed' });
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('used as an operator over any source, the throw is a question, not an error notification', () => {
    const contexts = new Subject<FunctionContext>();
    const seen: string[] = [];
    permissions().beforeFunction!(contexts).subscribe({ next: () => seen.push('next'), error: (e: Error) => seen.push(`error: ${e.message}`) });
    const asked: unknown[] = [];
    const ctx = {
      blocked: undefined,
      toolName: 'risky',
      callId: 'c1',
      tool: { description: 'Its predicate throws', needsApproval: boom },
      args: { path: '/x' },
      state: () => ({}),
      request: (event: unknown) => (asked.push(event), new Observable<never>()),
    } as unknown as FunctionContext;
    expect(() => contexts.next(ctx)).not.toThrow();
    expect(asked).toEqual([{ type: 'permission-request', callId: 'c1', toolName: 'risky', args: { path: '/x' }, description: 'Its predicate throws' }]);
    expect(seen).toEqual([]);
  });
});
