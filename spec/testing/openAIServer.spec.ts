import OpenAI from 'openai';
import { startFakeOpenAIServer, type FakeOpenAIServer, type FakeOpenAITurn } from '../../src/testing/openAIServer';

let server: FakeOpenAIServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function start(script: FakeOpenAITurn[]) {
  server = await startFakeOpenAIServer(script);
  return server;
}

const post = (url: string, body: unknown, init: RequestInit = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...init });

const streamBody = (extra: Record<string, unknown> = {}) => ({
  model: 'm',
  messages: [{ role: 'user', content: 'Hi' }],
  stream: true,
  stream_options: { include_usage: true },
  ...extra,
});

/** The `data:` payloads of an SSE body. */
function events(text: string): string[] {
  expect(text.endsWith('\n\n')).toBe(true);
  return text
    .split('\n\n')
    .filter(Boolean)
    .map((event) => {
      expect(event.startsWith('data: ')).toBe(true);
      return event.slice('data: '.length);
    });
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Chunk = any;
const chunksOf = (text: string): Chunk[] => {
  const list = events(text);
  expect(list[list.length - 1]).toBe('[DONE]');
  return list.slice(0, -1).map((data) => JSON.parse(data));
};

describe('startFakeOpenAIServer', () => {
  it('streams text chunks, finish and usage as server-sent events, then [DONE]', async () => {
    const s = await start([{ text: ['Hel', 'lo'], usage: { prompt_tokens: 5, completion_tokens: 2 } }]);
    expect(s.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const res = await post(`${s.url}/chat/completions`, streamBody());
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const chunks = chunksOf(await res.text());
    expect(chunks.map((c) => c.object)).toEqual(Array(4).fill('chat.completion.chunk'));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: 'Hel' });
    expect(chunks[1].choices[0].delta).toEqual({ content: 'lo' });
    expect(chunks[2].choices[0]).toMatchObject({ delta: {}, finish_reason: 'stop' });
    expect(chunks[3]).toMatchObject({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks[0].model).toBe('m');
    expect(s.requests).toEqual([streamBody()]);
  });

  it('splits a string into word chunks and sends usage only when asked', async () => {
    const s = await start([{ text: 'It is sunny.' }]);
    const res = await post(`${s.url}/chat/completions`, streamBody({ stream_options: undefined }));
    const chunks = chunksOf(await res.text());
    expect(chunks.filter((c) => c.choices[0]?.delta.content).map((c) => c.choices[0].delta.content)).toEqual(['It ', 'is ', 'sunny.']);
    expect(chunks.every((c) => c.usage === null)).toBe(true);
  });

  it('splits tool-call arguments over chunks, interleaved by index', async () => {
    const s = await start([
      {
        toolCalls: [
          { id: 'a', name: 'f', args: { x: 1, y: 'long value' }, chunks: 3 },
          { id: 'b', name: 'g', args: '{"z":true}', chunks: 2 },
        ],
      },
    ]);
    const chunks = chunksOf(await (await post(`${s.url}/chat/completions`, streamBody())).text());
    const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
    expect(calls[0]).toEqual({ index: 0, id: 'a', type: 'function', function: { name: 'f', arguments: '' } });
    expect(calls[1]).toEqual({ index: 1, id: 'b', type: 'function', function: { name: 'g', arguments: '' } });
    expect(calls.slice(2).map((c: Chunk) => c.index)).toEqual([0, 1, 0, 1, 0]);
    const args = (i: number) =>
      calls
        .filter((c: Chunk) => c.index === i)
        .map((c: Chunk) => c.function.arguments)
        .join('');
    expect(JSON.parse(args(0))).toEqual({ x: 1, y: 'long value' });
    expect(args(1)).toBe('{"z":true}');
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe('tool_calls');
  });

  it("a tool call's `chunks` is the number of pieces its arguments stream in (10 characters over 6: 2 2 2 2 1 1)", async () => {
    const s = await start([{ toolCalls: [{ id: 'a', name: 'f', args: '{"a":1234}', chunks: 6 }] }]);
    const chunks = chunksOf(await (await post(`${s.url}/chat/completions`, streamBody())).text());
    const pieces = chunks
      .flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
      .map((c: Chunk) => c.function.arguments)
      .filter((a: string) => a !== '');
    expect(pieces).toEqual(['{"', 'a"', ':1', '23', '4', '}']);
  });

  it('answers scripted HTTP errors, and a clear 500 when the script is exhausted', async () => {
    const s = await start([{ status: 429, headers: { 'retry-after': '2' }, body: { error: { message: 'slow down' } } }, { status: 400 }]);
    const r1 = await post(`${s.url}/chat/completions`, streamBody());
    expect(r1.status).toBe(429);
    expect(r1.headers.get('retry-after')).toBe('2');
    expect(await r1.json()).toEqual({ error: { message: 'slow down' } });
    const r2 = await post(`${s.url}/chat/completions`, streamBody());
    expect(r2.status).toBe(400);
    expect((await r2.json()).error.message).toMatch(/400/);
    const r3 = await post(`${s.url}/chat/completions`, streamBody());
    expect(r3.status).toBe(500);
    expect((await r3.json()).error).toMatchObject({ type: 'script_exhausted', message: expect.stringMatching(/script exhausted/) });
    expect(s.requests).toHaveLength(3);
  });

  it('accepts /chat/completions without /v1, 404s other paths without using a turn', async () => {
    const s = await start([{ text: 'one' }]);
    const base = s.url.replace(/\/v1$/, '');
    expect((await post(`${base}/v1/models`, {})).status).toBe(404);
    expect((await post(`${base}/chat/completions`, { model: 'm', messages: [] })).status).toBe(200);
    expect(s.requests).toHaveLength(1);
  });

  it('starts on a Node.js without process.getBuiltinModule (before 20.16), importing its modules', async () => {
    const node = process as { getBuiltinModule?: unknown };
    const getBuiltinModule = node.getBuiltinModule;
    node.getBuiltinModule = undefined;
    try {
      const s = await start([{ text: 'one two', latencyMs: 5, delayMs: 1 }]);
      const answer = await post(`${s.url}/chat/completions`, streamBody());
      expect(
        chunksOf(await answer.text())
          .map((c) => c.choices[0]?.delta?.content ?? '')
          .join(''),
      ).toBe('one two');
    } finally {
      node.getBuiltinModule = getBuiltinModule;
    }
  });

  it('answers a CORS preflight without using a turn, and lets any origin read its answers', async () => {
    const s = await start([{ text: 'one' }, { status: 429, headers: { 'retry-after': '2' } }]);
    const preflight = await fetch(`${s.url}/chat/completions`, {
      method: 'OPTIONS',
      headers: {
        origin: 'http://page.test',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization,content-type,x-stainless-os',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('*');
    expect(preflight.headers.get('access-control-allow-methods')).toContain('POST');
    expect(preflight.headers.get('access-control-allow-headers')).toBe('authorization,content-type,x-stainless-os');
    expect(s.requests).toHaveLength(0);

    const answer = await post(`${s.url}/chat/completions`, streamBody(), { headers: { origin: 'http://page.test', 'content-type': 'application/json' } });
    expect(answer.headers.get('access-control-allow-origin')).toBe('*');
    await answer.text();
    const limited = await post(`${s.url}/chat/completions`, streamBody());
    expect(limited.status).toBe(429);
    expect(limited.headers.get('access-control-allow-origin')).toBe('*');
    expect(limited.headers.get('access-control-expose-headers')).toBe('*');
    await limited.text();
    expect(s.requests).toHaveLength(2);
  });

  it('answers a preflight that asks for no headers with an empty allow-list, and uses no turn', async () => {
    const s = await start([{ text: 'one' }]);
    const preflight = await fetch(`${s.url}/chat/completions`, {
      method: 'OPTIONS',
      headers: { origin: 'http://page.test', 'access-control-request-method': 'POST' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-headers')).toBe('');
    expect(preflight.headers.get('access-control-allow-origin')).toBe('*');
    expect(s.requests).toHaveLength(0);
  });

  it('answers a non-streaming request with a whole completion', async () => {
    const s = await start([{ text: 'Hello there', toolCalls: [{ id: 'c', name: 'f', args: { a: 1 } }] }]);
    const res = await post(`${s.url}/chat/completions`, { model: 'm', messages: [] });
    const body = await res.json();
    expect(body).toMatchObject({
      object: 'chat.completion',
      choices: [
        {
          message: {
            role: 'assistant',
            content: 'Hello there',
            tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
          },
          finish_reason: 'tool_calls',
        },
      ],
    });
  });

  it('lets a turn be a function of the request', async () => {
    const s = await start([(req) => ({ text: [`echo: ${String(req.messages?.[0]?.content)}`] })]);
    const chunks = chunksOf(await (await post(`${s.url}/chat/completions`, streamBody())).text());
    expect(chunks[0].choices[0].delta.content).toBe('echo: Hi');
  });

  it('rejects a body that is not JSON with 400', async () => {
    const s = await start([{ text: 'x' }]);
    const res = await fetch(`${s.url}/chat/completions`, { method: 'POST', body: '{nope' });
    expect(res.status).toBe(400);
    expect(s.requests).toHaveLength(0);
  });

  it.each([
    [2, 2],
    [99, 5], // more than the turn sends (3 texts, the finish, the usage): cut before [DONE] all the same
  ])('drops the connection after %i chunks (%i sent), not counted as a client close', async (dropAfterChunks, sent) => {
    const s = await start([{ text: ['a', 'b', 'c'], dropAfterChunks }]);
    const res = await post(`${s.url}/chat/completions`, streamBody());
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    await expect(
      (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return;
          text += decoder.decode(value, { stream: true });
        }
      })(),
    ).rejects.toThrow();
    const datas = text.split('\n\n').filter(Boolean);
    expect(datas).toHaveLength(sent);
    expect(text).not.toContain('[DONE]');
    expect(s.closedConnections()).toBe(0);
  });

  it('sees a client abort mid-stream promptly', async () => {
    const s = await start([{ text: ['a', 'b', 'c'], delayMs: 500 }]);
    const controller = new AbortController();
    const closed = s.waitForClose();
    const res = await post(`${s.url}/chat/completions`, streamBody(), { signal: controller.signal });
    const started = Date.now();
    controller.abort();
    await res.body?.cancel().catch(() => undefined);
    await closed;
    expect(Date.now() - started).toBeLessThan(300);
    expect(s.closedConnections()).toBe(1);
  });

  it('waitForClose(count) resolves once that many closes were seen, at once when they already were', async () => {
    const slow: FakeOpenAITurn = { text: ['a', 'b', 'c'], delayMs: 500 };
    const s = await start([slow, slow]);
    const abortOne = async () => {
      const controller = new AbortController();
      const res = await post(`${s.url}/chat/completions`, streamBody(), { signal: controller.signal });
      controller.abort();
      await res.body?.cancel().catch(() => undefined);
    };
    /** Whether `promise` settles within `ms`. */
    const settles = async (promise: Promise<unknown>, ms = 100) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
      return Promise.race([promise.then(() => true), late]).finally(() => clearTimeout(timer));
    };
    const second = s.waitForClose(2);
    const first = s.waitForClose();
    await abortOne();
    expect(await settles(first, 2000)).toBe(true);
    expect(s.closedConnections()).toBe(1);
    // The first close happened already: a count it reached resolves at once, a later one waits.
    expect(await settles(s.waitForClose(1))).toBe(true);
    expect(await settles(s.waitForClose())).toBe(false); // the default: the next close
    expect(await settles(second)).toBe(false);
    const next = s.waitForClose();
    await abortOne();
    expect(await settles(Promise.all([second, next]), 2000)).toBe(true);
    expect(s.closedConnections()).toBe(2);
    expect(await settles(s.waitForClose(2))).toBe(true);
  });

  it.each([
    [0, '0'],
    [-1, '-1'],
    [1.5, '1.5'],
    [NaN, 'NaN'],
    [Infinity, 'Infinity'],
    ['2', '"2"'],
  ])('waitForClose refuses %p as a count', async (count, shown) => {
    const s = await start([]);
    expect(() => s.waitForClose(count as number)).toThrow(new TypeError(`waitForClose: 'count' must be a positive integer, got ${shown}`));
  });

  it('sees a client abort while waiting before the headers (latencyMs)', async () => {
    const s = await start([{ text: 'x', latencyMs: 2000 }]);
    const controller = new AbortController();
    const closed = s.waitForClose();
    const pending = post(`${s.url}/chat/completions`, streamBody(), { signal: controller.signal }).catch((e) => e);
    await new Promise((r) => setTimeout(r, 50));
    controller.abort();
    await closed;
    expect((await pending).name).toBe('AbortError');
    expect(s.closedConnections()).toBe(1);
  });

  it('close() ends open streams at once and can be called twice', async () => {
    const s = await start([{ text: ['a', 'b'], delayMs: 5000 }]);
    const res = await post(`${s.url}/chat/completions`, streamBody());
    const reading = res.text().catch((e: unknown) => e);
    const started = Date.now();
    await s.close();
    await s.close();
    expect(Date.now() - started).toBeLessThan(500);
    expect(await reading).toHaveProperty('message', 'terminated'); // undici's error, from outside jest's realm
    expect(s.closedConnections()).toBe(0);
  });
});

describe('startFakeOpenAIServer with loop: true', () => {
  const text = async (s: FakeOpenAIServer) => {
    const res = await post(`${s.url}/chat/completions`, streamBody());
    if (res.status !== 200) return `HTTP ${res.status}`;
    return chunksOf(await res.text())
      .map((c) => c.choices[0]?.delta?.content ?? '')
      .join('');
  };

  it('starts again from the first turn when the script runs out, error turns included', async () => {
    server = await startFakeOpenAIServer([{ text: ['one'] }, { status: 503 }, { text: ['three'] }], { loop: true });
    const answers: string[] = [];
    for (let i = 0; i < 7; i++) answers.push(await text(server));
    expect(answers).toEqual(['one', 'HTTP 503', 'three', 'one', 'HTTP 503', 'three', 'one']);
    expect(server.requests).toHaveLength(7);
  });

  it("gives a function turn the request's number, counting on across loops (as scriptedModel does)", async () => {
    const calls: number[] = [];
    server = await startFakeOpenAIServer(
      [
        (_req, call) => {
          calls.push(call);
          return { text: [`call ${call}`] };
        },
      ],
      { loop: true },
    );
    expect([await text(server), await text(server), await text(server)]).toEqual(['call 0', 'call 1', 'call 2']);
    expect(calls).toEqual([0, 1, 2]);
  });

  it('without loop (or loop: false) the script runs out: 500 script exhausted; an empty script runs out even with loop', async () => {
    for (const options of [undefined, { loop: false }]) {
      const s = await startFakeOpenAIServer([{ text: ['once'] }], options);
      try {
        expect([await text(s), await text(s)]).toEqual(['once', 'HTTP 500']);
      } finally {
        await s.close();
      }
    }
    server = await startFakeOpenAIServer([], { loop: true });
    const res = await post(`${server.url}/chat/completions`, streamBody());
    expect(res.status).toBe(500);
    expect((await res.json()).error).toMatchObject({
      type: 'script_exhausted',
      message: 'Fake OpenAI server: script exhausted (request #1, but the script has only 0 turn(s))',
    });
  });
});

describe('startFakeOpenAIServer checks its script', () => {
  it('a script that is not an array, options that are not an object or unknown, and a loop that is not a boolean are refused at start', async () => {
    await expect(startFakeOpenAIServer({ text: 'hi' } as never)).rejects.toThrow(
      new TypeError(`startFakeOpenAIServer: 'script' must be an array of turns, got {"text":"hi"}`),
    );
    await expect(startFakeOpenAIServer([], null as never)).rejects.toThrow(new TypeError('startFakeOpenAIServer: options must be an object, got null'));
    await expect(startFakeOpenAIServer([], { loops: true } as never)).rejects.toThrow(
      new TypeError("startFakeOpenAIServer: unknown option(s) 'loops' (known: loop)"),
    );
    await expect(startFakeOpenAIServer([], { loop: 'yes' as never })).rejects.toThrow(
      new TypeError('startFakeOpenAIServer: \'loop\' must be a boolean, got "yes"'),
    );
  });

  it("a tool call's chunks that is not a number >= 1 is refused at start", async () => {
    await expect(startFakeOpenAIServer([{ toolCalls: [{ id: 'c', name: 'f', args: { a: 1 }, chunks: NaN }] }])).rejects.toThrow(
      "startFakeOpenAIServer: a tool call's 'chunks' must be a number >= 1, got NaN",
    );
  });
});

describe('startFakeOpenAIServer on the Responses API', () => {
  /** The events of a Responses SSE body: each frame's `event:` name and parsed `data:`. */
  const responseEvents = (text: string) =>
    text
      .split('\n\n')
      .filter(Boolean)
      .map((frame) => {
        const [eventLine, dataLine, ...rest] = frame.split('\n');
        expect(rest).toEqual([]);
        expect(eventLine.startsWith('event: ')).toBe(true);
        const data = JSON.parse(dataLine.slice('data: '.length));
        expect(data.type).toBe(eventLine.slice('event: '.length));
        return data;
      });

  it('streams the events of a response in order, named and numbered, without [DONE]', async () => {
    const s = await start([
      {
        reasoning: 'Hmm.',
        text: ['Hel', 'lo'],
        toolCalls: [{ id: 'call_1', name: 'f', args: { a: 1 }, chunks: 2 }],
        usage: { prompt_tokens: 3, completion_tokens: 4 },
      },
    ]);
    const res = await post(`${s.url}/responses`, { model: 'm', input: [{ role: 'user', content: 'Hi' }], stream: true });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const text = await res.text();
    expect(text).not.toContain('[DONE]');
    const events = responseEvents(text);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events[15].item).toMatchObject({ type: 'function_call', call_id: 'call_1', name: 'f', arguments: '' });
    expect(events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta)).toEqual(['{"a"', ':1}']);
    const final = events[events.length - 1].response;
    expect(final).toMatchObject({
      object: 'response',
      status: 'completed',
      model: 'm',
      output_text: 'Hello',
      usage: { input_tokens: 3, output_tokens: 4, total_tokens: 7 },
    });
    expect(final.output.map((item: Chunk) => item.type)).toEqual(['reasoning', 'message', 'function_call']);
    expect(s.requests).toEqual([{ model: 'm', input: [{ role: 'user', content: 'Hi' }], stream: true }]);
  });

  it("streams what the openai SDK's own Responses accumulator builds into the final response", async () => {
    const s = await start([{ reasoning: 'Hmm, well.', text: ['Hel', 'lo'], toolCalls: [{ id: 'call_1', name: 'f', args: { a: 1 }, chunks: 3 }] }]);
    const client = new OpenAI({ apiKey: 'test', baseURL: s.url });
    const stream = client.responses.stream({ model: 'm', input: 'Hi' });
    const deltas: string[] = [];
    stream.on('response.output_text.delta', (event) => deltas.push(event.snapshot));
    const final = await stream.finalResponse();
    expect(deltas).toEqual(['Hel', 'Hello']);
    expect(final.output_text).toBe('Hello');
    expect(final.output).toEqual([
      { id: expect.any(String), type: 'reasoning', summary: [{ type: 'summary_text', text: 'Hmm, well.' }] },
      expect.objectContaining({
        type: 'message',
        role: 'assistant',
        status: 'completed',
        content: [expect.objectContaining({ type: 'output_text', text: 'Hello' })],
      }),
      expect.objectContaining({ type: 'function_call', call_id: 'call_1', name: 'f', arguments: '{"a":1}', status: 'completed' }),
    ]);
  });

  it('answers without streaming with the whole response; an incomplete one for finish length', async () => {
    const s = await start([{ text: 'Cut', finish: 'length' }]);
    const res = await post(`${s.url}/responses`, { model: 'm', input: 'Hi' });
    expect(await res.json()).toMatchObject({
      object: 'response',
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      output_text: 'Cut',
    });
  });
});
