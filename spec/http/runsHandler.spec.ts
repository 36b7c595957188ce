import { Subject, VirtualTimeScheduler, asyncScheduler, filter, firstValueFrom, lastValueFrom, take, type Subscription } from 'rxjs';
import { createAgent, memoryStore, type Agent, type AgentEvent, type AgentResponse, type AgentStore, type JournalRecord } from '../../src/index';
import { runsHandler } from '../../src/http/runsHandler';
import { scriptedModel } from '../../src/testing/index';
import { bookingAgent, label, readFrames, serveRuns, type Frame } from '../support/runsServer';

const json = (body: unknown, headers: Record<string, string> = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

const events = (frames: Frame[]) => frames.map((frame) => frame.data);

const bookingLabels = (answer: string) => [
  'run-start',
  'iteration-start',
  'text:Booking ',
  'text:now.',
  'tool-input-start',
  'tool-input-delta',
  'tool-input-delta',
  'tool-call:book_table',
  'permission-request',
  'tool-result:book_table',
  'iteration-end',
  'iteration-start',
  'text:The ',
  'text:answer: ',
  `text:${answer}`,
  'iteration-end',
  'run-end:completed',
];

describe('runsHandler over node:http (toNodeHandler), with fetch', () => {
  const servers: Array<{ close(): Promise<void> }> = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
  });

  async function serve(handler: (request: Request) => Promise<Response>): Promise<string> {
    const server = await serveRuns(handler);
    servers.push(server);
    return server.url;
  }

  async function start(url: string, input: string): Promise<string> {
    const res = await fetch(`${url}/runs`, json({ input }));
    expect(res.status).toBe(201);
    const { runId } = (await res.json()) as { runId: string };
    expect(res.headers.get('location')).toBe(`/runs/${runId}/events`);
    return runId;
  }

  /** Reads the run's stream until its permission request; returns the frames and the request. */
  async function untilRequest(url: string, runId: string) {
    const abort = new AbortController();
    const res = await fetch(`${url}/runs/${runId}/events`, { signal: abort.signal });
    const read = await readFrames(res, (frame) => frame.data.type === 'permission-request', abort);
    const request = read.at(-1)!.data as Extract<AgentEvent, { type: 'permission-request' }>;
    return { read, request };
  }

  it('starts a run (201 with its id) and streams its events, each frame with id: <seq>, 1, 2, 3…', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore())));
    const runId = await start(url, 'hello');
    const res = await fetch(`${url}/runs/${runId}/events`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const frames = await readFrames(res);
    expect(events(frames).map(label)).toEqual([
      'run-start',
      'iteration-start',
      'text:You ',
      'text:said: ',
      'text:hello',
      'text:.',
      'iteration-end',
      'run-end:completed',
    ]);
    expect(frames.map((frame) => frame.id)).toEqual(frames.map((_, i) => String(i + 1)));
    expect(frames.every((frame) => frame.data.seq === Number(frame.id) && frame.event === frame.data.type && frame.data.runId === runId)).toBe(true);
  });

  it('answers POST /runs with the stream itself when asked for text/event-stream (the id in x-run-id)', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore())));
    const res = await fetch(`${url}/runs`, json({ input: 'hi' }, { accept: 'text/event-stream' }));
    expect(res.status).toBe(200);
    const runId = res.headers.get('x-run-id')!;
    const frames = await readFrames(res);
    expect(events(frames).map(label).at(-1)).toBe('run-end:completed');
    expect(events(frames).every((event) => event.runId === runId)).toBe(true);
  });

  it('a client that reconnects mid-run with Last-Event-ID (or ?after=) gets exactly the rest; its disconnect did not cancel the run', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const url = await serve(runsHandler(bookingAgent(store, { delayMs: 30 })));
    const runId = await start(url, 'hello there');
    const abort = new AbortController();
    const first = await readFrames(await fetch(`${url}/runs/${runId}/events`, { signal: abort.signal }), (frame) => frame.data.type === 'text-delta', abort);
    const last = first.at(-1)!.id!;
    const rest = await readFrames(await fetch(`${url}/runs/${runId}/events`, { headers: { 'last-event-id': last } }));
    expect(rest[0].data.seq).toBe(Number(last) + 1);
    const whole = [...events(first), ...events(rest)];
    expect(whole.map((event) => event.seq)).toEqual(whole.map((_, i) => i + 1));
    expect(whole.map(label)).toEqual([
      'run-start',
      'iteration-start',
      'text:You ',
      'text:said: ',
      'text:hello there',
      'text:.',
      'iteration-end',
      'run-end:completed',
    ]);
    // The journal (read after the end, as a later reconnect would) holds the same events.
    const replay = await readFrames(await fetch(`${url}/runs/${runId}/events?after=0`));
    expect(events(replay)).toEqual(whole);
    const tail = await readFrames(await fetch(`${url}/runs/${runId}/events?after=5`));
    expect(events(tail)).toEqual(whole.slice(5));
    // A client that has it all: nothing more to send.
    const done = await fetch(`${url}/runs/${runId}/events`, { headers: { 'last-event-id': String(whole.length) } });
    expect(done.status).toBe(204);
  });

  it('an approval: the stream shows the request, POST /runs/:id/responses answers it, the stream goes on to the end', async () => {
    const booked: string[] = [];
    const url = await serve(runsHandler(bookingAgent(memoryStore(), { booked })));
    const runId = await start(url, 'book a table');
    const res = await fetch(`${url}/runs/${runId}/events`);
    const reading = readFrames(res);
    const { request } = await untilRequest(url, runId);
    expect(request.toolName).toBe('book_table');
    const answer = { type: 'permission-response', requestId: request.requestId, approved: true };
    const accepted = await fetch(`${url}/runs/${runId}/responses`, json(answer));
    expect([accepted.status, await accepted.json()]).toEqual([200, { accepted: true }]);
    expect(events(await reading).map(label)).toEqual(bookingLabels('Booked for 2.'));
    expect(booked).toEqual(['table for 2']);
    const again = await fetch(`${url}/runs/${runId}/responses`, json(answer));
    expect(again.status).toBe(404); // memoryStore drops a finished run's journal (no retainMs)
  });

  it('an answer to a run whose process died while it waited resumes the run here', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const booked: string[] = [];
    // The process that ran it: it stops (as if killed) while the run waits for the approval.
    const elsewhere = bookingAgent(store, { booked });
    let running: Subscription | undefined;
    const request = await new Promise<Extract<AgentEvent, { type: 'permission-request' }>>((resolve) => {
      running = elsewhere.run('book a table', { runId: 'orphan' }).subscribe((event) => event.type === 'permission-request' && resolve(event));
    });
    running?.unsubscribe();
    expect(await elsewhere.runs.get('orphan')).toMatchObject({ status: 'interrupted' });

    const url = await serve(runsHandler(bookingAgent(store, { booked })));
    const answer = { type: 'permission-response', requestId: request.requestId, approved: true };
    const accepted = await fetch(`${url}/runs/orphan/responses`, json(answer));
    expect([accepted.status, await accepted.json()]).toEqual([200, { accepted: true }]);
    const rest = events(await readFrames(await fetch(`${url}/runs/orphan/events`, { headers: { 'last-event-id': String(request.seq) } })));
    expect(rest.map(label).at(-1)).toBe('run-end:completed');
    expect(booked).toEqual(['table for 2']);
  });

  describe('a run whose process was killed while it waited (its lease left to expire)', () => {
    /** The run `killed`, waiting for its approval in a process that dies without letting its lease go. */
    async function killedWhileWaiting(store: AgentStore, booked: string[], leaseMs = 300) {
      const dying: AgentStore = Object.assign(Object.create(store) as AgentStore, { releaseLease: async () => undefined });
      const elsewhere = bookingAgent(dying, { booked, leaseMs });
      let running: Subscription | undefined;
      const request = await new Promise<Extract<AgentEvent, { type: 'permission-request' }>>((resolve) => {
        running = elsewhere.run('book a table', { runId: 'killed' }).subscribe((event) => event.type === 'permission-request' && resolve(event));
      });
      await firstValueFrom(elsewhere.events('killed').pipe(filter((event) => event.seq === request.seq))); // the request is journaled
      running?.unsubscribe();
      expect(await elsewhere.runs.get('killed')).toMatchObject({ status: 'running' }); // its lease says so, until it expires
      return request;
    }

    it('an answer is taken, and the run resumed here once the lease has expired', async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const booked: string[] = [];
      const request = await killedWhileWaiting(store, booked);
      const url = await serve(runsHandler(bookingAgent(store, { booked })));
      const answer = { type: 'permission-response', requestId: request.requestId, approved: true };
      const accepted = await fetch(`${url}/runs/killed/responses`, json(answer));
      expect([accepted.status, await accepted.json()]).toEqual([200, { accepted: true }]);
      const rest = events(await readFrames(await fetch(`${url}/runs/killed/events`, { headers: { 'last-event-id': String(request.seq) } })));
      expect(rest.map(label).at(-1)).toBe('run-end:completed');
      expect(booked).toEqual(['table for 2']);
    });

    it("a handler whose clock runs ahead of the store's looks again until the lease has expired by the store's", async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const booked: string[] = [];
      const request = await killedWhileWaiting(store, booked, 1_000);
      // 500 ms ahead: the first look, at the 1 s lease's expiry by this clock, finds it held still.
      const ahead = Object.assign(Object.create(asyncScheduler) as typeof asyncScheduler, { now: () => Date.now() + 500 });
      const url = await serve(runsHandler(bookingAgent(store, { booked }), { scheduler: ahead }));
      const answer = { type: 'permission-response', requestId: request.requestId, approved: true };
      expect((await fetch(`${url}/runs/killed/responses`, json(answer))).status).toBe(200);
      const rest = events(await readFrames(await fetch(`${url}/runs/killed/events`, { headers: { 'last-event-id': String(request.seq) } })));
      expect(rest.map(label).at(-1)).toBe('run-end:completed');
      expect(booked).toEqual(['table for 2']);
    });

    it('a cancel is taken, and the run ended here once the lease has expired', async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const booked: string[] = [];
      const request = await killedWhileWaiting(store, booked);
      const url = await serve(runsHandler(bookingAgent(store, { booked })));
      const cancelled = await fetch(`${url}/runs/killed/cancel`, { method: 'POST' });
      expect([cancelled.status, await cancelled.json()]).toEqual([200, { cancelled: true }]);
      const rest = events(await readFrames(await fetch(`${url}/runs/killed/events`, { headers: { 'last-event-id': String(request.seq) } })));
      expect(rest.at(-1)).toMatchObject({ type: 'run-end', reason: 'cancelled' });
      expect(booked).toEqual([]);
    });
  });

  it('an answer taken here while another process lets go of a run it just suspended resumes the run here', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const booked: string[] = [];
    // The other process: its run suspends on the approval, and lets its lease go 150 ms later (a
    // remote store's round trip, stretched).
    const slowRelease: AgentStore = Object.assign(Object.create(store) as AgentStore, {
      releaseLease: (runId: string, owner: string) => new Promise<void>((resolve) => setTimeout(() => resolve(store.releaseLease(runId, owner)), 150)),
    });
    const elsewhere = bookingAgent(slowRelease, { onRequest: 'suspend', booked });
    const ending = lastValueFrom(elsewhere.run('book a table', { runId: 'handed' }).pipe(filter((e) => e.type === 'run-end')));
    // What this process sees once the suspension is journaled: the request, the lease still held.
    let info = await elsewhere.runs.get('handed');
    while (!info?.pendingRequests?.length) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      info = await elsewhere.runs.get('handed');
    }
    expect(info).toMatchObject({ status: 'running' });
    const { requestId } = info.pendingRequests[0];

    const url = await serve(runsHandler(bookingAgent(store, { booked })));
    const accepted = await fetch(`${url}/runs/handed/responses`, json({ type: 'permission-response', requestId, approved: true }));
    expect([accepted.status, await accepted.json()]).toEqual([200, { accepted: true }]);
    const end = await ending;
    expect(end).toMatchObject({ reason: 'suspended' });
    const rest = events(await readFrames(await fetch(`${url}/runs/handed/events`, { headers: { 'last-event-id': String(end.seq) } })));
    expect(rest.map(label).at(-1)).toBe('run-end:completed');
    expect(booked).toEqual(['table for 2']);
  });

  it('a second answer to the same request is a 409 that says why', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore(), { delayMs: 50 })));
    const runId = await start(url, 'book a table');
    const { request } = await untilRequest(url, runId);
    const answer = { type: 'permission-response', requestId: request.requestId, approved: false };
    expect((await fetch(`${url}/runs/${runId}/responses`, json(answer))).status).toBe(200);
    const again = await fetch(`${url}/runs/${runId}/responses`, json(answer));
    expect(again.status).toBe(409);
    expect(await again.json()).toEqual({ accepted: false, error: expect.stringContaining(`does not wait for request '${request.requestId}'`) });
    await fetch(`${url}/runs/${runId}/cancel`, { method: 'POST' });
  });

  it('GET /runs/:id tells the run: running with the request it waits for, without its lease', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore())));
    const runId = await start(url, 'book a table');
    const { request } = await untilRequest(url, runId);
    const res = await fetch(`${url}/runs/${encodeURIComponent(runId)}`);
    expect([res.status, res.headers.get('content-type')]).toEqual([200, 'application/json']);
    expect(await res.json()).toEqual({
      runId,
      status: 'running',
      seq: request.seq,
      pendingRequests: [{ requestId: request.requestId, type: 'permission-request', deadline: expect.any(Number) }],
    });
  });

  it('POST /runs/:id/cancel cancels a run waiting for a person: the stream ends with run-end cancelled; a second cancel is a 409', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const url = await serve(runsHandler(bookingAgent(store)));
    const runId = await start(url, 'book a table');
    const reading = readFrames(await fetch(`${url}/runs/${runId}/events`));
    await untilRequest(url, runId);
    const cancelled = await fetch(`${url}/runs/${runId}/cancel`, { method: 'POST' });
    expect([cancelled.status, await cancelled.json()]).toEqual([200, { cancelled: true }]);
    expect(
      events(await reading)
        .map(label)
        .slice(-3),
    ).toEqual(['permission-request', 'request-expired', 'run-end:cancelled']);
    const again = await fetch(`${url}/runs/${runId}/cancel`, { method: 'POST' });
    expect([again.status, await again.json()]).toEqual([409, { cancelled: false, error: `Run '${runId}' has ended already` }]);
  });

  it('keeps a stream that waits for a person alive with `: ping` comments (heartbeatMs)', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore()), { heartbeatMs: 20 }));
    const runId = await start(url, 'book a table');
    const abort = new AbortController();
    const reader = (await fetch(`${url}/runs/${runId}/events`, { signal: abort.signal })).body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!text.includes('event: permission-request') || !text.includes('\n: ping\n\n')) text += decoder.decode((await reader.read()).value);
    abort.abort();
    expect((await fetch(`${url}/runs/${runId}/cancel`, { method: 'POST' })).status).toBe(200);
  });

  it('answers bad requests with a 4xx JSON error naming what was wrong', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore()), { maxBodyBytes: 100 }));
    const check = async (path: string, init: RequestInit, status: number, error: RegExp) => {
      const res = await fetch(`${url}${path}`, init);
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toBe('application/json');
      expect(((await res.json()) as { error: string }).error).toMatch(error);
      return res;
    };
    await check('/runs', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hi' }, 415, /content-type application\/json, got text\/plain/);
    await check('/runs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"input": ' }, 400, /not JSON/);
    await check('/runs', json({ input: 'x'.repeat(200) }), 413, /over the limit of 100/);
    await check('/runs', json({ message: 'hi' }), 400, /"input" must be a non-empty string, a message or an array of messages, got undefined/);
    await check('/runs', json([1]), 400, /a JSON object \{ "input": … \}/);
    await check('/runs', json({ input: 'hi', sessionId: 7 }), 400, /"sessionId" must be a non-empty string, got 7/);
    const get = await check('/runs', {}, 405, /Method GET not allowed on \/runs: POST/);
    expect(get.headers.get('allow')).toBe('POST');
    await check('/runs/r1/events', { method: 'POST' }, 405, /Method POST not allowed on \/runs\/r1\/events: GET/);
    await check('/runs/nope/events', {}, 404, /No run 'nope' in the store/);
    await check('/runs/nope/responses', json({ type: 'permission-response', requestId: 'q', approved: true }), 404, /No run 'nope'/);
    await check('/runs/nope/cancel', { method: 'POST' }, 404, /No run 'nope'/);
    await check('/runs/nope', {}, 404, /No run 'nope' in the store/);
    const postInfo = await check('/runs/r1', { method: 'POST' }, 405, /Method POST not allowed on \/runs\/r1: GET/);
    expect(postInfo.headers.get('allow')).toBe('GET');
    await check('/runs/r1/responses', json({ type: 'permission-response', approved: true }), 400, /a string "type" and "requestId"/);
    await check(
      '/runs/r1/events',
      { headers: { 'last-event-id': 'abc' } },
      400,
      /Last-Event-ID must be the seq of an event \(a whole number >= 0\), got "abc"/,
    );
    await check('/runs/r1/events?after=-1', {}, 400, /after must be the seq of an event/);
    await check('/runs/%E0%A4%A/events', {}, 400, /not valid percent-encoding/);
    await check('/elsewhere', {}, 404, /No route for GET \/elsewhere: the runs are under \/runs/);
    await check('/runs/r1/unknown', {}, 404, /No route/);
  });

  it('authorize decides who may touch which run: false is a 403, a Response is sent as is', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const asked: Array<[string | null, string | undefined]> = [];
    const url = await serve(
      runsHandler(bookingAgent(store), {
        authorize: (request, runId) => {
          const user = request.headers.get('x-user');
          asked.push([user, runId]);
          if (!user) return new Response('sign in first', { status: 401, headers: { 'www-authenticate': 'Bearer' } });
          return runId === undefined || runId.startsWith(`${user}-`);
        },
        runOptions: (request, body) => ({ runId: `${request.headers.get('x-user')}-${String(body.input).length}` }),
      }),
    );
    const anonymous = await fetch(`${url}/runs`, json({ input: 'hi' }));
    expect([anonymous.status, anonymous.headers.get('www-authenticate'), await anonymous.text()]).toEqual([401, 'Bearer', 'sign in first']);
    const started = await fetch(`${url}/runs`, json({ input: 'hi' }, { 'x-user': 'ann' }));
    const { runId } = (await started.json()) as { runId: string };
    expect(runId).toBe('ann-2');
    await readFrames(await fetch(`${url}/runs/${runId}/events`, { headers: { 'x-user': 'ann' } }));
    for (const [path, init] of [
      [`/runs/${runId}/events`, {}],
      [`/runs/${runId}/cancel`, { method: 'POST' }],
      [`/runs/${runId}/responses`, json({ type: 'permission-response', requestId: 'q', approved: true })],
    ] as const) {
      const res = await fetch(`${url}${path}`, { ...init, headers: { ...('headers' in init ? init.headers : {}), 'x-user': 'bob' } });
      expect([res.status, await res.json()]).toEqual([403, { error: `Not allowed to access run '${runId}'` }]);
    }
    expect(asked).toEqual([
      [null, undefined],
      ['ann', undefined],
      ['ann', 'ann-2'],
      ['bob', 'ann-2'],
      ['bob', 'ann-2'],
      ['bob', 'ann-2'],
    ]);
  });

  it('a run that cannot start (its id is taken) is a 409 naming why', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const url = await serve(runsHandler(bookingAgent(store), { runOptions: () => ({ runId: 'fixed' }) }));
    await readFrames(await fetch(`${url}/runs`, json({ input: 'one' }, { accept: 'text/event-stream' })));
    const second = await fetch(`${url}/runs`, json({ input: 'two' }));
    expect(second.status).toBe(409);
    expect(((await second.json()) as { error: string }).error).toMatch(/^The run could not start: .*'fixed'/);
  });

  it('a start refused because its id is live here leaves that run streamed live from here', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const url = await serve(runsHandler(bookingAgent(store, { delayMs: 150 }), { runOptions: () => ({ runId: 'fixed' }) }));
    expect((await fetch(`${url}/runs`, json({ input: 'hello there' }))).status).toBe(201);
    expect((await fetch(`${url}/runs`, json({ input: 'again' }))).status).toBe(409);
    const arrived: Array<[string, number]> = [];
    await readFrames(await fetch(`${url}/runs/fixed/events`), (frame) => (arrived.push([frame.data.type, Date.now()]), false));
    const at = (type: string) => arrived.find(([t]) => t === type)?.[1] ?? NaN;
    // Live, each delta comes as the model streams it; read from the store, all come with the iteration's end.
    expect(at('run-end') - at('text-delta')).toBeGreaterThan(250);
  });

  it('start puts the run elsewhere (a job queue): 201 once it is in the store; streamed, answered and ended there, not here', async () => {
    const store = memoryStore({ retainMs: 60_000 });
    const bookedHere: string[] = [];
    const bookedThere: string[] = [];
    const worker = bookingAgent(store, { booked: bookedThere });
    const given: unknown[] = [];
    const start = (input: unknown, options: { runId: string; sessionId?: string }) =>
      new Promise<void>((resolve, reject) => {
        given.push({ input, ...options });
        // A worker of another process would do this: the hook resolves once the run is in the store.
        worker.run(input as string, options).subscribe({ next: (event) => event.seq === 1 && resolve(), error: reject });
      });
    const resumed: unknown[] = [];
    const url = await serve(runsHandler(bookingAgent(store, { booked: bookedHere }), { start, resume: (...args) => void resumed.push(args) }));
    const res = await fetch(`${url}/runs`, json({ input: 'book a table', sessionId: 'guest' }));
    expect(res.status).toBe(201);
    const { runId } = (await res.json()) as { runId: string };
    expect(given).toEqual([{ input: 'book a table', runId, sessionId: 'guest' }]);
    const reading = readFrames(await fetch(`${url}/runs/${runId}/events`));
    const { request } = await untilRequest(url, runId);
    expect((await fetch(`${url}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: request.requestId, approved: true }))).status).toBe(
      200,
    );
    const read = events(await reading);
    expect(read.map(label)).toEqual(bookingLabels('Booked for 2.'));
    expect(read.map((event) => event.seq)).toEqual(read.map((_, i) => i + 1));
    expect([bookedHere, bookedThere]).toEqual([[], ['table for 2']]);
    expect(resumed).toEqual([]); // a waiting run took its answer where it runs
  });

  it('a start that fails is a 4xx naming why: a TypeError 400, anything else 409', async () => {
    const store = memoryStore();
    const resume = () => undefined;
    const refuse = (error: Error) => runsHandler(bookingAgent(store), { start: () => Promise.reject(error), resume });
    const bad = await fetch(`${await serve(refuse(new TypeError('"input" must be a string')))}/runs`, json({ input: [{ role: 'user', content: [] }] }));
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toBe('The run could not start: "input" must be a string');
    const down = await fetch(`${await serve(refuse(new Error('the queue is unreachable')))}/runs`, json({ input: 'hi' }));
    expect(down.status).toBe(409);
    expect(((await down.json()) as { error: string }).error).toBe('The run could not start: the queue is unreachable');
    const throwing = runsHandler(bookingAgent(store), {
      start: () => {
        throw new TypeError('no queue here');
      },
      resume,
    });
    expect((await fetch(`${await serve(throwing)}/runs`, json({ input: 'hi' }))).status).toBe(400);
    expect(() => runsHandler(bookingAgent(store), { start: 'queue' as never })).toThrow('runsHandler: \'start\' must be a function, got "queue"');
  });

  describe("with 'start' (runs run elsewhere), a run that suspends for its answer", () => {
    /** A handler whose `start` and `resume` run the run on `worker` (another process's agent). */
    function elsewhere(store: AgentStore, resume: (runId: string, at: { seq: number }) => Promise<void> | void) {
      const bookedHere: string[] = [];
      const bookedThere: string[] = [];
      const worker = bookingAgent(store, { onRequest: 'suspend', booked: bookedThere });
      const handler = runsHandler(bookingAgent(store, { onRequest: 'suspend', booked: bookedHere }), {
        start: (input, options) =>
          new Promise<void>((resolve, reject) => {
            worker.run(input, options).subscribe({ next: (event) => event.seq === 1 && resolve(), error: reject });
          }),
        resume,
      });
      return { handler, worker, bookedHere, bookedThere };
    }

    async function untilSuspended(agent: Agent, runId: string) {
      for (;;) {
        const info = await agent.runs.get(runId);
        if (info?.status === 'suspended') return info;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }

    it("hands the resume to 'resume' with the seq of the suspension, and never resumes the run here", async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const calls: Array<[string, { seq: number }]> = [];
      const { handler, worker, bookedHere, bookedThere } = elsewhere(store, (runId, at) => {
        calls.push([runId, at]);
        worker.resume(runId).subscribe(); // what a worker of the queue does with the job
      });
      const url = await serve(handler);
      const runId = await start(url, 'book a table');
      const reading = readFrames(await fetch(`${url}/runs/${runId}/events`));
      const info = await untilSuspended(worker, runId);
      const answer = { type: 'permission-response', requestId: info.pendingRequests[0].requestId, approved: true };
      const accepted = await fetch(`${url}/runs/${runId}/responses`, json(answer));
      expect([accepted.status, await accepted.json()]).toEqual([200, { accepted: true }]);
      expect(calls).toEqual([[runId, { seq: info.seq }]]);
      expect(events(await reading).map(label)).toEqual([
        ...bookingLabels('').slice(0, 9),
        'run-end:suspended',
        'run-start',
        ...bookingLabels('Booked for 2.').slice(9),
      ]);
      expect([bookedHere, bookedThere]).toEqual([[], ['table for 2']]);
    });

    it("answers 500 when 'resume' fails, naming why: the answer is kept, the run stays suspended", async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const { handler, worker, bookedHere, bookedThere } = elsewhere(store, () => Promise.reject(new Error('the queue is unreachable')));
      const url = await serve(handler);
      const runId = await start(url, 'book a table');
      const info = await untilSuspended(worker, runId);
      const answer = { type: 'permission-response', requestId: info.pendingRequests[0].requestId, approved: true };
      const failed = await fetch(`${url}/runs/${runId}/responses`, json(answer));
      expect([failed.status, await failed.json()]).toEqual([
        500,
        { accepted: true, error: `The answer was kept, but run '${runId}' could not be resumed: the queue is unreachable` },
      ]);
      expect(await worker.runs.get(runId)).toMatchObject({ status: 'suspended' });
      // A later resume (the queue is back) reads the kept answer.
      expect((await lastValueFrom(worker.resume(runId).pipe(filter((e) => e.type === 'run-end')))).reason).toBe('completed');
      expect([bookedHere, bookedThere]).toEqual([[], ['table for 2']]);
    });

    it("a retry of the answer after a failed 'resume' queues the resume again (a 409: the answer was kept the first time)", async () => {
      const store = memoryStore({ retainMs: 60_000 });
      let queueUp = false;
      const { handler, worker, bookedThere } = elsewhere(store, (runId) => {
        if (!queueUp) return Promise.reject(new Error('the queue is unreachable'));
        worker.resume(runId).subscribe();
      });
      const url = await serve(handler);
      const runId = await start(url, 'book a table');
      const info = await untilSuspended(worker, runId);
      const answer = { type: 'permission-response', requestId: info.pendingRequests[0].requestId, approved: true };
      expect((await fetch(`${url}/runs/${runId}/responses`, json(answer))).status).toBe(500);
      queueUp = true;
      const retried = await fetch(`${url}/runs/${runId}/responses`, json(answer));
      expect(retried.status).toBe(409);
      for (let waited = 0; (await worker.runs.get(runId))?.status !== 'finished'; waited += 5) {
        if (waited > 5_000) throw new Error('the run was not resumed');
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      expect(bookedThere).toEqual(['table for 2']);
    });

    it("hands the resume to 'resume' once the run has let go, when the answer came as the run was suspending", async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const slowRelease: AgentStore = Object.assign(Object.create(store) as AgentStore, {
        releaseLease: (runId: string, owner: string) => new Promise<void>((resolve) => setTimeout(() => resolve(store.releaseLease(runId, owner)), 150)),
      });
      const calls: Array<[string, { seq: number }]> = [];
      const { handler, bookedHere } = elsewhere(store, (runId, at) => void calls.push([runId, at]));
      const other = bookingAgent(slowRelease, { onRequest: 'suspend' });
      const ending = lastValueFrom(other.run('book a table', { runId: 'letting-go' }).pipe(filter((e) => e.type === 'run-end')));
      let info = await other.runs.get('letting-go');
      while (!info?.pendingRequests?.length) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        info = await other.runs.get('letting-go');
      }
      expect(info).toMatchObject({ status: 'running' });
      const url = await serve(handler);
      const accepted = await fetch(
        `${url}/runs/letting-go/responses`,
        json({ type: 'permission-response', requestId: info.pendingRequests[0].requestId, approved: true }),
      );
      expect(accepted.status).toBe(200);
      const end = await ending;
      for (let waited = 0; calls.length === 0 && waited < 2_000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(calls).toEqual([['letting-go', { seq: end.seq }]]);
      expect(await other.runs.get('letting-go')).toMatchObject({ status: 'suspended' });
      expect(bookedHere).toEqual([]);
    });

    it("leaves a run whose worker died while it waited to the queue: neither resumed here nor handed to 'resume'", async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const calls: unknown[] = [];
      const { handler, bookedHere } = elsewhere(store, (...args) => void calls.push(args));
      const dead = bookingAgent(store);
      let running: Subscription | undefined;
      const request = await new Promise<Extract<AgentEvent, { type: 'permission-request' }>>((resolve) => {
        running = dead.run('book a table', { runId: 'orphan' }).subscribe((event) => event.type === 'permission-request' && resolve(event));
      });
      running?.unsubscribe();
      expect(await dead.runs.get('orphan')).toMatchObject({ status: 'interrupted' });
      const url = await serve(handler);
      const accepted = await fetch(`${url}/runs/orphan/responses`, json({ type: 'permission-response', requestId: request.requestId, approved: true }));
      expect([accepted.status, await accepted.json()]).toEqual([200, { accepted: true }]);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(await dead.runs.get('orphan')).toMatchObject({ status: 'interrupted' }); // its job, stalled, is handed over by the queue
      expect([calls, bookedHere]).toEqual([[], []]);
    });
  });

  it("refuses an unknown option (a TypeError naming it and the known ones), and 'resume' without 'start' ('start' alone resumes here)", () => {
    const agent = bookingAgent(memoryStore());
    const start = () => undefined;
    expect(() => runsHandler(agent, { basepath: '/api/runs' } as never)).toThrow(
      new TypeError("runsHandler: unknown option(s) 'basepath' (known: authorize, runOptions, start, resume, basePath, maxBodyBytes, heartbeatMs, scheduler)"),
    );
    expect(() => runsHandler(agent, { onRequest: 'suspend', heartbeat: 5 } as never)).toThrow(
      "runsHandler: unknown option(s) 'onRequest', 'heartbeat' (known:",
    );
    expect(() => runsHandler(agent, { start })).not.toThrow(); // resumes then run here, as before 'resume' came
    expect(() => runsHandler(agent, { resume: start })).toThrow(
      new TypeError("runsHandler: 'resume' goes with 'start' (without it, runs and their resumes run here)"),
    );
    expect(() => runsHandler(agent, { start, resume: 'queue' as never })).toThrow(new TypeError('runsHandler: \'resume\' must be a function, got "queue"'));
    expect(() => runsHandler(agent, { start, resume: start })).not.toThrow();
  });

  it('says at creation that the agent needs a store, and checks its options', () => {
    const agent = createAgent({ model: scriptedModel(['hi']) });
    expect(() => runsHandler(agent)).toThrow(/^runsHandler: the agent has no store; .*createAgent\(\{ …, store: memoryStore\(\) \}\)/);
    const withStore = bookingAgent(memoryStore());
    expect(() => runsHandler({} as never)).toThrow(/runsHandler: expected an agent \(createAgent\(\)\), got \{\}/);
    expect(() => runsHandler(withStore, { authorize: 'yes' as never })).toThrow('runsHandler: \'authorize\' must be a function, got "yes"');
    expect(() => runsHandler(withStore, { basePath: 'runs' })).toThrow(/'basePath' must be a path such as '\/runs', got "runs"/);
    expect(() => runsHandler(withStore, { maxBodyBytes: 0 })).toThrow(/'maxBodyBytes' must be a positive number, got 0/);
    expect(() => runsHandler(withStore, { heartbeatMs: -1 })).toThrow(/runsHandler: heartbeatMs must be a number of milliseconds/);
  });

  it('mounts under another base path', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore()), { basePath: '/api/agent/runs/' }));
    const res = await fetch(`${url}/api/agent/runs`, json({ input: 'hi' }));
    const { runId } = (await res.json()) as { runId: string };
    expect(res.headers.get('location')).toBe(`/api/agent/runs/${runId}/events`);
    expect(
      events(await readFrames(await fetch(`${url}${res.headers.get('location')}`)))
        .map(label)
        .at(-1),
    ).toBe('run-end:completed');
  });

  it('a suspended run resumed here on its answer: a reader from seq 0 gets the part before the suspension too, then the rest live', async () => {
    const url = await serve(runsHandler(bookingAgent(memoryStore(), { onRequest: 'suspend', delayMs: 20 })));
    const runId = await start(url, 'book a table');
    const { request } = await untilRequest(url, runId);
    expect((await fetch(`${url}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: request.requestId, approved: true }))).status).toBe(
      200,
    );
    const read = events(await readFrames(await fetch(`${url}/runs/${runId}/events`)));
    expect(read.map((event) => event.seq)).toEqual(read.map((_, i) => i + 1));
    expect(read.map(label)).toEqual([...bookingLabels('').slice(0, 9), 'run-end:suspended', 'run-start', ...bookingLabels('Booked for 2.').slice(9)]);
  });

  describe('an answer that comes before the journal holds its request (the stream here is ahead of the write)', () => {
    /** A store whose writes of a request (and of what is buffered with it) wait until `release()`. */
    function holdingRequests() {
      const store = memoryStore({ retainMs: 60_000 });
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      const held: AgentStore = Object.assign(Object.create(store) as AgentStore, {
        append: (runId: string, expected: number, records: readonly JournalRecord[]) =>
          records.some((record) => record.kind === 'request')
            ? released.then(() => store.append(runId, expected, records))
            : store.append(runId, expected, records),
      });
      return { store, held, release };
    }

    /** The agent, with what each of its `respond` calls answered. */
    function watched(agent: Agent) {
      const answered = new Subject<boolean>();
      const respond = (runId: string, answer: AgentResponse) => agent.respond(runId, answer).then((accepted) => (answered.next(accepted), accepted));
      return { agent: { ...agent, respond } as Agent, answered };
    }

    /** Resolves once `agent.respond` has refused `count` answers. */
    const refusals = (answered: Subject<boolean>, count: number) =>
      lastValueFrom(
        answered.pipe(
          filter((accepted) => !accepted),
          take(count),
        ),
      );

    const requested = async (store: AgentStore, runId: string) => ((await store.read(runId)) ?? []).some((entry) => entry.record.kind === 'request');

    it.each(['wait', 'suspend'] as const)(
      "onRequest %s: answered at once from this process's stream, the answer waits for the write and is accepted; the run completes",
      async (onRequest) => {
        const { store, held, release } = holdingRequests();
        const booked: string[] = [];
        const { agent, answered } = watched(bookingAgent(held, { onRequest, booked }));
        const url = await serve(runsHandler(agent));
        const runId = await start(url, 'book a table');
        try {
          const reading = readFrames(await fetch(`${url}/runs/${runId}/events`));
          const { request } = await untilRequest(url, runId);
          expect(await requested(store, runId)).toBe(false);
          const refused = refusals(answered, 1);
          const accepted = fetch(`${url}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: request.requestId, approved: true }));
          await refused; // the journal does not hold the request yet
          release();
          const res = await accepted;
          expect([res.status, await res.json()]).toEqual([200, { accepted: true }]);
          const read = events(await reading);
          expect(read.map(label)).toEqual(
            onRequest === 'wait'
              ? bookingLabels('Booked for 2.')
              : [...bookingLabels('').slice(0, 9), 'run-end:suspended', 'run-start', ...bookingLabels('Booked for 2.').slice(9)],
          );
          expect(read.map((event) => event.seq)).toEqual(read.map((_, i) => i + 1));
          expect(booked).toEqual(['table for 2']);
        } finally {
          release();
          await agent.cancel(runId).catch(() => undefined);
        }
      },
    );

    it('the same answer posted twice before the write: one is accepted, the other is a 409', async () => {
      const { held, release } = holdingRequests();
      const booked: string[] = [];
      const { agent, answered } = watched(bookingAgent(held, { booked }));
      const url = await serve(runsHandler(agent));
      const runId = await start(url, 'book a table');
      try {
        const reading = readFrames(await fetch(`${url}/runs/${runId}/events`));
        const { request } = await untilRequest(url, runId);
        const answer = { type: 'permission-response', requestId: request.requestId, approved: true };
        const refused = refusals(answered, 2);
        const posts = [fetch(`${url}/runs/${runId}/responses`, json(answer)), fetch(`${url}/runs/${runId}/responses`, json(answer))];
        await refused;
        release();
        const results = await Promise.all(
          posts.map(async (post) => {
            const res = await post;
            return [res.status, await res.json()] as const;
          }),
        );
        expect(results.map(([status]) => status).sort()).toEqual([200, 409]);
        expect(results.find(([status]) => status === 409)![1]).toEqual({
          accepted: false,
          error: expect.stringContaining(`does not wait for request '${request.requestId}'`),
        });
        expect(events(await reading).map(label)).toEqual(bookingLabels('Booked for 2.'));
        expect(booked).toEqual(['table for 2']);
      } finally {
        release();
        await agent.cancel(runId).catch(() => undefined);
      }
    });

    it('an answer to a request the run here never asked is a 409 at once, without waiting for the write', async () => {
      const { held, release } = holdingRequests();
      const agent = bookingAgent(held);
      const url = await serve(runsHandler(agent));
      const runId = await start(url, 'book a table');
      try {
        await untilRequest(url, runId);
        const asked = Date.now();
        const res = await fetch(`${url}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: 'never-asked', approved: true }));
        expect(res.status).toBe(409);
        expect(Date.now() - asked).toBeLessThan(1_000);
      } finally {
        release();
        await agent.cancel(runId).catch(() => undefined);
      }
    });

    it("a write that does not come in time: the answer is a 409 once the wait is over, timed on the handler's scheduler", async () => {
      const { held, release } = holdingRequests();
      const { agent, answered } = watched(bookingAgent(held));
      const scheduler = new VirtualTimeScheduler();
      const url = await serve(runsHandler(agent, { scheduler, heartbeatMs: Infinity }));
      const runId = await start(url, 'book a table');
      try {
        const { request } = await untilRequest(url, runId);
        let settled = false;
        const refused = refusals(answered, 1);
        const post = fetch(`${url}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: request.requestId, approved: true })).finally(
          () => (settled = true),
        );
        await refused;
        while (!settled && scheduler.actions.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
        expect(settled).toBe(false); // waiting for the write, on the scheduler
        scheduler.flush();
        const res = await post;
        expect([res.status, scheduler.now()]).toEqual([409, 5_000]);
        expect(scheduler.actions).toEqual([]);
      } finally {
        release();
        await agent.cancel(runId).catch(() => undefined);
      }
    });
  });

  describe('two servers sharing one store (two agents, two handlers)', () => {
    it('the stream read from one, the answer posted to the other, while the run waits live in the first', async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const booked: string[] = [];
      const a = await serve(runsHandler(bookingAgent(store, { booked })));
      const b = await serve(runsHandler(bookingAgent(store, { booked })));
      const runId = await start(a, 'book a table');
      const reading = readFrames(await fetch(`${b}/runs/${runId}/events`));
      const { request } = await untilRequest(b, runId);
      const accepted = await fetch(`${b}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: request.requestId, approved: true }));
      expect(accepted.status).toBe(200);
      const read = events(await reading);
      expect(read.map(label)).toEqual(bookingLabels('Booked for 2.'));
      expect(read.map((event) => event.seq)).toEqual(read.map((_, i) => i + 1));
      expect(booked).toEqual(['table for 2']);
      // The server that ran it streams the same events from its journal.
      expect(events(await readFrames(await fetch(`${a}/runs/${runId}/events`)))).toEqual(read);
    });

    it('a suspended run: answered on the other server, resumed there, one stream across the suspension', async () => {
      const store = memoryStore({ retainMs: 60_000 });
      const booked: string[] = [];
      const a = await serve(runsHandler(bookingAgent(store, { booked, onRequest: 'suspend' })));
      const b = await serve(runsHandler(bookingAgent(store, { booked, onRequest: 'suspend' })));
      const runId = await start(a, 'book a table');
      const reading = readFrames(await fetch(`${a}/runs/${runId}/events`));
      const { request } = await untilRequest(b, runId);
      const accepted = await fetch(`${b}/runs/${runId}/responses`, json({ type: 'permission-response', requestId: request.requestId, approved: false }));
      expect(accepted.status).toBe(200);
      const read = events(await reading);
      expect(read.map(label)).toEqual([
        ...bookingLabels('').slice(0, 9),
        'run-end:suspended',
        'run-start',
        'tool-result:book_table',
        'iteration-end',
        'iteration-start',
        'text:The ',
        'text:answer: ',
        "text:Permission denied for 'book_table': denied by user",
        'iteration-end',
        'run-end:completed',
      ]);
      expect(read.map((event) => event.seq)).toEqual(read.map((_, i) => i + 1));
      expect(read.find((event) => event.type === 'run-start' && event.resumed)).toBeDefined();
      expect(booked).toEqual([]);
    });
  });
});
