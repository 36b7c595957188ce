// A loopback OpenAI-compatible chat completions server for the wire workloads (S1w, S2r), run in a
// process of its own so that its CPU time is not counted in the bench's. Prints its port on stdout.
//   S1w: the first user message is `s1w:<n>:<framing>`: n text deltas (S1's cycle of texts), then
//        finish and usage and [DONE]; framing `whole` writes the body at once (many events per
//        network read), `events` writes each event on its own.
//   S2r: the first user message is `s2r:<k>`: while the request holds fewer than k tool results,
//        one `echo({ i })` call (i = tool results so far), then the final text `done`.
import { createServer } from 'node:http';

const TEXTS = ['tok ', 'tok ', 'v2 ', 'tok ', 'a@b ', 'tok ', '42 ', 'tok '];
const head = { id: 'chatcmpl-wire', object: 'chat.completion.chunk', created: 1, model: 'gpt-wire', system_fingerprint: 'fp_wire' };
const frame = (choices, usage = null) => `data: ${JSON.stringify({ ...head, choices, usage })}\n\n`;
const delta = (d, finish = null) => frame([{ index: 0, delta: d, logprobs: null, finish_reason: finish }]);

const s1Bodies = new Map();
function s1Events(n) {
  let events = s1Bodies.get(n);
  if (!events) {
    events = [delta({ role: 'assistant', content: '' })];
    for (let i = 0; i < n; i++) events.push(delta({ content: TEXTS[i % TEXTS.length] }));
    events.push(delta({}, 'stop'), frame([], { prompt_tokens: 10, completion_tokens: n, total_tokens: 10 + n }), 'data: [DONE]\n\n');
    s1Bodies.set(n, events);
  }
  return events;
}

function s2Events(k, messages) {
  let results = 0;
  for (const m of messages) if (m.role === 'tool') results++;
  const usage = frame([], { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });
  if (results < k) {
    const call = { index: 0, id: `call_${results}`, type: 'function', function: { name: 'echo', arguments: `{"i":${results}}` } };
    return [delta({ role: 'assistant', content: null, tool_calls: [call] }), delta({}, 'tool_calls'), usage, 'data: [DONE]\n\n'];
  }
  return [delta({ role: 'assistant', content: 'done' }), delta({}, 'stop'), usage, 'data: [DONE]\n\n'];
}

const server = createServer((req, res) => {
  const parts = [];
  req.on('data', (part) => parts.push(part));
  req.on('end', () => {
    let body;
    try {
      body = JSON.parse(Buffer.concat(parts).toString('utf8'));
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"bad JSON","type":"invalid_request_error"}}');
      return;
    }
    const first = body.messages?.find((m) => m.role === 'user');
    const text = typeof first?.content === 'string' ? first.content : (first?.content?.[0]?.text ?? '');
    const [workload, size, framing] = text.split(':');
    const events = workload === 's1w' ? s1Events(Number(size)) : workload === 's2r' ? s2Events(Number(size), body.messages) : undefined;
    if (!events) {
      res
        .writeHead(400, { 'content-type': 'application/json' })
        .end(`{"error":{"message":"unknown workload ${JSON.stringify(text)}","type":"invalid_request_error"}}`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    if (framing === 'events') {
      for (const event of events) res.write(event);
      res.end();
    } else res.end(events.join(''));
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => process.stdout.write(`${server.address().port}\n`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
process.on('disconnect', () => process.exit(0));
