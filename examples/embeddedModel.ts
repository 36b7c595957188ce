import { startFakeOpenAIServer, type FakeChatRequest, type FakeOpenAIServer } from '../src/testing/index';

/** What the embedded model says last depends on whether the booking went through. */
function finalAnswer(request: FakeChatRequest) {
  const toolMessages = (request.messages ?? []).filter((m) => m.role === 'tool');
  const last = toolMessages.at(-1)?.content;
  const booking = typeof last === 'string' ? last : '';
  const text = booking.includes('Permission denied')
    ? 'It is sunny and 21°C in Paris. Café de Flore looks good for this afternoon, but I did not book a table, as the booking was not approved. Tell me if you change your mind!'
    : 'Done! It is sunny and 21°C in Paris, and your table for 2 at Café de Flore is booked for 16:00.';
  return { text, usage: { prompt_tokens: 420, completion_tokens: 38 }, delayMs: 15 };
}

/**
 * Starts the demo's default model: a scripted conversation served by an OpenAI-compatible
 * streaming (SSE) server on 127.0.0.1, so the real `openai` client, SSE parsing and tool-call
 * deltas are all exercised without an API key.
 */
export function startEmbeddedModel(): Promise<FakeOpenAIServer> {
  return startFakeOpenAIServer([
    {
      text: 'Let me check the weather and look for a café.',
      toolCalls: [
        { id: 'call_weather', name: 'get_weather', args: { city: 'Paris' }, chunks: 3 },
        { id: 'call_places', name: 'search_places', args: { city: 'Paris', kind: 'cafe' }, chunks: 3 },
      ],
      usage: { prompt_tokens: 180, completion_tokens: 41 },
      delayMs: 15,
    },
    {
      text: 'Café de Flore it is. I will book a table.',
      toolCalls: [{ id: 'call_book', name: 'book_table', args: { place: 'Café de Flore', time: '16:00', people: 2 }, chunks: 4 }],
      usage: { prompt_tokens: 320, completion_tokens: 33 },
      delayMs: 15,
    },
    finalAnswer,
  ]);
}
