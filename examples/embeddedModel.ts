import { startFakeOpenAIServer, type FakeChatRequest, type FakeOpenAIServer, type FakeReplyTurn } from '../src/testing/index';

/** What the embedded model says last depends on whether the booking went through. */
function finalAnswer(request: FakeChatRequest): FakeReplyTurn {
  const toolMessages = thisTurn(request).filter((m) => m.role === 'tool');
  const last = toolMessages.at(-1)?.content;
  const booking = typeof last === 'string' ? last : '';
  // Asked for structured output (`--json`): the answer is the plan as JSON, streamed in pieces.
  if (isRecord(request.response_format) && request.response_format.type === 'json_schema') return jsonAnswer(booking);
  const text = booking.includes('Permission denied')
    ? 'It is sunny and 21°C in Paris. Café de Flore looks good for this afternoon, but I did not book a table, as the booking was not approved. Tell me if you change your mind!'
    : booking.includes('was interrupted')
      ? 'It is sunny and 21°C in Paris. I tried to book Café de Flore for 16:00, but the booking was interrupted and I cannot tell whether it went through: please check with the café before booking again.'
      : 'Done! It is sunny and 21°C in Paris, and your table for 2 at Café de Flore is booked for 16:00.';
  return { text, usage: { prompt_tokens: 420, completion_tokens: 38 }, delayMs: 15 };
}

function jsonAnswer(booking: string): FakeReplyTurn {
  const status = booking.includes('Permission denied') ? 'not-approved' : booking.includes('was interrupted') ? 'unknown' : 'booked';
  const plan = {
    weather: { city: 'Paris', condition: 'sunny', celsius: 21 },
    place: 'Café de Flore',
    booking: { status, time: status === 'booked' ? '16:00' : null, people: status === 'booked' ? 2 : null },
    summary:
      status === 'booked'
        ? 'Sunny and 21°C: your table for 2 at Café de Flore is booked for 16:00.'
        : status === 'not-approved'
          ? 'Sunny and 21°C: Café de Flore looks good, but the booking was not approved.'
          : 'Sunny and 21°C: the booking at Café de Flore was interrupted; check with the café.',
  };
  const json = JSON.stringify(plan);
  const pieces: string[] = [];
  for (let i = 0; i < json.length; i += 12) pieces.push(json.slice(i, i + 12));
  return { text: pieces, usage: { prompt_tokens: 460, completion_tokens: 72 }, delayMs: 5 };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

const firstTurn: FakeReplyTurn = {
  text: 'Let me check the weather and look for a café.',
  toolCalls: [
    { id: 'call_weather', name: 'get_weather', args: { city: 'Paris' }, chunks: 3 },
    { id: 'call_places', name: 'search_places', args: { city: 'Paris', kind: 'cafe' }, chunks: 3 },
  ],
  usage: { prompt_tokens: 180, completion_tokens: 41 },
  delayMs: 15,
};

const secondTurn: FakeReplyTurn = {
  text: 'Café de Flore it is. I will book a table.',
  toolCalls: [{ id: 'call_book', name: 'book_table', args: { place: 'Café de Flore', time: '16:00', people: 2 }, chunks: 4 }],
  usage: { prompt_tokens: 320, completion_tokens: 33 },
  delayMs: 15,
};

/** The messages since the user's last one: the turn being answered (a session holds earlier ones). */
function thisTurn(request: FakeChatRequest): ReadonlyArray<Record<string, unknown>> {
  const messages = request.messages ?? [];
  let lastUser = messages.length - 1;
  while (lastUser >= 0 && messages[lastUser].role !== 'user') lastUser--;
  return messages.slice(lastUser + 1);
}

/**
 * The next turn follows from the conversation so far, not from how many requests this server has
 * seen: a run resumed in another process (`--redis --resume`) asks a fresh server mid-conversation.
 */
function nextTurn(request: FakeChatRequest): FakeReplyTurn {
  const toolResults = thisTurn(request).filter((m) => m.role === 'tool').length;
  if (toolResults === 0) return firstTurn;
  return toolResults < 3 ? secondTurn : finalAnswer(request);
}

/**
 * Starts the demo's default model: a scripted conversation served by an OpenAI-compatible
 * streaming (SSE) server on 127.0.0.1, so the real `openai` client, SSE parsing and tool-call
 * deltas are all exercised without an API key. `delayMs` paces it: the time before each chunk (a
 * word of text, a piece of a call's arguments; default 15), slow enough in the web demo to reload
 * the page while an answer streams.
 */
export function startEmbeddedModel(options: { delayMs?: number } = {}): Promise<FakeOpenAIServer> {
  const { delayMs } = options;
  if (delayMs !== undefined && !(delayMs >= 0)) throw new TypeError(`startEmbeddedModel: 'delayMs' must be a number >= 0, got ${String(delayMs)}`);
  const paced = (request: FakeChatRequest): FakeReplyTurn => {
    const turn = nextTurn(request);
    return delayMs === undefined ? turn : { ...turn, delayMs };
  };
  return startFakeOpenAIServer([paced], { loop: true });
}
